"""`python -m pipeline <command>`: the same command line as `trt-pipeline` (pipeline/cli/main.py)."""

from pipeline.cli.main import console

if __name__ == "__main__":
    console()
