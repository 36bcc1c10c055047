"""Restore reused jobs in the submitting process, before any worker starts.

A job identical to a finished one is restored, not run (pipeline/sweeps/job_cache.py). Sent to
a launcher, even such a job waits for a worker: joblib's wait for the forkserver's
imports (pipeline/sweeps/warm_workers.py: ~1.5 s here, most of a rerun), a local Ray's for Ray
to start and each of its workers to import the pipeline (~5 s). So the
sweeper asks first: where the batch's first job would be restored, every job is looked
up, the ones that would be restored run right here (Hydra's run_job, as the basic
launcher does: same folder, .hydra/, run.log and result), and only the rest go to the
launcher. A batch whose first job must run is launched whole, so a cold sweep composes
one job more, not every job twice. Either way each job still decides reuse for itself,
with the stores verified: the look-up here only chooses where it runs.

Only for launchers whose workers run on this machine (joblib; Ray started here for the
sweep, `hydra.launcher.address=local`, which a rerun then never starts): a job on a Ray
cluster or under SLURM runs on a node whose fingerprint (hence job key) the submitter
does not know, and so does a job pinned to a GPU model (`sweep.accelerator_type`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn, configure_log, run_job
from omegaconf import DictConfig, open_dict, read_write


def runs_here(launcher: Any) -> bool:
    """Whether the launcher's workers run on this machine."""
    name = type(launcher).__name__
    return name == "JoblibLauncher" or (
        name == "TrtRayLauncher" and launcher.params.address == "local"
    )


class ReuseFirst:
    """A launcher in front of another: restores what it can, launches the rest."""

    def __init__(
        self, inner: Any, hydra_context: Any, task_function: Any, config: DictConfig
    ) -> None:
        self.inner, self.hydra_context, self.task_function, self.config = (
            inner,
            hydra_context,
            task_function,
            config,
        )

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _compose(self, overrides: Sequence[str], idx: int) -> DictConfig:
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        with open_dict(cfg):
            cfg.hydra.job.id = f"{cfg.hydra.job.name}_{idx}"
            cfg.hydra.job.num = idx
        return cfg

    def _restorable(self, cfg: DictConfig) -> bool:
        from hydra.core.hydra_config import HydraConfig

        from pipeline.core import config
        from pipeline.core.errors import PipelineError
        from pipeline.sweeps import job_cache
        from pipeline.sweeps.job import REPO

        HydraConfig.instance().set_config(
            cfg
        )  # the job's own ${hydra:...} resolve as in its worker
        if cfg.get("sweep", {}).get("accelerator_type"):
            return False  # it runs where Ray puts it
        task = cfg.copy()
        with read_write(task), open_dict(task):
            del task["hydra"]
        try:
            return job_cache.restorable(REPO, config.validate(task))
        except (PipelineError, OSError):
            return False  # its worker reports it, as for any job

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        if not job_overrides:
            return []
        first = self._compose(job_overrides[0], initial_job_idx)
        if not self._restorable(first):
            return self.inner.launch(job_overrides, initial_job_idx)
        here: dict[int, DictConfig] = {0: first}
        for i, overrides in enumerate(job_overrides[1:], start=1):
            cfg = self._compose(overrides, initial_job_idx + len(here))
            if self._restorable(cfg):
                here[i] = cfg
        rest = [o for i, o in enumerate(job_overrides) if i not in here]
        returns: dict[int, JobReturn] = {}
        for i, cfg in here.items():
            returns[i] = run_job(
                hydra_context=self.hydra_context,
                task_function=self.task_function,
                config=cfg,
                job_dir_key="hydra.sweep.dir",
                job_subdir_key="hydra.sweep.subdir",
            )
            configure_log(
                self.config.hydra.hydra_logging, self.config.hydra.verbose
            )  # out of the job's run.log
        launched = iter(self.inner.launch(rest, initial_job_idx + len(here)) if rest else [])
        return [returns[i] if i in here else next(launched) for i in range(len(job_overrides))]
