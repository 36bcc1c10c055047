"""Model factories. Each module exposes INPUT_NAMES, OUTPUT_NAMES, DYNAMIC_AXES,
build(seed) -> torch.nn.Module and sample_inputs(dims, rng) -> {name: array}."""
