"""The terminal: verbosity from the environment, bars that stay out of quiet runs, and
ModelOpt's console logging kept in a file (shown with -v)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline.core import console

LEAK = """
import logging, sys
from pipeline.core import console
console.capture_third_party_logs()
from modelopt.onnx.autocast import logging_config
from modelopt.onnx.autocast.logging_config import configure_logging
configure_logging()  # ModelOpt calls it again on each conversion
logging.getLogger("modelopt.onnx.autocast.precisionconverter").warning("Did not find  in value info map!")
"""


@pytest.mark.parametrize(
    "value,level", [("quiet", -1), ("normal", 0), ("verbose", 1), ("", 0), ("nonsense", 0)]
)
def test_verbosity_comes_from_the_environment(monkeypatch, value, level):
    monkeypatch.setenv(console.ENV, value)
    assert console.verbosity() == level


def test_stage_table_is_printed_to_stderr_unless_quiet(monkeypatch, capsys):
    monkeypatch.setenv(console.ENV, "normal")
    console.table(
        "benchmark: cnn fp32",
        [("onnxruntime", "median 0.33 ms"), ("details", "metrics/benchmark.md")],
    )
    err = capsys.readouterr().err
    assert (
        "benchmark: cnn fp32" in err and "median 0.33 ms" in err and "metrics/benchmark.md" in err
    )
    monkeypatch.setenv(console.ENV, "quiet")
    console.table("benchmark", [("a", "b")])
    assert capsys.readouterr().err == ""


def test_a_bar_off_a_terminal_draws_nothing_and_counts(capsys):
    with console.bar(total=3, desc="calibrating int8", unit="batch") as b:
        b.update(1)
        b.update(1)
        assert b.n == 2
        b.reset()
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("verbosity,shown", [("normal", False), ("verbose", True)])
def test_modelopt_warnings_go_to_the_log_and_to_the_screen_only_with_v(tmp_path, verbosity, shown):
    env = {**__import__("os").environ, console.ENV: verbosity, console.LOG_DIR_ENV: str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", LEAK], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "value info map" not in r.stdout
    assert ("value info map" in r.stderr) is shown
    assert "Did not find  in value info map!" in (tmp_path / "third_party.log").read_text()
