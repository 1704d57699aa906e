"""Shared fixtures: an isolated simulated box and outputs folder per test, and a check that nothing a test
started on the simulated box is still running when it ends; one Slurm cluster per session; the marks that
`make check` and pytest-xdist's groups read (see pytest_itemcollected), and the order that hands out the longest
tests first (pytest_collection_modifyitems)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from daemons import pytest_sessionstart  # noqa: F401 (the hook: a watchdog and a sweep of stale daemons)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "fixtures"  # copies of shared/data (see fixtures/README.md)
# `launchlab` as the tests run it: a process forked from this worker's warm CLI server (tests/cliserver.py), or a
# fresh `python -m launchlab.cli` where the server is not up. LAUNCHLAB_EXEC always starts a fresh interpreter: for
# the tests that walk the CLI's process tree from its pid or measure its memory.
LAUNCHLAB = [sys.executable, "-S", str(ROOT / "tests" / "cliserver.py")]
LAUNCHLAB_EXEC = [sys.executable, "-m", "launchlab.cli"]


def connect(exp, name: str | None = None, sim_box: str | Path | None = None):
    """The Host of a host the params name (default: the experiment's), as a batch opens it (hosts.connect)."""
    from launchlab import hosts

    name = name or exp.host_name
    return hosts.connect(name, exp.hosts[name], sim_box=sim_box)


def processes_using(marker: str) -> list[int]:
    """Live (non-zombie) processes whose environment or command line mentions marker."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            stat = (entry / "stat").read_text()
            if stat[stat.rfind(")") + 2] in "ZX":
                continue
            blob = (entry / "environ").read_bytes() + (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in blob:
            found.append(int(entry.name))
    return found


def descendants(pid: int) -> list[int]:
    """Every live process below pid (children, their children, …), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            children.setdefault(int(stat[stat.rfind(")") + 2:].split()[1]), []).append(int(entry.name))
    found, frontier = [], [pid]
    while frontier:
        for child in children.get(frontier.pop(), []):
            found.append(child)
            frontier.append(child)
    return found


@pytest.fixture(scope="session", autouse=True)
def host_locks(tmp_path_factory):
    """The host locks of real transports (ssh, Slurm over ssh) in a folder of this session's worker, not the
    machine's /tmp/launchlab-locks: pytest-xdist workers run batches on the same loopback host at once, and a
    developer's own batches must neither block the tests nor be blocked by them."""
    folder = tmp_path_factory.mktemp("locks")
    previous = os.environ.get("LAUNCHLAB_LOCK_DIR")
    os.environ["LAUNCHLAB_LOCK_DIR"] = str(folder)
    yield folder
    if previous is None:
        os.environ.pop("LAUNCHLAB_LOCK_DIR", None)
    else:
        os.environ["LAUNCHLAB_LOCK_DIR"] = previous


@pytest.fixture(scope="session", autouse=True)
def cli_server(request, tmp_path_factory):
    """This worker's warm `launchlab` (tests/cliserver.py), started only when the session has tests that start
    processes (`make check` runs none); stopped by closing its stdin."""
    import cliserver

    if not any(item.get_closest_marker("slow") for item in request.session.items):
        yield None
        return
    folder = tmp_path_factory.mktemp("cli")
    path = folder / "cli.sock"
    with open(folder / "server.log", "wb") as log:
        server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "cliserver.py"), "--serve", str(path)],
                                  stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    deadline = time.monotonic() + 60
    while not path.exists() and server.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # until then a command starts a fresh interpreter, so nothing waits for the server
    assert path.exists(), f"the CLI server did not start: {(folder / 'server.log').read_text()[-2000:]}"
    previous = os.environ.get(cliserver.SOCKET_ENV)
    os.environ[cliserver.SOCKET_ENV] = str(path)
    yield server
    if previous is None:
        os.environ.pop(cliserver.SOCKET_ENV, None)
    else:
        os.environ[cliserver.SOCKET_ENV] = previous
    server.stdin.close()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


@pytest.fixture
def sim_root(tmp_path, monkeypatch) -> Path:
    """A private simulated-box folder and outputs folder; fails the test if a process it started survives."""
    root = tmp_path / "sim"
    monkeypatch.setenv("LAUNCHLAB_SIM_ROOT", str(root))
    monkeypatch.setenv("LAUNCHLAB_OUTPUTS", str(tmp_path / "outputs"))
    yield root
    deadline = time.monotonic() + 5
    while (left := processes_using(str(root))) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        for pid in left:
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        pytest.fail(f"processes left running on the simulated host after the test: {left}")


