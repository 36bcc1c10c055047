"""trt-pipeline: declarative TensorRT engine builds (Hydra configs, DVC stages, a per-GPU engine
store, build reports and benchmarks). The layers and their import order: README, Layout."""
