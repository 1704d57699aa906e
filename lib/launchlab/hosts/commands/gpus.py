"""nvidia-smi commands: the GPU list, the sampler that traces memory while a server starts, and the snapshots
of GPU memory and of the processes using it (with the run each one belongs to). The field lists belong to
telemetry.py, which parses what these commands print."""

from __future__ import annotations

import shlex

from launchlab.fields import ENV_NAME
from launchlab.gpu.telemetry import APP_FIELDS, SAMPLER_FIELDS, SNAPSHOT_FIELDS


def _select(gpus: list[int] | None) -> list[str]:
    """`-i 0,1`: only the GPUs a run was given (all of them when it was given none)."""
    return ["-i", ",".join(str(int(g)) for g in gpus)] if gpus else []


SMI_OUTPUT_BYTES = 1 << 20  # what the kit reads of one nvidia-smi listing: 1,024 GPUs (the most a host may declare)
#                            are 50 KB of indices and 1 MB of `nvidia-smi topo -m`; a host's output past it is not read


def bounded(command: str) -> str:
    """The command's output cut at SMI_OUTPUT_BYTES (for a command whose exit status is not looked at): a broken or
    hostile nvidia-smi listing a million GPUs must not cost the kit gigabytes."""
    return f"{{ {command}; }} | head -c {SMI_OUTPUT_BYTES}"


def bounded_checked(command: str) -> str:
    """bounded(), keeping the command's exit status (POSIX sh has no pipefail: the status comes back on fd 3 while
    the output goes through `head` to fd 4, the group's stdout). Cut, the command ends on SIGPIPE: status 141."""
    return (f"{{ exec 4>&1; rc=$( {{ {{ {command}; echo $? >&3; }} | head -c {SMI_OUTPUT_BYTES} >&4; }} 3>&1 ); "
            "(exit ${rc:-1}); }")


def gpu_indices() -> str:
    """The host's GPU indices, one per line (nothing when nvidia-smi is missing or fails), up to SMI_OUTPUT_BYTES."""
    return bounded("nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null || true")


def gpu_sampler(interval_ms: int, gpus: list[int] | None = None, kind: str = "nvidia-smi") -> list[str]:
    """The sampler's argv (started detached, its stdout the trace): a `--query-gpu` CSV every interval_ms."""
    if kind == "nvml":  # same CSV, through NVML (launchlab and nvidia-ml-py on the host's python3)
        return ["python3", "-m", "launchlab.nvml_sampler", "--interval-ms", str(int(interval_ms)), *_select(gpus)]
    return ["nvidia-smi", f"--query-gpu={','.join(SAMPLER_FIELDS)}", "--format=csv,nounits", "-lms",
            str(int(interval_ms)), *_select(gpus)]


def gpu_snapshot(gpus: list[int] | None = None) -> str:
    """Each GPU's memory now (SNAPSHOT_FIELDS, no header), up to SMI_OUTPUT_BYTES."""
    return bounded_checked(shlex.join(["nvidia-smi", f"--query-gpu={','.join(SNAPSHOT_FIELDS)}",
                                       "--format=csv,noheader,nounits", *_select(gpus)]))


def gpu_apps(gpus: list[int] | None = None) -> str:
    """The processes holding GPU memory now (APP_FIELDS, no header), up to SMI_OUTPUT_BYTES."""
    return bounded_checked(shlex.join(["nvidia-smi", f"--query-compute-apps={','.join(APP_FIELDS)}",
                                       "--format=csv,noheader,nounits", *_select(gpus)]))


OWNERS_MARK = "# owners"  # gpu_owners: the compute apps above it, each app's run id below it
OWNERS_END = "# end of the owners"


def gpu_owners(env_name: str, gpus: list[int] | None = None) -> str:
    """The processes holding GPU memory now (gpu_apps' lines), then OWNERS_MARK, then `PID RUN SID` for each of
    them: RUN is the value of env_name in the process's environment (the run id every process the kit starts
    carries), `-` when it has none or its environment cannot be read (another user's process, or one that renamed
    itself: setproctitle, which vLLM and SGLang call, writes over /proc/PID/environ); SID is its session (the kit
    starts each server in a session of its own, which its workers inherit), `?` when unreadable; a pid that is not
    a process here (nvidia-smi shows the pids of another pid namespace, e.g. from inside a container), or no longer
    is once read (it ended under the read: a failing server's ranks, looked at while they exit), is `PID ?`;
    then OWNERS_END. One command, so the owners are read while the processes nvidia-smi listed still run."""
    if not ENV_NAME.accepts(env_name):
        raise ValueError(env_name)
    # One grep reads every listed process's environment, and each process's session comes from `read` on its stat:
    # a look forked tr, grep, sed and cut per process (8 ranks: ~65 ms of CPU, every second while a server starts).
    return (
        f"a=$({gpu_apps(gpus)}) || exit 2; printf '%s\\n' \"$a\"; echo {shlex.quote(OWNERS_MARK)}; "
        "ps_=; files=; for p in $(printf '%s\\n' \"$a\" | cut -d, -f2); do "
        "case $p in ''|*[!0-9]*) continue;; esac; ps_=\"$ps_ $p\"; files=\"$files /proc/$p/environ\"; done; "
        # `file:NAME=value` per process that has it (grep -z: the environment's entries end in NUL, not newline)
        f"e=$([ -n \"$files\" ] && grep -az -H '^{env_name}=' $files 2>/dev/null | tr '\\0' '\\n'); "
        "for p in $ps_; do "
        "if [ -d /proc/$p ]; then "
        "v=-; while IFS= read -r l; do case $l in "
        f"\"/proc/$p/environ:{env_name}=\"*) v=${{l#*:{env_name}=}}; break;; esac; done <<EOF_\n$e\nEOF_\n"
        # the session: the 4th field after the command name's closing parenthesis (a name may hold spaces)
        "st=; read -r st < /proc/$p/stat 2>/dev/null; st=${st##*) }; set -- $st; "
        # still a process after the reads: else what they read (nothing) says nothing of whose it was
        "if [ -d /proc/$p ]; then echo \"$p ${v:--} ${4:-?}\"; else echo \"$p ?\"; fi; "
        "else echo \"$p ?\"; fi; "
        f"done; echo {shlex.quote(OWNERS_END)}"
    )
