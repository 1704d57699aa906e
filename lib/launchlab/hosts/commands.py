"""Shell command strings run on a host. One function builds each command; every value is shell-quoted.

These strings are the whole contract with a host's shell, so they are built here, in one place, and
unit-tested as strings. Transports only execute them.
"""

from __future__ import annotations

import re
import shlex

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env_file_text(env: dict[str, str]) -> str:
    """A file that `set -a; . FILE; set +a` turns into exported variables, values byte for byte.

    shlex.quote wraps each value in single quotes, so `$`, backquotes, `;` and newlines stay literal.
    """
    lines = ["# written by launchlab: the environment of the server process"]
    for name, value in env.items():
        if not _ENV_NAME.match(name):
            raise ValueError(f"not a valid environment variable name: {name!r}")
        if "\x00" in value:
            raise ValueError(f"environment value of {name} contains a NUL byte, which no process can receive")
        lines.append(f"{name}={shlex.quote(value)}")
    return "\n".join(lines) + "\n"


def start_detached(argv: list[str] | tuple[str, ...], *, cwd: str, log_name: str, env_file: str | None) -> str:
    """Start argv detached from the calling shell and print its pid.

    setsid makes the process the leader of a new session and process group (pid == pgid), so stopping the
    group later reaches every child it forks. All three standard streams are redirected: a command whose
    stdout or stderr still points at the caller's channel keeps that channel open (and dies of SIGPIPE
    when it closes). nohup keeps a hang-up of the launching session from reaching the server.
    """
    inner = shlex.join(argv)
    if env_file:
        inner = f"set -a; . ./{shlex.quote(env_file)}; set +a; exec {inner}"
    else:
        inner = f"exec {inner}"
    # `cd … || exit` rather than `cd … && setsid … &`: the latter backgrounds the whole list in a subshell
    # that keeps the caller's stdout open until the server exits, so the launching call would never return.
    return (
        f"cd {shlex.quote(cwd)} || exit 1; "
        f"setsid nohup bash -c {shlex.quote(inner)} > {shlex.quote(log_name)} 2>&1 < /dev/null & echo $!"
    )


def make_private_dir(path: str) -> str:
    """mkdir -p with every folder it creates (and the last one in any case) readable by its owner only."""
    q = shlex.quote(path)
    return f"(umask 077 && mkdir -p -- {q} && chmod 700 -- {q})"


def process_group(pid: int) -> str:
    """Print the process group id of pid (empty output if it is gone)."""
    return f"ps -o pgid= -p {int(pid)} || true"


def group_alive(pgid: int) -> str:
    """Print `alive` when any non-zombie process of the group is alive, `dead` when none is.

    The answer is printed, not an exit status: a command a dropped connection cut off, or a `ps` that failed,
    prints neither word, so "the group is dead" can never be read from a check that did not run.
    """
    return (
        "out=$(ps -e -o pgid=,stat=) || exit 2; "
        f"printf '%s\\n' \"$out\" | awk -v g={int(pgid)} "
        "'$1 == g && $2 !~ /^Z/ {n++} END {print (n ? \"alive\" : \"dead\")}'"
    )


def kill_group(pgid: int, signal: str) -> str:
    if signal not in ("TERM", "KILL", "INT"):
        raise ValueError(f"unexpected signal {signal}")
    return f"kill -{signal} -- -{int(pgid)} 2>/dev/null || true"


def host_clock() -> str:
    """The host's wall clock as a naive local ISO timestamp: the time base of its logs and nvidia-smi rows."""
    return "date +%Y-%m-%dT%H:%M:%S.%N"


TAGGED_END = "# end of the list"  # the last line of find_tagged's output: a listing without it did not run to its end


def find_tagged(env_name: str) -> str:
    """Print `pid pgid value` for every live process whose environment has env_name set, then TAGGED_END (POSIX sh).

    Reads /proc/PID/environ, which a process may only read for its own user's processes: the kit finds the
    processes it started as that user, which is what it must clean up. One grep over every environ file picks
    the few candidates, so the listing stays fast on a host running thousands of processes.
    """
    if not _ENV_NAME.match(env_name):
        raise ValueError(env_name)
    return (
        f"for f in $(grep -l -s -e '{env_name}=' /proc/[0-9]*/environ); do "
        "p=${f#/proc/}; p=${p%/environ}; "
        f"v=$(tr '\\0' '\\n' 2>/dev/null < \"$f\" | grep '^{env_name}=') || continue; "
        "s=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null); [ \"$s\" = Z ] && continue; "
        "g=$(ps -o pgid= -p $p 2>/dev/null | tr -d ' '); [ -n \"$g\" ] || continue; "
        f"echo \"$p $g ${{v#{env_name}=}}\"; "
        f"done; echo {shlex.quote(TAGGED_END)}"
    )


def signal_tagged(env_name: str, value: str, pids: list[int], signal: str) -> str:
    """Send signal to each of pids that still carries env_name=value: a pid reused since it was listed is spared."""
    if not _ENV_NAME.match(env_name):
        raise ValueError(env_name)
    if signal not in ("TERM", "KILL"):
        raise ValueError(f"unexpected signal {signal}")
    wanted = shlex.quote(f"{env_name}={value}")
    return (
        f"for p in {' '.join(str(int(p)) for p in pids)}; do "
        f"tr '\\0' '\\n' 2>/dev/null < /proc/$p/environ | grep -qxF -e {wanted} && kill -{signal} $p 2>/dev/null; "
        "done; true"
    )


