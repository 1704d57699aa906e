"""SIGTERM (a `kill`, a service manager) and SIGHUP (a closed terminal) stop `launchlab run` as Ctrl-C does: the
runs in flight stopped and recorded as interrupted, nothing of the simulated box left running, the resume
command printed — and every line says what happened: interrupted, stopped by the kit, never "had exited by
itself"."""

import fcntl
import json
import os
import re
import select
import signal
import subprocess
import termios
import time
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, LAUNCHLAB_EXEC, processes_using
from launchlab import interrupts

pytestmark = pytest.mark.slow


def wait_for_watching(out: Path, proc: subprocess.Popen, limit_s: float = 120) -> Path:
    """The status.json of the first run that reaches its watch (the server started and recorded)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        for status in out.glob("*/*/runs/*/status.json"):
            try:
                if json.loads(status.read_text()).get("state") == "watching":
                    return status
            except ValueError:
                pass  # being replaced
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"no run reached its watch: {proc.communicate()[1][-2000:]}")


@pytest.mark.parametrize(("signum", "group"), [(signal.SIGTERM, False), (signal.SIGHUP, False), (signal.SIGINT, False),
                                              (signal.SIGINT, True)],
                         ids=["SIGTERM", "SIGHUP", "SIGINT", "Ctrl-C at a terminal"])
def test_a_signal_to_launchlab_run_stops_the_runs_in_flight_records_them_and_prints_how_to_resume(
        small_params, tmp_path, sim_root, signum, group):
    """`group`: the signal goes to the batch's whole process group, as a terminal's Ctrl-C does (the kit's kernel
    server included), to a batch started as a fresh process in a session of its own."""
    path = small_params(pace=3.0, timeout=120)  # a slow start: the run is still watching when the signal comes
    # the simulated server ends at once on TERM; a long grace keeps a loaded machine from making it a KILL (seen once)
    path.write_text(path.read_text().replace("stop_grace_s: 5", "stop_grace_s: 20"))
    out = tmp_path / "out"
    proc = subprocess.Popen([*(LAUNCHLAB_EXEC if group else LAUNCHLAB), "run", "--no-html", str(path), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=group)
    watching = wait_for_watching(out, proc)
    sent = time.monotonic()
    if group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    _, err = proc.communicate(timeout=90)
    took = time.monotonic() - sent
    name = "the user (Ctrl-C)" if signum == signal.SIGINT else signum.name
    assert proc.returncode == 128 + signum, err[-3000:]
    assert took < 30, f"{took:.1f} s from the signal to the exit"
    run_dir, run_id = watching.parent.parent.parent, watching.parent.name
    statuses = {p.parent.name: json.loads(p.read_text()) for p in run_dir.glob("runs/*/status.json")}
    assert statuses and all(s["state"] == "done" for s in statuses.values()), statuses  # none left watching
    interrupted = statuses[run_id]
    assert interrupted["status"] == "error" and interrupted["failure_message"].startswith(f"interrupted by {name}")
    assert interrupted["failure_reason"] == "interrupted"  # what the analysis recognises it by
    # a KILL here means the server's group outlived SIGTERM by the whole grace (once: a rank forked as the TERM came)
    assert interrupted["stopped_with"] == "TERM", (err[-2000:], _tail(watching.parent / "server.log"))
    processes = json.loads((watching.parent / "processes.json").read_text())
    assert {p["role"] for p in processes} == {"server", "sampler"}
    assert all(p["stopped_with"] in ("TERM", "KILL") for p in processes), processes
    deadline = time.monotonic() + 5
    while processes_using(str(sim_root)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_using(str(sim_root)) == []  # server, sampler and kernels all gone
    assert f"{run_id}  error (interrupted), stopped by the kit" in err, err[-3000:]
    assert f"launchlab: interrupted by {name}" in err and f"--resume {run_dir}" in err
    # said once (the CLI said it a second time), and the command repeats the options given (it dropped them)
    assert err.count("launchlab: interrupted by") == 1, err[-2000:]
    assert f"--resume {run_dir} --no-html`" in err
    assert "had exited by itself" not in err and "Traceback" not in err


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else f"{path.name}: not written"


def test_only_the_first_termination_interrupts_and_each_signal_is_named_with_its_exit_status():
    assert interrupts.describe(KeyboardInterrupt()) == "interrupted by the user (Ctrl-C)"
    assert interrupts.describe(interrupts.Interrupted(signal.SIGHUP)) == "interrupted by SIGHUP"
    assert interrupts.exit_code(KeyboardInterrupt()) == 130
    assert interrupts.exit_code(interrupts.Interrupted(signal.SIGTERM)) == 143
    caught = []
    before = signal.getsignal(signal.SIGTERM)  # the default, or the test session's own (tests/daemons.py, without xdist)
    with interrupts.terminations_interrupt():
        for _ in range(2):
            try:
                signal.raise_signal(signal.SIGTERM)
                time.sleep(0.05)
            except interrupts.Interrupted as exc:
                caught.append(exc.signum)
    assert caught == [signal.SIGTERM]  # the second one is ignored while the batch stops
    assert signal.getsignal(signal.SIGTERM) is before  # and the handlers are put back


def drain(master: int) -> None:
    """Read what the batch printed to its terminal so far (a full pty buffer would block its writes)."""
    while select.select([master], [], [], 0)[0]:
        try:
            if not os.read(master, 65536):
                return
        except OSError:
            return


def take_terminal() -> None:
    """In the child, after start_new_session's setsid: the pty on its stdin becomes its controlling terminal, so
    that closing the terminal hangs up the session leader as a real one does."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


