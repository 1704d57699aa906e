"""The test session's own machinery: its hygiene (tests/daemons.py) — a session killed midway leaves no daemon
running, a later session sweeps what an earlier one left, SIGTERM lets the fixtures' finalisers run as Ctrl-C does,
each checked with a real inner pytest session and real daemons — and the pytest-xdist groups that let the tests
sharing a costly fixture build it once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import daemons
from conftest import ROOT

pytestmark = pytest.mark.slow


def inner_session(tmp_path: Path, test_source: str) -> subprocess.Popen:
    """A pytest session of one test file, with the daemons plugin, in a base folder of its own (tmp_path/i)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(test_source))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-c", str(tmp_path / "pytest.ini"), "-p", "daemons",
                             "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'i'}", str(tmp_path / "test_inner.py")],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(check, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the inner session ended (exit {proc.returncode}) before {what}:\n{proc.stdout.read()}")
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def alive(pid: int) -> bool:
    return daemons._start_time(pid) is not None


def test_a_session_killed_midway_leaves_no_slurm_daemon_running(tmp_path):
    import slurmd

    if missing := slurmd.missing():
        pytest.skip(f"{', '.join(missing)} not installed ({slurmd.INSTALL})")
    proc = inner_session(tmp_path, """\
        import time
        import slurmd

        def test_holds_a_cluster(tmp_path):
            cluster = slurmd.make_cluster(tmp_path.parent / "s")  # munge's socket path must stay short
            cluster.start()
            (tmp_path.parent / "started").write_text(str(cluster.folder))
            time.sleep(600)
        """)
    try:
        folder = Path(wait_for(lambda: (tmp_path / "i" / "started").is_file()
                               and (tmp_path / "i" / "started").read_text(), 90, "the inner cluster to start", proc))
        pids = {name: int((folder / f"{name}.pid").read_text()) for name in ("munged", "slurmctld", "slurmd")}
        assert all(alive(pid) for pid in pids.values()), pids
        proc.kill()  # as a timeout's SIGKILL: no finaliser runs
        proc.wait()
        wait_for(lambda: not any(alive(pid) for pid in pids.values()), 30, f"the daemons {pids} to be stopped")
        assert daemons.naming(tmp_path / "i") == []
    finally:
        if proc.poll() is None:
            proc.kill()
        daemons.stop_naming(tmp_path / "i")


def test_the_sweep_stops_what_a_dead_sessions_folder_names_and_spares_a_live_ones(tmp_path):
    dead, live = tmp_path / "pytest-1", tmp_path / "pytest-2"
    gone = subprocess.Popen(["true"])
    gone.wait()
    for folder, owner in ((dead, gone.pid), (live, os.getpid())):
        folder.mkdir()
        (folder / daemons.OWNER).write_text(f"{owner} {daemons._start_time(owner)}\n")
    sleepers = {folder: subprocess.Popen(["sleep", "300"], env={"MARK": str(folder / "box")})
                for folder in (dead, live)}
    # an engineer's shell whose working folder is in the dead session's folder is not the session's
    onlooker = subprocess.Popen(["sleep", "300"], env={"PWD": str(dead / "box"), "OLDPWD": str(dead)})
    sleepers[tmp_path] = onlooker
    try:
        stopped = daemons.sweep(tmp_path)
        sleepers[dead].wait(timeout=10)
        assert stopped == {dead: [sleepers[dead].pid]}
        assert sleepers[live].poll() is None, "a live session's process was stopped"
        assert onlooker.poll() is None, "a process that only stands in the folder was stopped"
    finally:
        for proc in sleepers.values():
            proc.kill()
            proc.wait()


def test_sigterm_lets_the_fixtures_finalisers_run_as_ctrl_c_does(tmp_path):
    proc = inner_session(tmp_path, """\
        import time
        import pytest

        @pytest.fixture
        def daemon(tmp_path):
            (tmp_path.parent / "up").write_text("1")
            yield
            (tmp_path.parent / "tearing").write_text("1")
            time.sleep(1)  # a daemon that takes a moment to stop
            (tmp_path.parent / "finalised").write_text("1")

        def test_waits(daemon, tmp_path):
            (tmp_path.parent / "running").write_text("1")  # the fixture's setup is over: its finaliser is due
            time.sleep(600)
        """)
    try:
        wait_for(lambda: (tmp_path / "i" / "running").is_file(), 60, "the inner test to start", proc)
        proc.send_signal(signal.SIGTERM)
        # a second SIGTERM while the finalisers run (an impatient supervisor) must not cut them short
        wait_for(lambda: (tmp_path / "i" / "tearing").is_file(), 60, "the finaliser to start", proc)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (tmp_path / "i" / "finalised").is_file(), out
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out


def test_the_tests_that_share_the_demo_batch_run_in_one_xdist_group(request, demo_env):
    """Were the group lost, every worker would run the demo batch again (pytest 9.2 with pytest-xdist 3.8 did)."""
    assert [m.args for m in request.node.iter_markers("xdist_group")] == [("demo",)]
    if getattr(request.config.option, "loadgroup", False):  # set in each worker under --dist loadgroup
        assert request.node.nodeid.endswith("@demo"), request.node.nodeid
