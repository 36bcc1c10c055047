"""DVC stage `fingerprint`: see dvc.yaml for its params, deps and outs.

It runs on every `dvc repro`, so it reads only the build settings it needs
(pipeline/machine/build_settings.py), not the whole validated config."""

from pipeline.core import exits
from pipeline.core.layout import Layout
from pipeline.flow import fingerprint_stage
from pipeline.machine import build_settings


def main() -> None:
    fingerprint_stage.run(build_settings.load("params.yaml"), Layout())


if __name__ == "__main__":
    exits.run(main)