# ---------------------------------------------------------------------------------------------------------
# Host locks (see locks.py): one file per GPU, created with `set -C` so that only one writer can make it.

def _lock_read(path: str) -> str:
    """The lock file, then its mtime and the host's clock (epoch seconds), each on its own line."""
    q = shlex.quote(path)
    return f"cat {q} 2>/dev/null; echo; stat -c %Y {q} 2>/dev/null || echo 0; date +%s"


def lock_take(path: str, owner_json: str, stale_s: int) -> str:
    """Create the lock file or, when it exists, print HELD and what `_lock_read` prints."""
    folder = shlex.quote(path.rsplit("/", 1)[0])
    return (f"mkdir -p {folder} 2>/dev/null; chmod 1777 {folder} 2>/dev/null; "
            f"if (set -C; printf '%s\\n' {shlex.quote(owner_json)} > {shlex.quote(path)}) 2>/dev/null; "
            f"then echo ACQUIRED; else echo HELD; {_lock_read(path)}; fi")


def lock_take_over(path: str, owner_json: str, stale_owner: str | None, stale_s: int) -> str:
    """Replace a stale lock: one taker at a time (a guard folder), and only if the file still names the stale
    owner (or is still older than stale_s seconds when it could not be read)."""
    q, guard = shlex.quote(path), shlex.quote(path + ".takeover")
    still = (f"grep -qF {shlex.quote(stale_owner)} {q}" if stale_owner else
             f"[ $(( $(date +%s) - $(stat -c %Y {q} 2>/dev/null || echo 0) )) -gt {int(stale_s)} ]")
    return (f"mkdir {guard} 2>/dev/null || {{ echo BUSY; exit 0; }}; "
            f"if {still}; then rm -f {q}; fi; "
            f"if (set -C; printf '%s\\n' {shlex.quote(owner_json)} > {q}) 2>/dev/null; then echo ACQUIRED; "
            f"else echo HELD; fi; rmdir {guard}")


def lock_touch(path: str, batch: str) -> str:
    q = shlex.quote(path)
    return f"grep -qF {shlex.quote(batch)} {q} 2>/dev/null && touch {q}; true"


def lock_release(path: str, batch: str) -> str:
    """Remove the lock file only if it is still this batch's."""
    q = shlex.quote(path)
    return f"grep -qF {shlex.quote(batch)} {q} 2>/dev/null && rm -f {q}; true"


def lock_list(folder: str) -> str:
    """For every lock file in the folder: its name, then `_lock_read`, then a record separator (\\x1e)."""
    q = shlex.quote(folder)
    return (f"for f in {q}/*.lock; do [ -f \"$f\" ] || continue; n=${{f##*/}}; echo \"${{n%.lock}}\"; "
            f"cat \"$f\" 2>/dev/null; echo; stat -c %Y \"$f\" 2>/dev/null || echo 0; date +%s; "
            "printf '\\036'; done")


def gpu_indices() -> str:
    """The host's GPU indices, one per line (nothing when nvidia-smi is missing or fails)."""
    return "nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null || true"


def find_launchlab_processes(run_env: str, batch_env: str, box_env: str) -> str:
    """Print `pid pgid uid batch box run` for every live process whose environment has run_env set, then
    TAGGED_END; batch is `-` for a process without batch_env (a kit before host locks), box `-` for one
    without box_env (not on a simulated box)."""
    if not (_ENV_NAME.match(run_env) and _ENV_NAME.match(batch_env) and _ENV_NAME.match(box_env)):
        raise ValueError((run_env, batch_env, box_env))
    return (
        "for f in /proc/[0-9]*/environ; do "
        "p=${f#/proc/}; p=${p%/environ}; "
        "e=$(tr '\\0' '\\n' < \"$f\" 2>/dev/null) || continue; "
        f"v=$(printf '%s\\n' \"$e\" | grep '^{run_env}=') || continue; "
        f"b=$(printf '%s\\n' \"$e\" | grep '^{batch_env}=') || b='{batch_env}=-'; "
        f"x=$(printf '%s\\n' \"$e\" | grep '^{box_env}=') || x='{box_env}=-'; "
        "s=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null); [ \"$s\" = Z ] && continue; "
        "g=$(ps -o pgid= -p $p 2>/dev/null | tr -d ' '); [ -n \"$g\" ] || continue; "
        "u=$(stat -c %u /proc/$p 2>/dev/null); "
        f"echo \"$p $g $u ${{b#{batch_env}=}} ${{x#{box_env}=}} ${{v#{run_env}=}}\"; "
        f"done; echo {shlex.quote(TAGGED_END)}"
    )


def user_id() -> str:
    return "id -u"


def which(program: str) -> str:
    """Exit 0 when the program is on the shell's PATH."""
    return f"command -v {shlex.quote(program)} >/dev/null 2>&1"


def env_value(name: str) -> str:
    """Print an environment variable of the host's shell, `-` when unset."""
    if not _ENV_NAME.match(name):
        raise ValueError(name)
    return f'printf "%s" "${{{name}:--}}"'