@pytest.mark.parametrize("leader", [True, False], ids=["the batch leads the terminal's session", "a shell's job"])
def test_a_closed_terminal_stops_the_runs_in_flight_though_nothing_can_be_printed_any_more(
        small_params, tmp_path, sim_root, leader):
    """A terminal closed under `launchlab run`: the tty is hung up, so every write to it fails (EIO), and SIGHUP
    comes — from the kernel to the session leader (`leader`), or from the shell to its job's process group. The
    runs in flight are still stopped and recorded as interrupted, and nothing of the simulated box is left."""
    path = small_params(pace=3.0, timeout=120)
    path.write_text(path.read_text().replace("stop_grace_s: 5", "stop_grace_s: 20"))
    out = tmp_path / "out"
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen([*LAUNCHLAB_EXEC, "run", "--no-html", str(path), "--out", str(out)],
                                stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                                preexec_fn=take_terminal if leader else None)
    finally:
        os.close(slave)
    try:
        deadline = time.monotonic() + 120
        watching = None
        while watching is None and time.monotonic() < deadline and proc.poll() is None:
            drain(master)
            watching = next((p for p in out.glob("*/*/runs/*/status.json")
                             if re.search(r'"state": ?"watching"', p.read_text(errors="replace"))), None)
            time.sleep(0.1)
        assert watching is not None, "no run reached its watch"
        drain(master)
    finally:
        os.close(master)  # the terminal is gone: the tty hangs up (the session leader gets SIGHUP from the kernel)
    sent = time.monotonic()
    if not leader:
        os.killpg(proc.pid, signal.SIGHUP)  # as bash does for its jobs when its terminal hangs up
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    took = time.monotonic() - sent
    assert proc.returncode == 128 + signal.SIGHUP
    assert took < 30, f"{took:.1f} s from the hang-up to the exit"
    run_dir, run_id = watching.parent.parent.parent, watching.parent.name
    statuses = {p.parent.name: json.loads(p.read_text()) for p in run_dir.glob("runs/*/status.json")}
    assert statuses and all(s["state"] == "done" for s in statuses.values()), statuses  # none left watching
    interrupted = statuses[run_id]
    assert interrupted["status"] == "error" and interrupted["failure_reason"] == "interrupted"
    assert interrupted["failure_message"].startswith("interrupted by SIGHUP")
    processes = json.loads((watching.parent / "processes.json").read_text())
    assert {p["role"] for p in processes} == {"server", "sampler"}
    assert all(p["stopped_with"] in ("TERM", "KILL") for p in processes), processes
    deadline = time.monotonic() + 5
    while processes_using(str(sim_root)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_using(str(sim_root)) == []  # server, sampler and kernels all gone
