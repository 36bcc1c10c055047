"""The command line: `trt-pipeline` / `python -m pipeline`, the Hydra entry (`run`), the cache
commands, `status`, what `diff` accepts, and the override checks made before Hydra or DVC."""
