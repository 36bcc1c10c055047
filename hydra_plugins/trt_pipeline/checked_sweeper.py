"""Hydra's basic sweeper, less its second composition of every job.

Before launching, the basic sweeper composes each job's config to catch a bad one early,
and the launcher then composes each again to run it: two compositions per job, about
0.2 s each, a third of a 6-job sweep's start and 80 s of a 200-job one. `python -m
pipeline.cli.run` has already checked every value the sweep names against conf/ and the
schema (pipeline/cli/overrides.py, with clearer errors); where it has checked exactly these
overrides, and no `hydra.sweeper.params` adds others, the sweeper's own pass is skipped.
Anything else (a sweep started another way) is validated as Hydra always does.

It orders the jobs so that those sharing an intermediate product are not started side
by side (job_order.py), and in front of a launcher whose workers run on this machine
(joblib, a Ray started for the sweep) it restores the jobs that would be reused right
away, before any worker starts (reuse_first.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, cast

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore
from hydra.core.object_type import ObjectType
from hydra.core.override_parser.types import Override
from hydra.plugins.launcher import Launcher

from hydra_plugins.trt_pipeline import job_order, reuse_first


@dataclass
class CheckedSweeperConf:
    _target_: str = "hydra_plugins.trt_pipeline.checked_sweeper.CheckedSweeper"
    max_batch_size: int | None = None
    params: dict[str, str] | None = None


ConfigStore.instance().store(
    group="hydra/sweeper", name="trt_checked", node=CheckedSweeperConf, provider="trt_pipeline"
)


class _PrimaryConfigOptions:
    """Hydra's glob() sweep lists a group's options without naming the primary config, so
    that config's hydra.searchpath (pkg://pipeline.conf, where the package's options live)
    is left out and `precision=glob(fp*)` would match none of them: it is named here."""

    def __init__(self, loader: Any, config_name: str | None) -> None:
        self._loader, self._config_name = loader, config_name

    def get_group_options(
        self,
        group_name: str,
        results_filter: Any = ObjectType.CONFIG,
        config_name: str | None = None,
        overrides: list[str] | None = None,
    ) -> list[str]:
        options: list[str] = self._loader.get_group_options(
            group_name,
            results_filter=results_filter,
            config_name=config_name or self._config_name,
            overrides=overrides,
        )
        return options

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


class CheckedSweeper(BasicSweeper):
    _arguments: tuple[str, ...] | None = None  # what sweep() was given

    def setup(self, *, hydra_context: Any, task_function: Any, config: Any) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self.hydra_context = dataclasses.replace(
            hydra_context,
            config_loader=cast(
                Any,
                _PrimaryConfigOptions(hydra_context.config_loader, config.hydra.job.config_name),
            ),
        )
        if reuse_first.runs_here(self.launcher):
            # ReuseFirst stands in for the launcher: it has launch(), and hands every other
            # attribute to the launcher it wraps (a Launcher subclass would be a plugin).
            self.launcher = cast(
                Launcher,
                reuse_first.ReuseFirst(self.launcher, hydra_context, task_function, config),
            )

    def sweep(self, arguments: list[str]) -> Any:
        self._arguments = tuple(arguments)
        return super().sweep(arguments)

    @staticmethod
    def split_arguments(
        overrides: list[Override], max_batch_size: int | None
    ) -> list[list[list[str]]]:
        """Hydra's jobs, by its own rules, in job_order's order."""
        [jobs] = BasicSweeper.split_arguments(overrides, None)
        jobs = job_order.ordered(jobs, job_order.shared_stage_params())
        return (
            [jobs]
            if max_batch_size is None
            else list(BasicSweeper.split_overrides_to_chunks(jobs, max_batch_size))
        )

    def validate_batch_is_legal(self, batch: Any) -> None:
        from pipeline.cli import overrides

        if not self.params and overrides.checked_sweep == self._arguments:
            return
        super().validate_batch_is_legal(batch)
