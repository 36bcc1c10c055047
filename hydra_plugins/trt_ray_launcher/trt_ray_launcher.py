"""Hydra launcher: every job a Ray task, pinned to a GPU model by Ray's accelerator-type
resource (`accelerator_type:<name>`, which Ray advertises on GPU nodes, or which a node
declares with `ray start --resources`).

Chosen over hydra-ray-launcher 1.2.2: that one pins cloudpickle<3 (ray 2.60 needs 3.x),
has no per-job resources and waits forever for a resource no node has.

- Before anything is submitted: the cluster must answer (a TCP check of `address`, then
  `ray.init`), and every asked-for accelerator type must exist in
  `ray.cluster_resources()`; otherwise one line on stderr and exit 1.
- A job whose node dies is reported failed (`max_retries: 0` by default; Ray raises
  for the lost task), never waited on; so is a job still queued for an accelerator type
  no live node has any more. The other jobs go on. Each failure is one line on stderr;
  when every job has ended, the multirun ends as usual (the sweep summary lists the
  failed jobs), then exit 1.
- Engines land in one store: the submitter's (`build.store_dir`, `$TRT_PIPELINE_STORE` or
  `store_dir` here) is passed to every task as `$TRT_PIPELINE_STORE`, so it must be a
  folder every node mounts (NFS, Lustre, ...). The job folders are written under the
  submitter's sweep folder in the same way.
"""

import logging
import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import (
    JobReturn,
    JobStatus,
    configure_log,
    filter_overrides,
    run_job,
    setup_globals,
)
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

if TYPE_CHECKING:
    from hydra._internal.callbacks import Callbacks
    from hydra.core.config_loader import ConfigLoader

log = logging.getLogger(__name__)


@dataclass
class TrtRayLauncherConf:
    _target_: str = "hydra_plugins.trt_ray_launcher.trt_ray_launcher.TrtRayLauncher"
    # null: Ray's choice ($RAY_ADDRESS, else a cluster started on this machine, else a new
    # local one); "local": a new Ray on this machine for this sweep, which a rerun whose
    # jobs are all reused never starts; "auto" or "host:port": join that cluster.
    address: str | None = None
    connect_timeout_s: float = 10.0
    num_cpus: float = 1.0  # per job
    max_retries: int = 0  # a job on a dead node fails; set >0 to rerun it elsewhere
    # How often to look for jobs queued on an accelerator type no live node has any more
    # (their node died): they fail rather than wait for ever.
    check_nodes_s: float = 5.0
    # The engine store every task writes (a folder all nodes mount); null: the submitter's.
    store_dir: str | None = None
    # Extra environment for every task; PYTHONPATH defaults to the submitter's checkout.
    env: dict[str, str] = field(default_factory=dict)


ConfigStore.instance().store(
    group="hydra/launcher", name="trt_ray", node=TrtRayLauncherConf, provider="trt_pipeline"
)


def fail(message: str) -> None:
    """One line on stderr, exit 1 (Hydra would add a hint and a traceback)."""
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    raise SystemExit(1)


def _check_reachable(address: str, timeout: float) -> None:
    if address in ("auto", "local") or address.startswith("ray://"):
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or address, int(port or 6379)), timeout=timeout):
            pass
    except (OSError, ValueError) as e:
        fail(f"Ray cluster at {address} does not answer ({e.__class__.__name__}: {e})")


def _accelerator_types() -> set[str]:
    import ray

    return {
        k.split(":", 1)[1] for k in ray.cluster_resources() if k.startswith("accelerator_type:")
    }


def _ensure_job_folder(cfg: DictConfig) -> None:
    """A job that never ran has no folder; give it one, as Hydra would have, so the sweep
    summary lists it as failed."""
    hydra_dir = Path(str(cfg.hydra.sweep.dir), str(cfg.hydra.sweep.subdir), ".hydra")
    if not hydra_dir.is_dir():
        hydra_dir.mkdir(parents=True)
        OmegaConf.save(cfg.hydra.overrides.task, hydra_dir / "overrides.yaml")


