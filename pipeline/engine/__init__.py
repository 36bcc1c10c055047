"""Building a TensorRT engine and keeping it: the one module that imports TensorRT
(backend), parse and build (build, build_hints, parse_errors, network_inputs), the engine
key (cache_key), the store of engines (store) with its timing caches (timing_cache), the
manifest beside each plan (manifest) and whether one is current (verify). Enter by build."""
