"""The tests' `launchlab` command: a real process of its own, forked from a warm interpreter.

A fresh `python -m launchlab.cli run …` spends 3–4 s of CPU importing scipy.stats, pandas, papermill, pydantic and
the kit before it does anything, and the suite starts well over a hundred of them: on two cores, that alone was
about a third of `make test`. So each pytest-xdist worker starts one server (this file run as a program) that
imports the CLI's modules once and then, per command, forks a child that becomes that command:

    client (python -S cliserver.py ARG…)  ──argv, cwd, environment, its stdin/stdout/stderr──▶  server
    server ── fork ──▶ child: the client's fds as 0/1/2, chdir, the client's environment, launchlab.cli.main()
    client ◀── the child's pid, then its wait status ── server      client exits the same way (code or signal)

The child is what a user's `launchlab` process is — the CLI's own code in a process of its own, with its own
pid, environment, working folder, file descriptors, exit status and signal handlers — except that its modules were
imported before its environment was set (the kit reads its variables at call time: launchlab/config.py) and
/proc/PID/environ shows the server's environment. The client forwards the signals a test sends it (SIGINT,
SIGTERM, SIGHUP, …) to the child, and dies of the signal the child died of. A client killed outright (a test's
timeout) has its child killed too. Tests that walk the CLI's process tree by pid (test_flood) run the CLI as
`python -m launchlab.cli` instead (conftest.LAUNCHLAB_EXEC), and so does the client when no server is named in
its environment. The server forks only from its single thread: it runs no thread of its own.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import struct
import sys

SOCKET_ENV = "LAUNCHLAB_TEST_CLI_SERVER"
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
LIB = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib")


def _send(sock: socket.socket, payload: bytes, fds: list[int] | None = None) -> None:
    header = struct.pack("!I", len(payload))
    if fds:
        socket.send_fds(sock, [header], fds)
    else:
        sock.sendall(header)
    sock.sendall(payload)


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(left)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def client(argv: list[str]) -> None:
    """Run `launchlab ARGV` through the server named in the environment, as if this process were it."""
    import json

    path = os.environ.get(SOCKET_ENV)
    if not path or not os.path.exists(path):
        os.execv(sys.executable, [sys.executable, "-m", "launchlab.cli", *argv])
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    _send(sock, request, fds=[0, 1, 2])
    pid = int(_exactly(sock, 8).decode())
    for number in FORWARDED:
        signal.signal(number, lambda n, _frame: os.kill(pid, n))
    status = int(_exactly(sock, 8).decode())  # recv resumes after each forwarded signal (PEP 475)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
    os._exit(os.waitstatus_to_exitcode(status))


def serve(path: str) -> None:
    """Accept commands on the socket at path until stdin closes (the fixture that started the server is gone)."""
    import json
    import select

    sys.path.insert(0, LIB)
    # What `launchlab run`, `report`, `validate`, `parse` import, so that no child imports it again.
    import papermill  # noqa: F401
    import scipy.stats  # noqa: F401

    import launchlab.cli
    import launchlab.reporting.export  # noqa: F401
    import launchlab.reporting.reportmd  # noqa: F401
    import launchlab.runner.batch  # noqa: F401
    import launchlab.verdicts.frames  # noqa: F401

    # frozen, as in runner/kernelfork.py: no command's garbage collection walks (and copies) the imports' pages
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select through the wakeup fd
    children: dict[int, socket.socket] = {}  # child pid → its client's connection
    while True:
        ready, _, _ = select.select([listener, sys.stdin, wake_r, *children.values()], [], [])
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1024):
            for pid in children:
                _kill(pid)
            return
        if wake_r in ready:
            os.read(wake_r, 1024)
        _reap(children)
        for conn in [c for c in children.values() if c in ready]:
            if not conn.recv(1):  # the client is gone (a test's timeout killed it): its child goes as well
                _kill(next(pid for pid, c in children.items() if c is conn))
        if listener in ready:
            conn, _ = listener.accept()
            header, fds, _, _ = socket.recv_fds(conn, 4, 3)
            request = json.loads(_exactly(conn, struct.unpack("!I", header)[0]))
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _become(request, fds, keep=conn, close=[listener, wake_r, wake_w, *children.values()])
            for fd in fds:
                os.close(fd)
            conn.sendall(b"%8d" % pid)
            children[pid] = conn


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(b"%8d" % status)
            except OSError:
                pass
            conn.close()


def _become(request: dict, fds: list[int], keep, close) -> None:
    """In the forked child: take the client's fds, folder and environment, run the CLI, exit as it would."""
    import atexit
    import tempfile
    import traceback

    import launchlab.cli

    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for number in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
            signal.signal(number, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for thing in close:
            thing.close() if hasattr(thing, "close") else os.close(thing)
        keep.close()
        for target, fd in enumerate(fds):  # over the server's own 0/1/2, under the same sys.std* objects
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # gettempdir() again, from this environment
        sys.argv = [launchlab.cli.__file__, *request["argv"]]
        try:
            sys.exit(launchlab.cli.main())  # what `python -m launchlab.cli` does
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt:  # as the interpreter does: the traceback, then death by SIGINT
            traceback.print_exc()
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:  # noqa: BLE001 — what the interpreter does with an uncaught exception
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(sys.argv[2])
    else:
        client(sys.argv[1:])
