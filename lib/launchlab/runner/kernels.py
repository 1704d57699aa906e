"""The kernels of a batch's run notebooks: each run still gets a fresh kernel of its own, but the next one starts
while the current run goes, and a finished run's kernel is stopped without a wait.

Left to papermill, every run notebook first waits for its kernel to start and, once its last cell is done, for the
kernel to shut down: together most of what an empty notebook costs (bench/run_overhead.py). A batch worker keeps
one spare kernel instead — started in the notebooks' folder with the kernel options papermill would use, nothing
run in it before its notebook arrives but the kit's own imports (PRELOAD), so nothing passes from one run to the
next — and hands it to papermill already started. A finished notebook's kernel has nothing left to do or say
(every cell's outputs were received before papermill returned), so it is killed rather than asked to shut down:
the ask costs 0.2–0.3 s, and about one kernel in ten leaves it unanswered until jupyter_client kills it anyway
2.5 s later.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import tempfile
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync

from launchlab.runner.kernelfork import ForkedProvisioner, ForkServer

KERNEL_NAME = "python3"
# The kernel's own log says nothing a run needs (on TCP, a warning per start). IPython's
# history is off: left on, every kernel appended each cell it ran to the user's ~/.ipython history database — a
# file outside the run directory, shared by every kernel of the user, that grew by each run's cells (89,277 rows,
# 39 MB on the machine this was seen on) and that nobody reads for a papermill kernel.
KERNEL_ARGS = ["--IPKernelApp.log_level=CRITICAL", "--HistoryManager.enabled=False"]
# what every run notebook imports first, imported by a spare while it waits (the imports are a third of a short
# run's notebook); the notebook's own import then finds the modules loaded
PRELOADED = ["launchlab.runner.runview"]
PRELOAD = [f"--IPKernelApp.exec_lines=import {', '.join(PRELOADED)}"]


FOLDER_PREFIX = "launchlab-kernel-"
OWNER_FILE = "owner"  # in a kernel's folder: the process that made it, `PID START` (its start time in /proc)
_swept: set[str] = set()


def _process_start(pid: int) -> str | None:
    """A process's start time (clock ticks since boot, /proc/PID/stat): with its pid, which process it is; None once
    it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _sweep_stale(tmp: str) -> None:
    """Once per process and temp folder, the kernel folders whose maker ended without removing them (a SIGKILL, a
    second Ctrl-C while a batch stopped) are removed: a real folder of this user's only, whose owner file names a
    process that is gone. Anything else there — another user's, a link, one made before owner files — stays."""
    if tmp in _swept:
        return
    _swept.add(tmp)
    try:
        names = [name for name in os.listdir(tmp) if name.startswith(FOLDER_PREFIX)]
    except OSError:
        return
    for name in names:
        path = os.path.join(tmp, name)
        try:
            info = os.lstat(path)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
                continue
            with open(os.path.join(path, OWNER_FILE), encoding="ascii") as fh:
                pid, started = fh.read().split()
            gone = _process_start(int(pid)) != started
        except (OSError, ValueError):
            continue
        if gone:
            shutil.rmtree(path, ignore_errors=True)


# a UNIX socket's path holds at most 107 bytes (sun_path); a longer TMPDIR leaves the kernel on loopback TCP, with
# jupyter_client's port race (rare: a TMPDIR of some 80 bytes)
_SOCKET_PATH_MAX = 107


class RunKernel(AsyncKernelManager):
    """A kernel manager that keeps the clients made for it: nbclient, not owning a kernel it was handed, leaves
    its client's channels (and their heartbeat thread) open; `RunKernels.release` closes them.

    Its kernel talks over UNIX sockets in a private folder with its connection file, not over loopback TCP ports:
    jupyter_client picks a free port that the kernel binds only later, and another process may take it in between
    (seen in CI: a summary kernel died of "Address already in use" and printed its traceback); and on a shared box
    any user can connect to a loopback port, where a folder of the batch's own (0700) is closed to them (only the
    kernel's inner IOPub pipe stays on loopback: ipykernel binds it itself, with no race). The folder goes with the
    kernel (`_kill`), started or not; one whose maker was killed goes at the next kernel start (_sweep_stale)."""

    def __init__(self, **kwargs):
        _sweep_stale(os.path.abspath(tempfile.gettempdir()))
        # absolute: the kernel starts in another folder (TMPDIR=. would give a relative one)
        self.folder = os.path.abspath(tempfile.mkdtemp(prefix=FOLDER_PREFIX))  # 0700, made here: ours
        with open(os.path.join(self.folder, OWNER_FILE), "x", encoding="ascii") as fh:
            fh.write(f"{os.getpid()} {_process_start(os.getpid())}\n")
        sockets = os.path.join(self.folder, "s")
        if len(os.fsencode(sockets)) + len("-99") <= _SOCKET_PATH_MAX:  # "s-1" … "s-5", one per channel
            kwargs.update(transport="ipc", ip=sockets)
        super().__init__(connection_file=os.path.join(self.folder, "kernel.json"), **kwargs)
        self.clients: list = []

    def client(self, **kwargs):
        made = super().client(**kwargs)
        self.clients.append(made)
        return made


