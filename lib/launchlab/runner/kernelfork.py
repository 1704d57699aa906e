"""Run kernels forked from a warm interpreter, so that a run's kernel does not import the kernel machinery and the
run notebook's modules again.

A fresh `python -m ipykernel_launcher` spends about a second of CPU importing IPython, ipykernel, zmq and the kit's
modules before the run notebook's first cell: on a two-core machine a batch of short runs spends more CPU there
than in the runs themselves. A batch worker's kernels (kernels.RunKernels) therefore come from one server:

    batch ── spawn: kernel argv, environment, folder ──▶ server (`python -m launchlab.runner.kernelfork MODULE…`)
    server ── fork ──▶ kernel: a session of its own, the folder and environment jupyter_client gave it, stdin
                       from /dev/null, then IPKernelApp as `python -m ipykernel_launcher` would start it
    server ── "exit PID STATUS" ──▶ batch, when a kernel ends (the server is its parent and reaps it)

Every run still gets a fresh kernel process of its own: nothing runs in the server but imports, so nothing passes
from one run to the next. The server runs no thread (it forks from its only one). The kernels watch the server as
their parent (IPKernelApp.parent_handle): when the batch goes, the server's requests pipe closes, it kills its
kernels and exits, and a kernel whose server was killed outright ends on its own. A kernel's command line is the
server's (/proc/PID/cmdline says `launchlab.runner.kernelfork`); its name (/proc/PID/comm, what `ps` and `top` show) is
`ipykernel`.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable

from jupyter_client.provisioning import LocalProvisioner

LAUNCHER = ["-m", "ipykernel_launcher"]
# what a kernel imports as it starts, before the run notebook's first cell: IPKernelApp, then (while it initialises)
# its debugger's debugpy and pydevd, psutil, pdb and the inspector — a quarter of a second more per kernel
KERNEL_MODULES = ("ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.debugger", "psutil", "pdb",
                  "IPython.core.oinspect")  # the kernel spec's argv after the interpreter, as the python3 spec has it


class ForkServer:
    """The batch's side of one server: start it, have it fork kernels, learn when they end, stop it."""

    def __init__(self, preload: Iterable[str], cwd: str | None = None):
        replies_r, replies_w = os.pipe()
        self.proc = subprocess.Popen([sys.executable, "-m", "launchlab.runner.kernelfork", str(replies_w), *preload],
                                     stdin=subprocess.PIPE, pass_fds=[replies_w], cwd=cwd)
        os.close(replies_w)
        self._replies = os.fdopen(replies_r, "r", encoding="utf-8")
        self._lock = threading.Lock()  # one request at a time: its reply is the next "pid" line
        self._changed = threading.Condition()
        self._pids: list[int] = []
        self._ended: dict[int, int] = {}
        self._reader = threading.Thread(target=self._read, name="kernelfork-replies", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self._replies:
            kind, *values = line.split()
            with self._changed:
                if kind == "pid":
                    self._pids.append(int(values[0]))
                elif kind == "exit":
                    self._ended[int(values[0])] = os.waitstatus_to_exitcode(int(values[1]))
                self._changed.notify_all()
        with self._changed:  # the server is gone: so are its kernels
            self._pids.append(-1)
            self._changed.notify_all()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def spawn(self, argv: list[str], env: dict[str, str], cwd: str) -> int:
        """Fork a kernel that runs IPKernelApp with argv (what follows `-m ipykernel_launcher`); its pid."""
        request = json.dumps({"argv": argv, "env": env, "cwd": cwd}) + "\n"
        with self._lock:
            with self._changed:
                seen = len(self._pids)
            self.proc.stdin.write(request.encode())
            self.proc.stdin.flush()
            with self._changed:
                self._changed.wait_for(lambda: len(self._pids) > seen, timeout=60)
                pid = self._pids[seen] if len(self._pids) > seen else -1
        if pid < 0:
            raise RuntimeError("the kernel fork server did not answer (it is gone)")
        return pid

    def returncode(self, pid: int) -> int | None:
        """The kernel's exit code once the server has reaped it (negative: the signal it died of), else None."""
        with self._changed:
            if pid in self._ended:
                return self._ended[pid]
        return None if self.alive() else -signal.SIGKILL

    def close(self) -> None:
        """Stop the server: it kills the kernels it still has and exits."""
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)


