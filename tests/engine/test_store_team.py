"""A team store: two real users of one group, umask 002, one group-writable (setgid)
store. Alice builds; Bob hits, runs `cache verify`, and builds a second engine that
Alice then verifies. Needs root (to make the users); skipped with the reason else."""

import contextlib
import grp
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.helpers import prepared_copy

GROUP = "trtteam"
USERS = ("trtalice", "trtbob")


@contextlib.contextmanager
def team():
    """The group and its two users, made for this test and removed after."""
    made = []
    try:
        if not _exists(grp.getgrnam, GROUP):
            subprocess.run(["groupadd", GROUP], check=True, capture_output=True)
            made.append(["groupdel", GROUP])
        for user in USERS:
            if not _exists(pwd.getpwnam, user):
                subprocess.run(
                    ["useradd", "-M", "-N", "-g", GROUP, "-s", "/usr/sbin/nologin", user],
                    check=True,
                    capture_output=True,
                )
                made.insert(0, ["userdel", user])
        yield grp.getgrnam(GROUP).gr_gid, [pwd.getpwnam(u).pw_uid for u in USERS]
    finally:
        for cmd in made:
            subprocess.run(cmd, capture_output=True)


def _exists(lookup, name) -> bool:
    try:
        lookup(name)
        return True
    except KeyError:
        return False


@contextlib.contextmanager
def traversable(*paths):
    """Other users need to reach the interpreter and the checkout (here under /root,
    0700): add o+x to each folder on the way for the test, then put it back."""
    changed = []
    try:
        for path in paths:
            for folder in [*reversed(Path(path).resolve().parents)]:
                mode = folder.stat().st_mode
                if not mode & stat.S_IXOTH:
                    os.chmod(folder, stat.S_IMODE(mode) | stat.S_IXOTH)
                    changed.append((folder, stat.S_IMODE(mode)))
        yield
    finally:
        for folder, mode in reversed(changed):
            os.chmod(folder, mode)


def as_user(uid, gid, cwd, store, *args):
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(REPO),
        "HOME": str(cwd),
        "XDG_CACHE_HOME": str(Path(cwd) / ".cache"),
        "TRT_PIPELINE_STORE": str(store),
        "TRT_PIPELINE_CALIB_CACHE": str(Path(cwd) / ".calib"),
    }
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        user=uid,
        group=gid,
        extra_groups=[gid],
        umask=0o002,
        timeout=300,
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to create two users and a group")
def test_two_users_of_one_group_share_one_store(built_cnn):
    _, layout = built_cnn
    base = Path(tempfile.mkdtemp(prefix="trt-team-", dir="/tmp"))
    try:
        os.chmod(base, 0o755)
        with team() as (gid, (alice, bob)), traversable(sys.executable, REPO):
            store = base / "store"
            store.mkdir()
            os.chown(store, 0, gid)
            os.chmod(store, 0o2775)  # how a team sets up its folder: group-writable, setgid
            homes = {}
            for name, uid in (("alice", alice), ("bob", bob)):
                home = prepared_copy(layout, base / name)
                r = subprocess.run(
                    [sys.executable, "-m", "pipeline", "params", "--conf", str(REPO / "conf")],
                    cwd=home,
                    capture_output=True,
                    text=True,
                )
                assert r.returncode == 0, r.stderr
                for p in [home, *home.rglob("*")]:
                    os.lchown(p, uid, gid)
                homes[name] = home

            built = as_user(alice, gid, homes["alice"], store, "-m", "stages.build")
            assert built.returncode == 0 and "engine store miss, built" in built.stderr, (
                built.stderr
            )
            for p in store.rglob("*"):
                assert p.stat().st_gid == gid, p
                want = 0o2775 if p.is_dir() else 0o664
                assert stat.S_IMODE(p.stat().st_mode) == want, (p, oct(p.stat().st_mode))

            hit = as_user(bob, gid, homes["bob"], store, "-m", "stages.build")
            assert hit.returncode == 0 and "engine store hit" in hit.stderr, hit.stderr
            verify = as_user(bob, gid, homes["bob"], store, "-m", "pipeline", "cache", "verify")
            assert verify.returncode == 0 and "1 entries verified, all intact" in verify.stdout, (
                verify.stderr
            )
            ls = as_user(bob, gid, homes["bob"], store, "-m", "pipeline", "cache", "ls")
            assert ls.returncode == 0 and "cnn" in ls.stdout, ls.stderr

            # Bob builds a second engine into the store Alice made; Alice verifies both.
            r = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pipeline",
                    "params",
                    "--conf",
                    str(REPO / "conf"),
                    "build.optimization_level=5",
                ],
                cwd=homes["bob"],
                capture_output=True,
                text=True,
            )
            assert r.returncode == 0, r.stderr
            os.lchown(homes["bob"] / "params.yaml", bob, gid)
            second = as_user(bob, gid, homes["bob"], store, "-m", "stages.build")
            assert second.returncode == 0 and "engine store miss, built" in second.stderr, (
                second.stderr
            )
            both = as_user(
                alice, gid, homes["alice"], store, "-m", "pipeline", "cache", "verify", "--repair"
            )
            assert both.returncode == 0 and "2 entries verified, all intact" in both.stdout, (
                both.stderr
            )
            assert not list((store / "locks").iterdir()) and not list((store / "tmp").iterdir())
    finally:
        shutil.rmtree(base, ignore_errors=True)
