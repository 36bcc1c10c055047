"""`trt-pipeline stage <name>`: one DVC stage, the same function stages/<name>.py runs in
this repository, for the dvc.yaml that `trt-pipeline init` writes into another one (its
commands call the installed package, so upgrading it changes no file there)."""

from __future__ import annotations

from pipeline.core.layout import Layout


def run(name: str, params: str = "params.yaml") -> int:
    from pipeline.flow import steps

    if name == "fingerprint":
        # Runs on every `dvc repro`: only the build settings it needs, not the whole
        # validated config (as stages/fingerprint.py).
        from pipeline.machine import build_settings

        steps.fingerprint(build_settings.load(params), Layout())
        return 0
    from pipeline.core import config

    getattr(steps, name)(config.load(params), Layout())
    return 0