class ForkedKernel:
    """What jupyter_client's LocalProvisioner asks of its kernel process (a Popen), for a forked kernel."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int, server: ForkServer):
        self.pid, self._server = pid, server

    def poll(self) -> int | None:
        return self._server.returncode(self.pid)

    def wait(self, timeout: float | None = None) -> int:
        with self._server._changed:
            self._server._changed.wait_for(lambda: self.poll() is not None, timeout=timeout)
        code = self.poll()
        if code is None:
            raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout)
        return code

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, number)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class ForkedProvisioner(LocalProvisioner):
    """LocalProvisioner whose kernel comes from a ForkServer (when its command is the ipykernel launcher and the
    server is up; otherwise it starts one as LocalProvisioner does)."""

    server: ForkServer | None = None

    async def launch_kernel(self, cmd: list[str], **kwargs):
        server = self.server
        if server is None or not server.alive() or cmd[1:3] != LAUNCHER:
            return await super().launch_kernel(cmd, **kwargs)
        cwd = str(kwargs.get("cwd") or os.getcwd())
        env = dict(kwargs.get("env") or os.environ)
        pid = server.spawn(cmd[3:], env, cwd)
        self.process = ForkedKernel(pid, server)
        self.pid = self.pgid = pid  # the kernel leads a session of its own, as jupyter_client's kernels do
        self.cwd = cwd
        return self.connection_info


# ---------------------------------------------------------------------------------------------------------------
# the server


def serve(replies_fd: int, preload: list[str]) -> None:
    """Import, then fork a kernel per request on stdin until stdin closes; report each kernel's end."""
    _preload(preload)
    replies = os.fdopen(replies_fd, "w", encoding="utf-8", buffering=1)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select through the wakeup fd
    requests = sys.stdin.buffer
    kernels: set[int] = set()
    pending = b""
    while True:
        ready, _, _ = select.select([requests, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(kernels, replies)
        if requests not in ready:
            continue
        chunk = os.read(requests.fileno(), 1 << 20)
        if not chunk:  # the batch is gone or done: so are its kernels
            for pid in kernels:
                _signal(pid, signal.SIGKILL)
            return
        pending += chunk
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            request = json.loads(line)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _become_kernel(request, close=[requests.fileno(), replies.fileno(), wake_r, wake_w])
            kernels.add(pid)
            replies.write(f"pid {pid}\n")


def _preload(preload: list[str]) -> None:
    """The server before its first request: the modules every kernel needs imported once, here, and Ctrl-C left to
    the batch."""
    if sys.path and sys.path[0] in ("", os.getcwd()):  # `-m` put the folder first; ipykernel_launcher drops it too
        del sys.path[0]
    # as jupyter_client sets it for its kernels: debugpy's warning about frozen modules, printed at its import
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    for module in (*KERNEL_MODULES, *preload):
        importlib.import_module(module)
    # frozen: no kernel's garbage collection walks the imports' objects again, nor so copies the pages they are on
    gc.collect()
    gc.freeze()
    # a Ctrl-C at the terminal reaches the batch's whole process group, this server included: the batch stops its
    # runs and summarises, and needs its kernels for that; the server ends when the batch closes its stdin
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)


def _reap(kernels: set[int], replies) -> None:
    while kernels:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        kernels.discard(pid)
        replies.write(f"exit {pid} {status}\n")


def _signal(pid: int, number: int) -> None:
    try:
        os.kill(pid, number)
    except ProcessLookupError:
        pass


def _become_kernel(request: dict, close: list[int]) -> None:
    """In the forked child: the kernel's own session, folder, environment and stdin, then IPKernelApp."""
    code = 1
    try:
        _as_a_kernel(request, close)
        from ipykernel import kernelapp

        kernelapp.launch_new_instance()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        # interrupted before ipykernel took SIGINT over (a spare kernel still starting when its batch stops): a
        # kernel that never ran has nothing to report, and a traceback would read as the batch's failure
        code = 128 + signal.SIGINT
    except BaseException:  # noqa: BLE001 — as an interpreter would, then exit: never back into the server's loop
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _as_a_kernel(request: dict, close: list[int]) -> None:
    """The forked child made a kernel's process: default signals, the server's descriptors closed, a session of its
    own, no stdin, the request's folder, environment and arguments."""
    import tempfile

    signal.set_wakeup_fd(-1)
    for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    server = os.getppid()
    for fd in close:
        os.close(fd)
    os.setsid()
    _name_process(b"ipykernel")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # from this environment
    # the kernel ends when its server does (JPY_PARENT_PID names the batch, which is not its parent)
    sys.argv = ["ipykernel_launcher", *request["argv"], f"--IPKernelApp.parent_handle={server}"]


def _name_process(name: bytes) -> None:
    """Set /proc/self/comm (prctl PR_SET_NAME): a forked kernel would otherwise show as its server's `python`."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(15, ctypes.c_char_p(name), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the name is cosmetic
        pass


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2:])
