"""DVC stage `calibrate`: see dvc.yaml for its params, deps and outs."""

from pipeline.core import config, exits
from pipeline.core.layout import Layout
from pipeline.flow import stages


def main() -> None:
    stages.calibrate(config.load("params.yaml"), Layout())


if __name__ == "__main__":
    exits.run(main)
