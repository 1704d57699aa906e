"""A batch worker's kernels (kernels.py), with real papermill kernels: each notebook still gets a fresh kernel of
its own, started ahead in the notebooks' folder with the kit's modules loaded; a used kernel and the spare are
gone once the pool is closed, connection files included; a spare that died idle is replaced."""

import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

import nbformat
import pytest

from launchlab.runner import kernels, notebooks

pytestmark = pytest.mark.slow  # real kernels

PROBE = """\
import os, sys
from ipykernel.kernelapp import IPKernelApp
app = IPKernelApp.instance()
print(json.dumps({"pid": os.getpid(), "cwd": os.getcwd(), "left": "left_by_earlier" in globals(),
                  "transport": app.transport, "sockets": app.ip,
                  "preloaded": "launchlab.runner.runview" in sys.modules,
                  "history": get_ipython().history_manager.enabled, "frozen": __import__("gc").get_freeze_count()}))
left_by_earlier = True
"""


@pytest.fixture
def probe(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import json"), nbformat.v4.new_code_cell(PROBE)]
    path = tmp_path / "probe.ipynb"
    nbformat.write(nb, path)
    return path


def seen(output) -> dict:
    cell = json.loads(output.read_text())["cells"][-1]
    return json.loads("".join(cell["outputs"][0]["text"]))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is gone for our purpose
        return fh.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_every_notebook_gets_a_fresh_kernel_started_ahead_and_none_outlives_the_pool(probe, tmp_path):
    runs = []
    with kernels.RunKernels(notebooks.notebooks_dir()) as pool:
        for i in range(3):
            notebooks.execute(str(probe), tmp_path / f"out{i}.ipynb", {}, pool)
            runs.append(seen(tmp_path / f"out{i}.ipynb"))
        spare = pool.spare.result()
        spare_pid, files = spare.provisioner.process.pid, [spare.connection_file, spare.folder]
        assert alive(spare_pid), "the next notebook's kernel is started before it is asked for"
        assert os.stat(spare.folder).st_mode & 0o777 == 0o700, "its sockets' folder is the batch's own"
    assert len({r["pid"] for r in runs}) == 3, "one kernel per notebook"
    assert not any(r["left"] for r in runs), "nothing passes from one notebook's kernel to the next"
    assert {r["cwd"] for r in runs} == {str(notebooks.notebooks_dir().resolve())}, runs  # where papermill would start it
    assert all(r["preloaded"] for r in runs), "the run notebook's imports are loaded while the kernel waits"
    # frozen in the server (kernelfork._preload): no kernel's garbage collection walks them, or copies their pages
    assert all(r["frozen"] > 10_000 for r in runs), [r["frozen"] for r in runs]
    assert not any(r["history"] for r in runs), "no cell is written to the user's IPython history"
    # no loopback port another process could take before the kernel binds it, or another user connect to
    assert {r["transport"] for r in runs} == {"ipc"}, runs
    assert all(os.path.basename(os.path.dirname(r["sockets"])).startswith("launchlab-kernel-") for r in runs), runs
    assert not any(alive(pid) for pid in [r["pid"] for r in runs] + [spare_pid])
    assert not any(os.path.exists(f) for f in files), "connection files and socket folders removed"


def test_a_notebook_run_alone_gets_a_kernel_started_and_stopped_for_it_without_history_or_files(probe, tmp_path, monkeypatch):
    # where the kernel's socket folder is made: short, as /tmp is (pytest's tmp_path can be too long for a socket)
    temp = Path(tempfile.mkdtemp(prefix="t"))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    try:
        notebooks.execute(str(probe), tmp_path / "alone.ipynb", {})  # as a notebook run outside a batch
    finally:
        left = list(temp.iterdir())
        shutil.rmtree(temp)
    alone = seen(tmp_path / "alone.ipynb")
    assert alone["history"] is False and alone["transport"] == "ipc"
    assert os.path.dirname(os.path.dirname(alone["sockets"])) == str(temp)
    assert not alive(alone["pid"])
    assert left == [], "its connection file and sockets go with it"


def test_a_kernel_that_fails_to_start_leaves_no_folder(tmp_path, monkeypatch):
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    with pytest.raises(OSError):  # the kernel's folder to start in is not there: jupyter_client's Popen raises
        kernels.start(None, tmp_path / "no-such-folder", kernels.KERNEL_ARGS)
    assert list(temp.iterdir()) == []


def test_a_temp_folder_too_long_for_a_socket_path_leaves_the_kernel_on_loopback_tcp(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    kernel = kernels.RunKernel(kernel_name=kernels.KERNEL_NAME)
    assert kernel.transport == "tcp" and kernel.ip == "127.0.0.1"
    assert os.path.dirname(kernel.connection_file) == kernel.folder and kernel.folder.startswith(str(deep))
    kernels.stop(kernel)  # never started: its folder goes all the same
    assert not os.path.exists(kernel.folder)


def test_the_last_notebook_of_a_worker_leaves_no_spare_started_for_nothing(probe, tmp_path):
    queued = ["one more"]
    with kernels.RunKernels(notebooks.notebooks_dir(), more=lambda: bool(queued)) as pool:
        notebooks.execute(str(probe), tmp_path / "first.ipynb", {}, pool)
        assert pool.spare is not None, "a run is queued: its kernel starts while this one runs"
        queued.clear()
        notebooks.execute(str(probe), tmp_path / "last.ipynb", {}, pool)
        assert pool.spare is None, "no run follows: no kernel is started for it"
    first, last = seen(tmp_path / "first.ipynb"), seen(tmp_path / "last.ipynb")
    assert first["pid"] != last["pid"] and last["preloaded"], "the last notebook ran in the spare started for it"


def test_a_spare_that_died_while_it_waited_is_replaced_by_one_started_for_the_notebook(probe, tmp_path):
    with kernels.RunKernels(notebooks.notebooks_dir()) as pool:
        notebooks.execute(str(probe), tmp_path / "first.ipynb", {}, pool)
        dead = pool.spare.result()
        pid = dead.provisioner.process.pid
        os.killpg(os.getpgid(pid), signal.SIGKILL)
        dead.provisioner.process.wait()
        notebooks.execute(str(probe), tmp_path / "second.ipynb", {}, pool)
    second = seen(tmp_path / "second.ipynb")
    assert second["pid"] != pid and not second["left"]
    assert not alive(second["pid"])


def test_a_kernel_that_dies_before_it_answers_is_replaced_before_a_notebook_runs_in_it(probe, tmp_path, monkeypatch):
    # seen under load: a run's kernel died before replying to kernel_info, and the run became a kit error
    started, killed = kernels.start, []

    def start_and_kill_the_first(*args, **kwargs):
        kernel = started(*args, **kwargs)
        if not killed:
            killed.append(kernel.provisioner.process.pid)
            os.kill(killed[0], signal.SIGKILL)
        return kernel

    monkeypatch.setattr(kernels, "start", start_and_kill_the_first)
    with kernels.RunKernels(notebooks.notebooks_dir(), more=lambda: False) as pool:
        notebooks.execute(str(probe), tmp_path / "out.ipynb", {}, pool)
    ran = seen(tmp_path / "out.ipynb")
    assert killed and ran["pid"] != killed[0] and not alive(ran["pid"])


def test_a_kernel_folder_whose_maker_was_killed_is_swept_and_nothing_else_is(tmp_path, monkeypatch):
    """A SIGKILL (or a second Ctrl-C while a batch stops) leaves its kernels' folders in $TMPDIR; the next kernel
    start of the user removes those whose maker is gone, and only those."""
    import subprocess
    import sys

    def folder(name: str, owner: str | None) -> Path:
        made = tmp_path / f"{kernels.FOLDER_PREFIX}{name}"
        made.mkdir(mode=0o700)
        (made / "kernel.json").write_text("{}")
        if owner is not None:
            (made / kernels.OWNER_FILE).write_text(owner)
        return made

    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    killed = folder("killed", f"{ended.pid} {kernels._process_start(os.getpid())}\n")
    reused = folder("reused", f"{os.getpid()} 1\n")  # this pid, another start time: another process, gone
    alive = folder("alive", f"{os.getpid()} {kernels._process_start(os.getpid())}\n")
    older = folder("older-kit", None)  # made before owner files: nothing says whose it is
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / kernels.OWNER_FILE).write_text(f"{ended.pid} 1\n")
    (tmp_path / f"{kernels.FOLDER_PREFIX}link").symlink_to(elsewhere)  # a link is never followed nor removed
    monkeypatch.setattr(kernels, "_swept", set())
    kernels._sweep_stale(str(tmp_path))
    assert not killed.exists() and not reused.exists()
    assert alive.is_dir() and older.is_dir() and (elsewhere / kernels.OWNER_FILE).exists()
    assert (tmp_path / f"{kernels.FOLDER_PREFIX}link").is_symlink()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made = kernels.RunKernel(kernel_name=kernels.KERNEL_NAME)  # a kernel's folder names its maker
    try:
        assert (Path(made.folder) / kernels.OWNER_FILE).read_text().split() == [
            str(os.getpid()), kernels._process_start(os.getpid())]
    finally:
        shutil.rmtree(made.folder)
