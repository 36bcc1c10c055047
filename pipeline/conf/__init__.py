"""The package's Hydra config groups (model, precision, profile, calibration, build,
benchmark, inspect) and its base config, trt_pipeline.yaml. A repository's conf/config.yaml
puts them on Hydra's search path (`pkg://pipeline.conf`) and holds only its own choices."""
