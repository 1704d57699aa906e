"""Commands that start, find and stop processes on a host: detached starts in their own process group, the
env file they source, liveness checks, signals, and the listings of the kit's own (tagged) processes."""

from __future__ import annotations

import re
import shlex

from launchlab.fields import ENV_NAME

CONTROL_BYTE = re.compile(r"[\x01-\x1f\x7f]")  # the ASCII controls: one byte each in UTF-8, all of them \xHH in $'…'


def env_file_text(env: dict[str, str]) -> str:
    """A file that bash's `set -a; . FILE; set +a` turns into exported variables, values byte for byte, each
    variable on one line of its own: `NAME='value'`.

    A name is refused unless it is an environment variable name in full (`AUDITX\n` would leave `AUDITX` alone
    on a line: a command). A value is single-quoted (shlex.quote), so `$`, backquotes and `;` stay literal; one
    with a control character (a newline, a carriage return, an escape) is written in bash's `$'…'` quoting with
    each such character as `\\xHH`, so no value spans lines and a reader of the file line by line sees each
    variable whole. A NUL is refused: no process can receive it.
    """
    lines = ["# written by launchlab: the environment of the server process"]
    for name, value in env.items():
        if not ENV_NAME.accepts(name):
            raise ValueError(f"not a valid environment variable name: {name!r}")
        if "\x00" in value:
            raise ValueError(f"environment value of {name} contains a NUL byte, which no process can receive")
        lines.append(f"{name}={_quoted_line(value)}")
    return "\n".join(lines) + "\n"


_BASH_C_QUOTED = re.compile(r"[\x01-\x1f\x7f\\']")


def _quoted_line(value: str) -> str:
    """value as one bash word on one line: shlex.quote, or `$'…'` when it holds a control character."""
    if not CONTROL_BYTE.search(value):
        return shlex.quote(value)
    return "$'" + _BASH_C_QUOTED.sub(lambda m: "\\" + m.group() if m.group() in "\\'" else f"\\x{ord(m.group()):02x}",
                                     value) + "'"


def wrapper_script(argv: list[str] | tuple[str, ...]) -> str:
    """A /bin/sh script that runs argv with the script's own arguments after it (the simulated nvidia-smi on PATH)."""
    return f'#!/bin/sh\nexec {shlex.join(argv)} "$@"\n'


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


def process_group(pid: int, wait_s: float = 5.0) -> str:
    """Print the process group id of pid once it leads its own group, or whatever group it is in after wait_s;
    empty output if it is gone. The wait: `start_detached` prints the pid as soon as the shell has forked, and on a
    busy host the child may not yet have run setsid (it is still in the launching shell's group)."""
    p = int(pid)
    tries = max(1, round(wait_s / 0.02))
    return (f"for _ in $(seq {tries}); do g=$(ps -o pgid= -p {p} | tr -d ' '); "
            f"{{ [ -z \"$g\" ] || [ \"$g\" = {p} ]; }} && break; sleep 0.02; done; echo \"$g\"")


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


TAGGED_END = "# end of the list"  # the last line of find_tagged's output: a listing without it did not run to its end


def find_tagged(env_name: str) -> str:
    """Print `pid pgid value` for every live process whose environment has env_name set, then TAGGED_END (POSIX sh).

    Reads /proc/PID/environ, which a process may only read for its own user's processes: the kit finds the
    processes it started as that user, which is what it must clean up. One grep over every environ file picks
    the few candidates, so the listing stays fast on a host running thousands of processes.
    """
    if not ENV_NAME.accepts(env_name):
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
    if not ENV_NAME.accepts(env_name):
        raise ValueError(env_name)
    if signal not in ("TERM", "KILL"):
        raise ValueError(f"unexpected signal {signal}")
    wanted = shlex.quote(f"{env_name}={value}")
    return (
        f"for p in {' '.join(str(int(p)) for p in pids)}; do "
        f"tr '\\0' '\\n' 2>/dev/null < /proc/$p/environ | grep -qxF -e {wanted} && kill -{signal} $p 2>/dev/null; "
        "done; true"
    )


def find_launchlab_processes(run_env: str, batch_env: str, box_env: str) -> str:
    """Print `pid pgid uid batch box run` for every live process whose environment has run_env set, then
    TAGGED_END; batch is `-` for a process without batch_env (a kit before host locks), box `-` for one
    without box_env (not on a simulated box)."""
    if not (ENV_NAME.accepts(run_env) and ENV_NAME.accepts(batch_env) and ENV_NAME.accepts(box_env)):
        raise ValueError((run_env, batch_env, box_env))
    # One grep finds the processes that carry run_env and one reads their three values; each one's state and group
    # come from its stat and its uid from its status by the shell's own `read`: a loop that forked tr, grep, cut, ps
    # and stat for every process of the host cost a preflight ~0.5 s of CPU with 300 processes up, seconds with
    # thousands. Values are matched per file ("FILE:NAME=value" lines).
    return (
        f"fs=$(grep -l -s -e '{run_env}=' /proc/[0-9]*/environ); "
        f"e=$([ -n \"$fs\" ] && grep -a -z -H -s -e '^{run_env}=' -e '^{batch_env}=' -e '^{box_env}=' $fs "
        "| tr '\\0' '\\n'); "
        "for f in $fs; do p=${f#/proc/}; p=${p%/environ}; has=; v=; b=-; x=-; "
        "while IFS= read -r l; do case $l in "
        f"\"$f:{run_env}=\"*) has=1; v=${{l#\"$f:{run_env}=\"}};; "
        f"\"$f:{batch_env}=\"*) b=${{l#\"$f:{batch_env}=\"}};; "
        f"\"$f:{box_env}=\"*) x=${{l#\"$f:{box_env}=\"}};; "
        "esac; done <<EOF_\n$e\nEOF_\n"
        "[ -n \"$has\" ] || continue; "
        # after the command name's closing parenthesis: state, parent, process group (a name may hold spaces)
        "st=; read -r st < /proc/$p/stat 2>/dev/null || continue; st=${st##*) }; set -- $st; "
        "[ \"$1\" = Z ] && continue; [ -n \"$3\" ] || continue; g=$3; "
        "u=; while read -r k w _; do [ \"$k\" = Uid: ] && { u=$w; break; }; done < /proc/$p/status 2>/dev/null; "
        "[ -n \"$u\" ] || continue; "
        "echo \"$p $g $u $b $x $v\"; "
        f"done; echo {shlex.quote(TAGGED_END)}"
    )