def write_params(folder: Path, body: str, name: str = "exp.yaml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


SMALL_SIM = """\
experiment: small
hosts:
  box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: {pace}, workdir: {workdir}}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}"]
  ready: {{timeout_s: {timeout}, health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 5
factors:
  mem_fraction:
    "0.55": {{flags: {{--mem-fraction-static: "0.55"}}}}
    "0.85": {{flags: {{--mem-fraction-static: "0.85"}}}}
baseline: {{mem_fraction: "0.85"}}
repetitions: 1
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


# a two-node experiment on two simulated hosts; {script}: the server's Python, given its node rank, node count,
# master address and port (tests/test_lifecycle.py, tests/test_run_in_memory.py)
MULTI_NODE = """\
experiment: two-nodes
nodes: [head, worker]
hosts:
  head: {{transport: sim, gpus: 1, workdir: {w}/head}}
  worker: {{transport: sim, gpus: 1, workdir: {w}/worker}}
server:
  kind: generic
  command: [python3, -c, "{script}", "{{node_rank}}", "{{nnodes}}", "{{master_addr}}", "{{port}}"]
  ready: {{timeout_s: 20, log_pattern: "serving", health_url: "http://127.0.0.1:{{port}}/"}}
  stop_grace_s: 5
"""


@pytest.fixture
def small_params(tmp_path, sim_root):
    """A 2-GPU simulated experiment: mem_fraction 0.55 fails in the KV-cache phase, 0.85 is ready."""

    def make(pace: float = 0.3, timeout: float = 60) -> Path:
        return write_params(tmp_path, SMALL_SIM.format(pace=pace, timeout=timeout, workdir=tmp_path / "hostwork"))

    return make


@pytest.fixture(scope="session")
def example_frames(tmp_path_factory):
    """An example's frames (runs, events, telemetry) as `launchlab report` builds them from its raw files — an
    example commits no telemetry.parquet — built once per test process, in a copy: building writes parsed.json."""
    from launchlab import params
    from launchlab.verdicts import frames

    built: dict[Path, frames.Frames] = {}

    def of(run_dir: Path) -> frames.Frames:
        if run_dir not in built:
            copy = tmp_path_factory.mktemp("example") / run_dir.name
            shutil.copytree(run_dir, copy)
            built[run_dir] = frames.build(copy, params.load(copy / "experiment.yaml"))
        return built[run_dir]

    return of


@pytest.fixture(scope="session")
def example_built(tmp_path_factory):
    """A copy of an example with the frames `launchlab report` writes (an example commits no telemetry.parquet):
    a run directory that `launchlab compare` reads as a fresh clone's user would after `make examples`."""
    from launchlab import params
    from launchlab.verdicts import frames

    built: dict[Path, Path] = {}

    def of(run_dir: Path) -> Path:
        if run_dir not in built:
            copy = tmp_path_factory.mktemp("built") / run_dir.name
            shutil.copytree(run_dir, copy)
            frames.write(copy, frames.build(copy, params.load(copy / "experiment.yaml")))
            built[run_dir] = copy
        return built[run_dir]

    return of


@pytest.fixture(scope="session")
def demo_env(tmp_path_factory):
    base = tmp_path_factory.mktemp("demo")
    env = {**os.environ, "LAUNCHLAB_SIM_ROOT": str(base / "sim"), "LAUNCHLAB_OUTPUTS": str(base / "outputs")}
    yield base, env
    left = processes_using(str(base / "sim"))
    assert not left, f"processes left running on the simulated host: {left}"


@pytest.fixture(scope="session")
def demo_run(demo_env):
    base, env = demo_env
    proc = subprocess.run([*LAUNCHLAB, "run", str(ROOT / "params/demo.yaml")], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    return run_dir, proc.stderr


@pytest.fixture
def sshd(tmp_path, sim_root, monkeypatch):
    """A real sshd on 127.0.0.1 whose sessions see a simulated 2-GPU box; the client trusts only its key."""
    import sshd as sshd_helper
    from launchlab import params
    from launchlab.hosts.sim import prepare_box

    if sshd_helper.SSHD is None or sshd_helper.SSH_KEYGEN is None:
        if os.environ.get("LAUNCHLAB_REQUIRE_SSHD") == "1":
            pytest.fail("sshd is required here (LAUNCHLAB_REQUIRE_SSHD=1) but not installed: apt-get install openssh-server")
        pytest.skip("no sshd binary (apt-get install openssh-server); .ci/run installs it and requires these tests")
    spec = params.SimSpec(transport="sim", gpus=2, pace=0.3)
    env = prepare_box(sim_root / "sshbox", "sshbox", spec)
    server = sshd_helper.make_server(tmp_path / "sshd", env)
    server.start()
    monkeypatch.setenv("LAUNCHLAB_KNOWN_HOSTS", str(server.known_hosts))
    monkeypatch.setenv("LAUNCHLAB_SSH_CONFIG", str(server.ssh_config))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A real single-node Slurm (munged, slurmctld, slurmd; 16 fake GPUs as gres, partition `gpu`, preempted by
    partition `urgent`) for the session's tests (one per pytest-xdist worker); clients reach it through SLURM_CONF.
    Skipped when the daemons are not installed or cannot start, unless LAUNCHLAB_REQUIRE_SLURM=1 (CI), which turns
    the skip into a failure."""
    yield from running_slurm(tmp_path_factory, nodes=1)


def running_slurm(tmp_path_factory, nodes: int):
    """A started Slurm cluster of `nodes` nodes on this machine (tests/slurmd.py), stopped after."""
    import slurmd as slurm_helper
    from launchlab import config

    def unavailable(why: str):
        if config.require_slurm():
            pytest.fail(f"Slurm is required here (LAUNCHLAB_REQUIRE_SLURM=1) but {why}: {slurm_helper.INSTALL}")
        pytest.skip(f"{why} ({slurm_helper.INSTALL}); .ci/run installs it and requires these tests")

    if missing := slurm_helper.missing():
        unavailable(f"{', '.join(missing)} not installed")
    cluster = slurm_helper.make_cluster(tmp_path_factory.mktemp("slurm"), nodes=nodes)
    try:
        cluster.start()
    except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
        cluster.stop()
        unavailable(f"the daemons did not start: {exc}")
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    yield cluster
    cluster.stop()
    if previous is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = previous


# Fixtures that start real processes (kernels, servers, daemons, a browser): a test using one is `slow`, which
# `make check` leaves out. Tests that share a costly session- or module-wide fixture (the demo's batch and its
# outputs folder, a module's batch) run in one pytest-xdist group, so one worker builds it once; everything else
# is spread over the workers (`--dist loadgroup`). The Slurm cluster is per worker: it starts in seconds, and a
# worker's Slurm tests use it one at a time, as they did per module before.
PROCESS_FIXTURES = {"sim_root", "small_params", "sshd", "slurm", "slurm2", "demo_env", "demo_run", "chromium", "browser",
                    "lab", "installed", "demo_import", "demo_search_run", "tiny_venv", "compared_demo", "compared_search"}
GROUPS = {"demo_env": "demo", "demo_import": "import", "installed": "install", "demo_search_run": "search",
          "tiny_venv": "patching", "compared_demo": "compare-demo", "imported_pair": "compare-import",
          "compared_search": "compare-search"}


def pytest_itemcollected(item):
    """Marks added as each test is collected: xdist turns the group marks into node ids when collection ends."""
    used = set(getattr(item, "fixturenames", ()))
    if used & PROCESS_FIXTURES:
        item.add_marker(pytest.mark.slow)
    for fixture, group in GROUPS.items():
        if fixture in used:  # demo_run uses demo_env, so it lands in "demo" too
            item.add_marker(pytest.mark.xdist_group(group))
            break


def pytest_configure(config):
    """Ctrl-C as a terminal gives it. The tests send SIGINT to the kit's processes and expect a KeyboardInterrupt;
    a suite started as a background job (a script's `make test &`: bash ignores SIGINT for it when job control is
    off) hands SIG_IGN to every process it starts, and Python keeps an ignored SIGINT ignored — then a Ctrl-C test
    failed as if the kit had lost the signal (seen twice this way before the cause was found)."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


# The longest tests (make test's --durations on the 2-core machine; mostly waiting on a scheduler or a slow server),
# handed out first: pytest-xdist gives its workers the groups first (the largest first), then the single tests in
# collection order, so a long test collected last would start last and keep the whole session waiting for it alone.
LONGEST_FIRST = (
    "test_slurm.py::test_a_job_that_outlives_its_time_limit",  # Slurm's smallest time limit is a minute
    "test_locks.py::test_two_batches_on_one_ssh_host",
    "test_resume_equal.py::",
    "test_slurm.py::test_the_seed_demo_through_slurm",
    "test_slurm.py::test_ctrl_c_mid_batch",
    "test_install.py::",
    "test_slurm_login.py::",
    "test_warmup.py::",
    "test_interrupts.py::test_a_signal_to_launchlab_run",
    "test_slurm.py::test_a_job_of_a_dead_batch",
    "test_ssh.py::test_the_demo_design_runs_over_ssh",
    "test_jupyterlab.py::",
    "test_demo_end_to_end.py::test_runs_of_different_hosts",
    "test_locks.py::test_two_demos_on_one_machine",
    "test_threshold_search.py::test_an_interrupted_search",
)


def pytest_collection_modifyitems(items):
    def place(item) -> int:
        name = item.nodeid.rsplit("/", 1)[-1]
        return next((i for i, prefix in enumerate(LONGEST_FIRST) if name.startswith(prefix)), len(LONGEST_FIRST))

    items.sort(key=place)  # stable: the rest keep their order
