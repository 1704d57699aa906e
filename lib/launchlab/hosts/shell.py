"""ShellHost: what every shell-driven transport shares — running a command and checking its exit status (in one
place), process groups, clock, folders, and HTTP requests sent from the host itself. A transport subclasses it
and provides `execute` and the file operations (which go through the transport, not the shell)."""

from __future__ import annotations

import abc
import json
import time
from pathlib import Path

from launchlab.errors import HostError
from launchlab.hosts import commands
from launchlab.hosts.base import CommandResult, ProcessRef, RunsAtOnce
from launchlab.polling import backoff
from launchlab.sim.state import STATE_ENV
from launchlab.tags import BATCH_ENV, RUN_ID_ENV


class ShellHost(RunsAtOnce, abc.ABC):
    """Process control through shell commands, shared by the transports; subclasses provide `execute` (and the
    file operations, which go through the transport rather than the shell)."""

    name: str
    # whether commands may run from several threads at once (an SSH connection is reopened by whichever thread
    # finds it dropped, so not there; a local shell has nothing shared)
    concurrent_commands: bool = False
    state_dir: Path | None = None  # a simulated box's folder (sim, a simulated Slurm cluster's login)
    per_task: dict[str, str] | None = None  # placeholders the host fills in as each task starts (none: the kit does)
    extra_logs: tuple[str, ...] = ()  # logs beside the server's to collect (a Slurm job's other nodes)

    @property
    def kit_env(self) -> dict[str, str]:
        """What the kit puts into its commands' environment here (base.Host): nothing, unless a transport says."""
        return {}

    def run(self, command: str, *, timeout: float = 60, check: bool = True, idempotent: bool = True) -> CommandResult:
        """Run a shell command on the host; raise HostError on a non-zero exit unless check=False, and always when
        the command did not run to its end (a timeout, a connection cut off under it). A transport that can lose
        its connection runs an idempotent command again on a reopened one; idempotent=False (starting a server)
        raises instead, since the cut-off command may already have done its work."""
        result = self.execute(command, timeout=timeout, idempotent=idempotent)
        return self.check(result) if check else result

    @abc.abstractmethod
    def execute(self, command: str, *, timeout: float, idempotent: bool) -> CommandResult:
        """Run a command through the transport and return how it ended, whatever its exit status; raise HostError
        only when it did not run to its end (see `run`; `timed_out` is the error of a timeout)."""

    def check(self, result: CommandResult) -> CommandResult:
        """The result of a command that exited 0; HostError naming the command and its stderr otherwise."""
        if result.exit_code != 0:
            raise HostError(self.name, f"command exited {result.exit_code}: {result.command}\n{result.stderr.strip()}")
        return result

    def timed_out(self, command: str, timeout: float) -> HostError:
        """The error of a command the transport stopped waiting for."""
        return HostError(self.name, f"command timed out after {timeout:.0f} s: {command}")

    def close(self) -> None:
        """Nothing is held open here; a transport with a connection closes it in its own `close`."""
        return None

    def check_launchable(self, sampler: str) -> None:
        """Before anything is launched: the sampler's nvidia-smi is on the PATH of a non-interactive shell here."""
        if sampler == "none":
            return
        found = self.run(commands.which("nvidia-smi"), timeout=30, check=False)
        if found.exit_code != 0:
            path = self.run(commands.env_value("PATH"), timeout=30, check=False).stdout.strip()
            raise HostError(self.name, f"nvidia-smi not found on PATH={path} (the PATH of a non-interactive shell "
                                       "there); nothing was launched. Install the NVIDIA driver utilities, make "
                                       "nvidia-smi reachable for non-interactive shells, or set `sampler: {kind: none}` "
                                       "to run without a GPU trace")

    def gpu_indices(self) -> list[int] | None:
        """Each GPU's index as the listing gives it, a GPU listed twice twice: the first cell of each line that starts
        with one (a stand-in printing more columns than asked for is counted too; "No devices were found" is not)."""
        out = self.run(commands.gpu_indices(), timeout=60, check=False).stdout
        firsts = (line.split(",", 1)[0].strip() for line in out.splitlines())
        return [int(cell) for cell in firsts if cell.isdigit()] or None

    def leftovers(self, live: set[str]) -> list[dict]:
        """This user's process groups tagged with a launchlab run whose batch is not in `live`, on this machine (or
        this simulated box: a box is a machine of its own, and a real host's processes are never a box's)."""
        me = self.run(commands.user_id(), timeout=30, check=False).stdout.strip()
        out = self.run(commands.find_launchlab_processes(RUN_ID_ENV, BATCH_ENV, STATE_ENV), timeout=60).stdout
        if not out.rstrip().endswith(commands.TAGGED_END):  # a cut-off listing never reads as "none left"
            raise HostError(self.name, f"the listing of launchlab processes did not run to its end ({out[-200:]!r})")
        box = self.run(commands.env_value(STATE_ENV), timeout=30, check=False).stdout.strip() or "-"
        groups: dict[int, dict] = {}
        for line in out.splitlines():
            parts = line.split(maxsplit=5)
            if len(parts) != 6 or not parts[0].isdigit() or not parts[1].isdigit():
                continue
            pid, pgid, uid, batch, where, run = int(parts[0]), int(parts[1]), parts[2], parts[3], parts[4], parts[5]
            if batch in live or (me and uid != me) or where != box:
                continue
            groups.setdefault(pgid, {"pgid": pgid, "pids": [], "run": run, "batch": batch})["pids"].append(pid)
        return list(groups.values())

    def start_detached(self, role: str, argv, *, cwd: str, log_name: str, env_file: str | None = None) -> ProcessRef:
        cmd = commands.start_detached(argv, cwd=cwd, log_name=log_name, env_file=env_file)
        result = self.run(cmd, timeout=30, idempotent=False)  # run twice, it would start two servers
        try:
            pid = int(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise HostError(self.name, f"starting the {role} printed no pid: {result.stdout!r} {result.stderr!r}") from None
        pgid_text = self.run(commands.process_group(pid), timeout=30).stdout.strip()
        # setsid made the process a group leader (the command waits for it to have run); if it already exited,
        # its group is its pid all the same.
        pgid = int(pgid_text) if pgid_text.isdigit() else pid
        if pgid != pid:
            self.kill_group(pgid, 1)
            raise HostError(self.name, f"the {role} (pid {pid}) is not leading its own process group ({pgid}); "
                                       "is `setsid` available on the host?")
        return ProcessRef(role, pid, pgid)

    def group_alive(self, pgid: int) -> bool:
        """Whether any process of the group still runs. Only the check's own answer counts: when it did not run
        (a lost connection, a failing `ps`) this raises HostError; it never guesses "dead"."""
        answer = self.run(commands.group_alive(pgid), timeout=30).stdout.strip()
        if answer not in ("alive", "dead"):
            raise HostError(self.name, f"cannot tell whether process group {pgid} is alive: the check printed "
                                       f"{answer[-200:]!r} instead of alive or dead")
        return answer == "alive"

    def tagged_listing(self, env_name: str) -> str:
        """`pid pgid value` for every live process carrying env_name, then commands.TAGGED_END (reaper.tagged)."""
        return self.run(commands.find_tagged(env_name), timeout=60).stdout

    def kill_group(self, pgid: int, grace_s: float) -> str:
        """TERM the whole group, wait up to grace_s, then KILL what is left. Returns the last signal sent,
        or "gone" when the group had already exited."""
        if not self.group_alive(pgid):
            return "gone"
        self.run(commands.kill_group(pgid, "TERM"), timeout=30)
        deadline = time.monotonic() + grace_s
        for pause in backoff():
            if not self.group_alive(pgid):
                return "TERM"
            if time.monotonic() >= deadline:
                break
            time.sleep(pause)
        self.run(commands.kill_group(pgid, "KILL"), timeout=30)
        deadline = time.monotonic() + 10
        for pause in backoff():
            if not self.group_alive(pgid):
                break
            if time.monotonic() > deadline:
                raise HostError(self.name, f"process group {pgid} survived SIGKILL; stop it by hand: kill -KILL -- -{pgid}")
            time.sleep(pause)
        return "KILL"

    # A process here starts when it is started, on this host, and ends only by its own doing or the kit's.

    def run_on_gpu_node(self, command: str, *, timeout: float = 60) -> str | None:
        """The run's GPUs are this host's: the command's output (HostError when it fails)."""
        return self.run(command, timeout=timeout).stdout

    def clock(self) -> str:
        return self.run(commands.host_clock(), timeout=30).stdout.strip()

    def claim_workdir(self) -> None:
        """Before anything is launched: the work folder is the user's alone (made 0700 when missing). Another
        user's folder, or one others can write, could hold what they planted: a Python package the server would
        import from its working folder, a link where the env file with its secrets goes."""
        self._owned(self.run(commands.own_folder(self.workdir, "the work folder"), timeout=30, check=False))

    def _owned(self, result: CommandResult) -> CommandResult:
        if result.exit_code == commands.NOT_YOURS:
            raise HostError(self.name, f"{result.stderr.strip()}; nothing was launched. Set the host's `workdir:` "
                                       "to a folder of your own, or remove that one if it is yours")
        return self.check(result)

    def make_dir(self, path: str) -> None:
        """A run folder: every folder this creates is 0700 (the env file inside holds secrets), inside a work
        folder checked to be the user's alone (claim_workdir, again: between runs is time enough to swap it)."""
        root = self.workdir.rstrip("/")
        inside = root if path == root or path.startswith(root + "/") else None
        self._owned(self.run(commands.make_private_dir(path, inside), timeout=30, check=False))

    def remove_dir(self, path: str) -> None:
        self.run(commands.remove_tree(path), check=False)

    def free_port(self) -> int:
        """A TCP port free on the host's 127.0.0.1 right now (the server binds it a moment later)."""
        return int(self.run(commands.free_port()).stdout.strip())

    def http_status(self, url: str, timeout: float = 2.0) -> int | str:
        """Asked from the host itself: servers often bind 127.0.0.1 only."""
        return commands.answer_of(self.run(commands.http_status(url, timeout), timeout=timeout + 10, check=False).stdout)

    def http_post(self, url: str, body: dict, timeout: float) -> tuple[int | None, str]:
        """POST a JSON body from the host itself: (status or None when nothing answered, response text)."""
        out = self.run(commands.http_post(url, body, timeout), timeout=timeout + 30, check=False,
                       idempotent=False)  # the server must see one request
        try:
            status, text = json.loads(out.stdout.strip().splitlines()[-1])
            return status, text
        except (ValueError, IndexError):
            return None, (out.stderr or out.stdout)[-500:]
