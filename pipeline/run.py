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


if __name__ == "__main__":
    main()
