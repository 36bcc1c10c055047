"""Hydra entry point: every stage for one composed config, in the job's own folder.

    python -m pipeline.run precision=fp16
    python -m pipeline.run --multirun precision=fp32,fp16 model=cnn,transformer

Each job calls the same functions as the DVC stages (pipeline/steps.py) and leaves
artifacts/, metrics/ and result.json in its Hydra output folder."""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from pipeline import steps
from pipeline.core import config, fileio
from pipeline.core.cli import one_line
from pipeline.core.errors import PipelineError
from pipeline.core.layout import Layout


def job_result(results: dict) -> dict:
    bench = results["benchmark"]["results"]
    manifest = results["build"]
    return {
        "model": results["benchmark"]["model"],
        "precision": results["benchmark"]["precision"],
        "engine_sha256": manifest["engine"]["sha256"],
        "engine_bytes": manifest["engine"]["bytes"],
        "backend": manifest["backend"],
        "fingerprint": manifest["fingerprint"]["id"],
        "accuracy": results["calibrate"]["accuracy"],
        "benchmark": {k: {m: v.get(m) for m in ("status", "median_ms", "throughput_per_s", "reason") if m in v}
                      for k, v in bench.items()},
    }


@hydra.main(config_path="../conf", config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    out = Path(HydraConfig.get().runtime.output_dir)
    try:
        validated = config.validate(cfg)
        results = steps.run_all(validated, Layout(out))
    except PipelineError as e:
        print(f"error: {one_line(e)}", file=sys.stderr)
        raise SystemExit(1) from None
    fileio.write_json(out / "result.json", job_result(results))
    print(f"{out}: {validated.model.name} {validated.precision.name} done")


def _overrides(argv: list[str]) -> list[str]:
    """The overrides among Hydra's arguments: not flags, not a flag's value."""
    takes_value = {"--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun",
                   "--info", "-i", "--shell-completion", "-sc"}
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
    from pipeline import overrides
    from pipeline.core import console

    args = argv[1:]
    if not any(a in ("--help", "-h", "--hydra-help", "--shell-completion", "-sc", "--info", "-i", "--cfg", "-c")
               for a in args):
        overrides.check(_overrides(args), Path(__file__).resolve().parents[1] / "conf")
    console.capture_third_party_logs()
    sys.argv = argv
    main()
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
    sys.argv = ["trt-pipeline", *argv]
    main()
    return 0


if __name__ == "__main__":
    from pipeline.core import cli

    cli.run(lambda: main_checked(sys.argv))