def start(server: ForkServer | None, cwd: Path, extra_arguments: list[str]) -> RunKernel:
    """A kernel started in cwd, forked from the server when one is up (kernelfork.py), else started as
    jupyter_client starts one. A start that fails leaves nothing: no caller has the kernel to stop."""
    kernel = RunKernel(kernel_name=KERNEL_NAME)
    try:
        if server is not None and server.alive():
            kernel.kernel_id = str(uuid.uuid4())
            kernel.provisioner = ForkedProvisioner(kernel_id=kernel.kernel_id, kernel_spec=kernel.kernel_spec,
                                                   parent=kernel)
            kernel.provisioner.server = server
        run_sync(kernel.start_kernel)(cwd=str(cwd), extra_arguments=extra_arguments)
    except BaseException:
        _kill(kernel)
        raise
    return kernel


def fork_server(cwd: Path) -> ForkServer:
    """A batch's kernel server, with the run notebook's modules loaded; close it once its kernels are gone."""
    return ForkServer(PRELOADED, cwd=str(cwd))


STARTUP_S = 60.0  # how long a kernel may take to answer, as nbclient's own startup_timeout


def start_answered(server: Callable[[], ForkServer], cwd: Path, args: list[str], *,
                   discard: Callable[[RunKernel], None]) -> RunKernel:
    """A started kernel that has answered: one that dies before it replies (seen under load: the run became a kit
    error "Kernel died before replying to kernel_info" before any of its cells ran) is discarded and replaced, once;
    a second such death is left for papermill to report."""
    kernel = start(server(), cwd, args)
    if answers(kernel):
        return kernel
    discard(kernel)
    return start(server(), cwd, args)


def answers(kernel: RunKernel) -> bool:
    """Whether the kernel replies to kernel_info (False: it died first); its client is closed again."""
    client = kernel.client()
    client.start_channels()
    try:
        run_sync(client.wait_for_ready)(timeout=STARTUP_S)
        return True
    except RuntimeError:  # jupyter_client: "Kernel died before replying to kernel_info"
        return False
    finally:
        client.stop_channels()
        kernel.clients.remove(client)


class RunKernels:
    """One batch worker's kernels: `take` gives a started kernel (the spare, when it is alive) and starts the next
    spare in the background — only while `more()` says another run may follow, so the last run of a worker leaves
    no kernel started for nothing; `release` stops a used one in the background; `close` stops the spare and waits
    until every kernel is gone. Not shared between threads: each worker has its own. The kernels are forked from
    `server` (the batch's, shared by its workers), or from a server of the pool's own when none is given."""

    def __init__(self, cwd: Path, more: Callable[[], bool] = lambda: True, server: ForkServer | None = None):
        self.cwd = cwd
        self.more = more
        self.starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spare-kernel")
        self.stopper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="used-kernel")
        self.spare: Future | None = None
        self.server, self.owns_server = server, server is None  # its own: started with the first kernel

    def __enter__(self) -> RunKernels:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> RunKernel:
        return start_answered(self._server, self.cwd, [*KERNEL_ARGS, *PRELOAD], discard=self.release)

    def _server(self) -> ForkServer:
        """The server to fork from: the batch's, or the pool's own (forked again if it died)."""
        if self.owns_server and (self.server is None or not self.server.alive()):
            self.server = fork_server(self.cwd)
        return self.server

    def take(self) -> RunKernel:
        """A started kernel for the next notebook. A spare that failed to start or died idle is replaced by one
        started now, whose failure (if any) is raised here, for the run that needed it."""
        kernel = None
        if self.spare is not None:
            try:
                kernel = self.spare.result()
            except Exception:  # noqa: BLE001 — started again below, where its error is raised to the run
                kernel = None
            if kernel is not None and not run_sync(kernel.is_alive)():
                self.release(kernel)
                kernel = None
        kernel = kernel or self._start()
        self.spare = self.starter.submit(self._start) if self.more() else None
        return kernel

    def release(self, kernel: RunKernel) -> None:
        """Close the clients' channels now, and kill the kernel (its notebook is over) and remove its connection
        file in the background: jupyter_client waits for the kill in 0.1 s polls."""
        for made in kernel.clients:
            made.stop_channels()
        kernel.clients.clear()
        self.stopper.submit(_kill, kernel)

    def close(self) -> None:
        """Stop the spare (waiting for it if it is still starting) and wait until every kernel is gone: no kernel
        of the batch outlives it."""
        spare, self.spare = self.spare, None
        if spare is not None:
            try:
                self.release(spare.result())
            except Exception:  # noqa: BLE001 — a spare that failed to start left nothing (start)
                pass
        self.starter.shutdown(wait=True)
        self.stopper.shutdown(wait=True)
        if self.owns_server and self.server is not None:
            self.server.close()


def stop(kernel: RunKernel) -> None:
    """A kernel whose notebook is over: its clients' channels closed, the kernel killed (see RunKernels.release)."""
    for made in kernel.clients:
        made.stop_channels()
    kernel.clients.clear()
    _kill(kernel)


def _kill(kernel: RunKernel) -> None:
    try:
        if kernel.has_kernel:
            # SIGKILL first: shutdown_kernel interrupts the kernel before it kills it, and a spare still starting
            # would print the interrupt's traceback into the batch's output
            run_sync(kernel.signal_kernel)(signal.SIGKILL)
            run_sync(kernel.shutdown_kernel)(now=True)
    finally:
        shutil.rmtree(kernel.folder, ignore_errors=True)  # its connection file and sockets