def _execute(
    sweep_config: DictConfig, task_function: TaskFunction, singleton_state: dict
) -> tuple[JobReturn, dict]:
    """In the Ray worker: run the job as Hydra would; (Hydra's JobReturn, whether it
    failed and where it ran)."""
    import ray

    from pipeline.sweeps.job_files import ERROR_FILE

    Singleton.set_state(singleton_state)
    setup_globals()
    # run_job reads only the context's callbacks: a worker has no config loader, and no
    # callbacks to call (HydraContext's types ask for both).
    context = HydraContext(
        config_loader=cast("ConfigLoader", None), callbacks=cast("Callbacks", _NoCallbacks())
    )
    ret = run_job(
        hydra_context=context,
        config=sweep_config,
        task_function=task_function,
        job_dir_key="hydra.sweep.dir",
        job_subdir_key="hydra.sweep.subdir",
    )
    out = Path(sweep_config.hydra.runtime.output_dir)
    # In a multirun, pipeline.sweeps.job returns from a failed job (no SystemExit, which would
    # kill this worker and read as a crash Ray may retry) and leaves its reason here.
    if (out / ERROR_FILE).is_file():
        return ret, {"status": "FAILED", "error": (out / ERROR_FILE).read_text().strip()}
    ctx = ray.get_runtime_context()
    node: dict[str, Any] = next((n for n in ray.nodes() if n["NodeID"] == ctx.get_node_id()), {})
    where = {
        "node_id": ctx.get_node_id(),
        "accelerator_types": sorted(
            k.split(":", 1)[1]
            for k in node.get("Resources", {})
            if k.startswith("accelerator_type:")
        ),
    }
    (out / "ray_node.json").write_text(__import__("json").dumps(where, indent=2) + "\n")
    failed = ret.status != JobStatus.COMPLETED
    return ret, {"status": ret.status.name, "error": repr(ret._return_value) if failed else None}


class _NoCallbacks:
    def on_job_start(self, **kwargs: Any) -> None: ...

    def on_job_end(self, **kwargs: Any) -> None: ...


