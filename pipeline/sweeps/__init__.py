"""Hydra sweeps: one job's run, job reuse, the sweep summary and the joblib workers.

Kept free of imports: `pipeline.cli.run` starts the workers' forkserver before anything heavy."""
