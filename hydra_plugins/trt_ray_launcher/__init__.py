"""A small Hydra launcher that runs each sweep job as a Ray task pinned to a GPU model
(`hydra/launcher=trt_ray`, `sweep.accelerator_type=A100,H100`). See README "Sweeps and fleets"."""