class TrtRayLauncher(Launcher):
    def __init__(self, **params: Any) -> None:
        self.params = TrtRayLauncherConf(**{k: v for k, v in params.items() if k != "_target_"})
        self.config: DictConfig | None = None
        self.task_function: TaskFunction | None = None
        self.hydra_context: HydraContext | None = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def _sweep_configs(
        self, job_overrides: Sequence[Sequence[str]], first: int
    ) -> list[DictConfig]:
        assert self.hydra_context is not None and self.config is not None  # setup() came first
        configs = []
        for idx, overrides in enumerate(job_overrides):
            cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(cfg):
                cfg.hydra.job.id = f"{first + idx}"
                cfg.hydra.job.num = first + idx
            configs.append(cfg)
        return configs

    def _task_env(self, configs: list[DictConfig]) -> dict:
        from pipeline.store import ENGINES

        store = self.params.store_dir or configs[0].get("build", {}).get("store_dir")
        package_file = __import__("pipeline").__file__
        assert package_file is not None  # pipeline is a regular package
        env = {
            ENGINES.env: str(ENGINES.root(store).resolve()),
            "PYTHONPATH": os.pathsep.join(
                p
                for p in (
                    str(Path(package_file).parents[1]),
                    os.environ.get("PYTHONPATH"),
                )
                if p
            ),
        }
        if os.environ.get("TRT_PIPELINE_CALIB_CACHE"):
            env["TRT_PIPELINE_CALIB_CACHE"] = os.environ["TRT_PIPELINE_CALIB_CACHE"]
        return {**env, **dict(self.params.env)}

    def _outcomes(
        self, configs: list[DictConfig], wanted: list[str | None], refs: list
    ) -> list[tuple[JobReturn | None, dict]]:
        """Every job's outcome in job order (its JobReturn, None where it never ran, and
        whether it failed); a failure is one line on stderr when it happens."""
        import ray

        outcomes: dict[int, tuple[JobReturn | None, dict]] = {}

        def finish(i: int, ret: JobReturn | None, info: dict) -> None:
            outcomes[i] = ret, info
            if info["status"] != JobStatus.COMPLETED.name:
                overrides = " ".join(filter_overrides(configs[i].hydra.overrides.task))
                print(
                    f"error: job #{configs[i].hydra.job.num} ({overrides}) failed: {info['error']}",
                    file=sys.stderr,
                )

        pending = {ref: i for i, ref in enumerate(refs)}
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=self.params.check_nodes_s)
            for ref in done:
                try:
                    ret, info = ray.get(ref)
                except Exception as e:  # a dead node or worker: this job failed, the others go on
                    ret, info = (
                        None,
                        {
                            "status": "FAILED",
                            "error": f"{e.__class__.__name__}: {str(e).splitlines()[0]}",
                        },
                    )
                finish(pending.pop(ref), ret, info)
            # Ray keeps a task that no live node can take queued for ever (an autoscaler might
            # add a node), so a job queued behind another on a node that died would hang.
            have = _accelerator_types()
            for ref, i in list(pending.items()):
                if wanted[i] and wanted[i] not in have:
                    ray.cancel(ref)
                    del pending[ref]
                    finish(
                        i,
                        None,
                        {
                            "status": "FAILED",
                            "error": f"no live node of the Ray cluster has accelerator type {wanted[i]} any more",
                        },
                    )
        return [outcomes[i] for i in range(len(refs))]

    def launch(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int
    ) -> Sequence[JobReturn]:
        import ray

        assert self.config is not None and self.hydra_context is not None  # setup() came first
        assert self.task_function is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        configs = self._sweep_configs(job_overrides, initial_job_idx)
        address = self.params.address
        if address:
            _check_reachable(address, self.params.connect_timeout_s)
        if not ray.is_initialized():
            try:
                ray.init(address=address, log_to_driver=True, logging_level=logging.WARNING)
            except (ConnectionError, RuntimeError, TimeoutError) as e:
                fail(
                    f"Ray cluster at {address or 'local'} does not answer: {str(e).splitlines()[0]}"
                )
        have = _accelerator_types()
        wanted = [c.get("sweep", {}).get("accelerator_type") for c in configs]
        missing = sorted({w for w in wanted if w and w not in have})
        if missing:
            fail(
                f"sweep.accelerator_type={','.join(missing)}: no node of the Ray cluster has it "
                f"(the cluster has: {', '.join(sorted(have)) or 'no accelerator types'})"
            )
        env = self._task_env(configs)
        remote = ray.remote(_execute)
        state = Singleton.get_state()
        log.info(
            f"Ray launcher: {len(configs)} job(s) into {self.config.hydra.sweep.dir}, store {env['TRT_PIPELINE_STORE']}"
        )
        refs = []
        for cfg, want in zip(configs, wanted):
            lst = filter_overrides(cfg.hydra.overrides.task)
            log.info(f"\t#{cfg.hydra.job.num} : {' '.join(lst)}" + (f" on {want}" if want else ""))
            resources = {f"accelerator_type:{want}": 0.001} if want else {}
            refs.append(
                remote.options(
                    num_cpus=self.params.num_cpus,
                    resources=resources,
                    max_retries=self.params.max_retries,
                    runtime_env={"env_vars": env},
                ).remote(cfg, self.task_function, state)
            )
        returns = []
        for cfg, (ran, info) in zip(configs, self._outcomes(configs, wanted, refs)):
            # Hydra's own JobReturn from the worker, as every launcher gives it; one made
            # here for a job that never ran (its node died, or no node can take it).
            ret = ran or JobReturn(overrides=list(cfg.hydra.overrides.task), cfg=cfg)
            if info["status"] != JobStatus.COMPLETED.name:
                ret.status = JobStatus.FAILED
                ret.return_value = RuntimeError(info["error"])
                _ensure_job_folder(cfg)
            returns.append(ret)
        if any(r.status != JobStatus.COMPLETED for r in returns):
            # Hydra would raise the first failure: a traceback, and no on_multirun_end, so no
            # sweep summary. Every job has ended by now, so end the multirun here, exit 1.
            self.hydra_context.callbacks.on_multirun_end(
                config=self.config, config_name=self.config.hydra.job.config_name
            )
            raise SystemExit(1)
        return returns
