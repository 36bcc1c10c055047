"""DVC stage `fingerprint`: see dvc.yaml for its params, deps and outs."""

from pipeline import cli, config, steps
from pipeline.layout import Layout


def main() -> None:
    steps.fingerprint(config.load("params.yaml"), Layout())


if __name__ == "__main__":
    cli.run(main)
