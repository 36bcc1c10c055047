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


def test_a_bar_in_a_log_prints_plain_lines_with_its_note_and_an_estimate(monkeypatch, capsys):
    """stderr is no terminal under pytest, as in a DVC stage's log: a bar prints a line
    every TRT_PIPELINE_PROGRESS_EVERY seconds, and a last one once it printed any."""
    from pipeline.core import console

    monkeypatch.setenv(console.LINES_EVERY_ENV, "0")
    with console.bar(total=4, desc="fallback search", unit="graph") as b:
        for i in range(4):
            b.set_postfix_str(f"fewest kept so far {4 - i}")
            b.update(1)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("fallback search: 1/4 graph in ")
    assert "s left; fewest kept so far 4" in lines[0]
    assert lines[-1].startswith("fallback search: done, 4 graph in ")


def test_a_quick_bar_in_a_log_prints_nothing(monkeypatch, capsys):
    from pipeline.core import console

    monkeypatch.delenv(console.LINES_EVERY_ENV, raising=False)
    with console.bar(total=3, desc="calibrating int8", unit="batch") as b:
        b.update(3)
    assert capsys.readouterr().err == ""
