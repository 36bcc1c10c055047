"""Hydra entry point: every stage for one composed config, in the job's own folder.

    python -m pipeline.cli.run precision=fp16
    python -m pipeline.cli.run --multirun precision=fp32,fp16 model=cnn,transformer
    python -m pipeline.cli.run --multirun hydra/launcher=joblib hydra.launcher.n_jobs=2 precision=fp32,fp16

The command line is checked here (overrides against conf/ and the schema, before Hydra
sees them); the job itself is pipeline/sweeps/job.py. This module imports nothing heavy at its
top, so a joblib sweep starts its workers' forkserver (pipeline/sweeps/warm_workers.py) before
Hydra and the pipeline are imported: its imports, the longest part of a sweep's start,
then begin at once on the second core."""

from __future__ import annotations

import sys


def _overrides(argv: list[str]) -> list[str]:
    """The overrides among Hydra's arguments: not flags, not a flag's value."""
    takes_value = {
        "--config-path",
        "-cp",
        "--config-name",
        "-cn",
        "--config-dir",
        "-cd",
        "--experimental-rerun",
        "--info",
        "-i",
        "--shell-completion",
        "-sc",
        "--cfg",
        "-c",
        "--package",
        "-p",
    }
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in takes_value:
            skip = a not in ("--info", "-i")
        elif not a.startswith("-"):
            out.append(a)
    return out


def main_checked(argv: list[str]) -> int:
    """Overrides are checked against conf/ and the schema before Hydra sees them, so a
    misspelt key is one line naming the nearest valid ones, not Hydra's error block."""
    from pipeline.core.errors import PipelineError
    from pipeline.sweeps import warm_workers

    args = argv[1:]
    # Hydra answers two modes at once with a traceback.
    modes = {
        m
        for a in args
        for m in (
            ("--multirun", "-m"),
            ("--cfg", "-c"),
            ("--info", "-i"),
            ("--shell-completion", "-sc"),
        )
        if a in m
    }
    if len(modes) > 1:
        hint = (
            " (--cfg shows one job's config: drop --multirun and give each sweep one value)"
            if {m[0] for m in modes} == {"--cfg", "--multirun"}
            else ""
        )
        raise PipelineError(f"only one of {', '.join(sorted(m[0] for m in modes))} at a time{hint}")
    if not any(
        a in ("--help", "-h", "--hydra-help", "--shell-completion", "-sc", "--info", "-i")
        for a in args
    ):
        given = _overrides(args)
        multirun = any(a in ("--multirun", "-m") for a in args) or "hydra.mode=MULTIRUN" in given
        if (
            multirun
            and warm_workers.wanted(given)
            and (jobs := warm_workers.n_jobs(given)) is not None
        ):
            warm_workers.start(
                jobs=jobs
            )  # first: the workers' imports overlap ours and Hydra's composing
        from pipeline.cli import overrides
        from pipeline.sweeps import job

        overrides.check(given, job.REPO / "conf", multirun=multirun)
        if any(
            a in ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd")
            for a in args
        ):
            overrides.checked_sweep = (
                None  # checked against conf/config.yaml, not what Hydra will compose
            )
    from pipeline.core import console
    from pipeline.sweeps import job

    console.capture_third_party_logs()
    sys.argv = argv
    job.main()
    return 0


def complete(argv: list[str]) -> int:
    """Hydra's shell completion for the `trt-pipeline` console script: its bash function
    calls `trt-pipeline -sc query=bash` with the line typed so far; only `run` takes
    Hydra overrides, so that word is dropped before Hydra reads the line."""
    import os
    import re

    line = os.environ.get("COMP_LINE")
    if line is not None:
        if not re.match(r"^\s*\S+\s+run(\s|$)", line):
            return 0
        os.environ["COMP_LINE"] = re.sub(r"^(\s*\S+)\s+run", r"\1", line, count=1)
    from pipeline.sweeps import job

    sys.argv = ["trt-pipeline", *argv]
    job.main()
    return 0


if __name__ == "__main__":
    from pipeline.core import exits

    exits.run(lambda: main_checked(sys.argv))
