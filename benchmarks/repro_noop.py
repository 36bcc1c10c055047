"""`dvc repro` with nothing changed, against the first full run, in one run.

    python benchmarks/repro_noop.py

Copies the repository into a temporary git repository, runs `dvc repro` (cold),
then again (nothing to reproduce but the always-run machine probe). Target: the
second run under 3 seconds."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(r.stdout + r.stderr)
    return time.perf_counter() - t0, r.stdout


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "repo"
        files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
        for f in files:
            if not f.startswith(("artifacts/", "metrics/")) and (REPO / f).is_file():
                (dest / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / f, dest / f)
        subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
        dvc = [sys.executable, "-m", "dvc", "repro"]
        cold, _ = timed(dvc, dest)
        warm, out = timed(dvc, dest)
    ran = [l.split("'")[1] for l in out.splitlines() if l.startswith("Running stage")]
    print(f"dvc repro, cold: {cold:6.2f} s")
    print(f"dvc repro, again: {warm:6.2f} s  (stages run: {', '.join(ran) or 'none'}; ratio {warm / cold:.3f})")
    ok = warm < 3.0 and ran == ["fingerprint"]
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
