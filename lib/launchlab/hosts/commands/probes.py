"""Commands that ask a host a question: does it answer, its clock, its user, a program on its PATH, an
environment variable, a free TCP port, and HTTP requests sent from the host itself (servers often bind
127.0.0.1 only, so asking from the kit's machine would not reach them)."""

from __future__ import annotations

import inspect
import json
import shlex
import socket

from launchlab.fields import ENV_NAME
from launchlab.hosts import ports


def answer() -> str:
    """A command that does nothing: whether the host runs commands at all."""
    return "true"


def host_clock() -> str:
    """The host's wall clock as a naive local ISO timestamp: the time base of its logs and nvidia-smi rows."""
    return "date +%Y-%m-%dT%H:%M:%S.%N"


def user_id() -> str:
    return "id -u"


def which(program: str) -> str:
    """Exit 0 when the program is on the shell's PATH."""
    return f"command -v {shlex.quote(program)} >/dev/null 2>&1"


def env_value(name: str) -> str:
    """Print an environment variable of the host's shell, `-` when unset."""
    if not ENV_NAME.accepts(name):
        raise ValueError(name)
    return f'printf "%s" "${{{name}:--}}"'


def free_port() -> str:
    """Print a TCP port free on the host's 127.0.0.1 right now (the server binds it a moment later): ports.py."""
    source = inspect.getsource(ports)  # the module the local host calls, so both pick alike
    return f"python3 -c {shlex.quote(source + 'print(pick())')}"


# Each prints one line; the values (URL, timeout, body) arrive in argv, never inside the code.
# what a probe got when no HTTP status came back (Host.http_status): the words the report says it in
REFUSED, TIMED_OUT, NO_ANSWER = "refused", "timed out", "no answer"
_HTTP_STATUS = """\
import socket, sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2])).status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception as e:
    r = getattr(e, 'reason', e)
    print('refused' if isinstance(r, ConnectionRefusedError) else
          'timed out' if isinstance(r, (socket.timeout, TimeoutError)) else 'no answer')
"""


def no_answer(exc: BaseException) -> str:
    """What stood in for an HTTP status: the connection refused, timed out, or another failure (as the probe command
    prints it on a remote host)."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, ConnectionRefusedError):
        return REFUSED
    return TIMED_OUT if isinstance(reason, (TimeoutError, socket.timeout)) else NO_ANSWER


def answer_of(text: str) -> int | str:
    """The probe command's line as Host.http_status returns it: the status, or what stood in for one."""
    text = text.strip()
    if text.isdigit() and text != "0":
        return int(text)
    return text if text in (REFUSED, TIMED_OUT) else NO_ANSWER
_HTTP_POST = """\
import json, sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1], data=sys.argv[2].encode(), headers={'Content-Type': 'application/json'}, method='POST')
try:
    r = urllib.request.urlopen(req, timeout=float(sys.argv[3]))
    print(json.dumps([r.status, r.read(4096).decode('utf-8', 'replace')]))
except urllib.error.HTTPError as e:
    print(json.dumps([e.code, e.read(4096).decode('utf-8', 'replace')]))
except Exception as e:
    print(json.dumps([None, str(e)]))
"""


def http_status(url: str, timeout: float) -> str:
    """GET url from the host; print the HTTP status, or what stood in for one: refused, timed out, no answer."""
    return f"python3 -c {shlex.quote(_HTTP_STATUS)} {shlex.quote(url)} {shlex.quote(repr(float(timeout)))}"


def http_post(url: str, body: dict, timeout: float) -> str:
    """POST body as JSON from the host; print `[status or null, response text]` as JSON."""
    return (f"python3 -c {shlex.quote(_HTTP_POST)} {shlex.quote(url)} {shlex.quote(json.dumps(body))} "
            f"{shlex.quote(repr(float(timeout)))}")
