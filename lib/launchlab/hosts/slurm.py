"""The `slurm` transport: each run is one batch job on a cluster, submitted from a login node (this machine, or
an ssh alias of it) whose filesystem the compute nodes share.

What a run asks of a host maps onto the scheduler like this:
- the run folder, the env files and the scripts are written through the login node onto the shared filesystem;
- starting the sampler submits the run's job held (`sbatch --hold`: it writes sampler.sh the job will run);
  starting the server writes server.sh and releases the job (or submits it, when the run has no sampler). Both
  process references carry the job id as their pid and pgid, so whatever stops a run's process groups (the
  cleanup, Ctrl-C, recovery) stops its job;
- `wait_started` waits while the job is PENDING (the progress says `queued` and Slurm's reason), so the ready
  timeout starts when the job runs, and returns the queue wait;
- alive = the job is still in a live state; stopping = `scancel --signal=TERM`, the grace period, `scancel`;
- the job runs the provenance commands on its node before its server starts (`node_facts`), so the facts are
  the compute node's, not the login node's;
- the server is one srun task per node; each fills in {node_rank}, {nnodes}, {master_addr} (`per_task`);
- the health URL and the smoke request are asked from inside the job (`srun --overlap` on its first node): the
  compute node's port need not be reachable from the login node;
- how the job ended (time limit, node failure, preemption) is a named failure reason (`ended_why`), where it
  ran (job id, node, partition, GPUs) is the run's provenance (`placement`), and its end is read from sacct
  where the cluster keeps accounting, else from the controller (`final_state`).
Other commands (locks, the kit's tagged processes) run on the login node; with an ssh login, every command
(the Slurm tools included) runs there over fabric.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

from launchlab.errors import HostError
from launchlab.hosts import commands, provenance, sim_spec, slurm_spec
from launchlab.hosts.base import CommandResult, JobStart, ProcessRef
from launchlab.hosts.commands import slurm as cmd
from launchlab.hosts.local import LocalHost
from launchlab.hosts.shell import ShellHost
from launchlab.store import rundir
from launchlab.tags import BATCH_ENV

POLL_S = 0.5
KILL_WAIT_S = 60.0  # scancel's KILL, then the controller's cleanup of the job (KillWait, epilog)
FACTS_WAIT_S = 600.0  # the node's provenance inside the job (an integrity check reads every file of a package)
NODE_FILE = "slurm-node"  # beside the run folders of a run directory: the node `pin_node` keeps every run on

# how a job ended that is not its server's own doing: (failure reason, what to say)
ENDINGS = {
    "TIMEOUT": ("job_time_limit", "Slurm ended the job at its time limit (time: {time}); raise `time` in the host's "
                                  "params, or the server needs longer than that to start"),
    "DEADLINE": ("job_time_limit", "Slurm ended the job at its deadline"),
    "NODE_FAIL": ("node_failure", "the job's node failed ({reason}); Slurm ended the job"),
    "BOOT_FAIL": ("node_failure", "the job's node failed to boot ({reason})"),
    "PREEMPTED": ("job_preempted", "Slurm preempted the job for a job of a higher priority tier or QOS ({reason}); "
                                   "the run is not requeued: repeat it with `launchlab run PARAMS --resume RUN_DIR`"),
    "OUT_OF_MEMORY": ("job_out_of_memory", "the job exceeded its memory limit and Slurm ended it"),
    "CANCELLED": ("job_cancelled", "the job was cancelled outside launchlab ({reason})"),
}


def open_host(name: str, spec: slurm_spec.SlurmSpec, *, sim_box: Path | None = None) -> SlurmHost:
    """The host of a `transport: slurm` entry; `sim_box`: the batch's simulated machine (with `simulate:`)."""
    return SlurmHost(name, spec, sim_box)


class SlurmHost(ShellHost):
    transport = "slurm"

    def __init__(self, name: str, spec: slurm_spec.SlurmSpec, box: Path | None = None):
        self.name, self.spec = name, spec
        self.simulated = spec.simulated
        if spec.login == "local":
            if spec.simulate is not None:
                from launchlab.hosts.sim import sim_root
                self.state_dir = (box or sim_root()) / name  # the batch's locks live here (locks.lock_dir)
                self.state_dir.mkdir(parents=True, exist_ok=True)
            default = str(self.state_dir / "work") if spec.simulate is not None else "~/.launchlab/work"
            self.workdir = os.path.expanduser(spec.workdir or default)
            # simulated: the kit's Python first on PATH, as in the jobs (and as on a sim host), so the login
            # commands (provenance) see the interpreter the simulated server runs with, not a shim's
            env = ({"PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}
                   if spec.simulate is not None else None)
            self.login = LocalHost(name, workdir=self.workdir, env=env)
        else:
            from launchlab.hosts import ssh, ssh_spec
            self.workdir = spec.workdir or ".launchlab/work"
            self.login = ssh.SshHost(name, ssh_spec.SshSpec(transport="ssh", address=spec.login, workdir=self.workdir))
        self._jobs: dict[str, int] = {}  # run folder → its job
        self._current: int | None = None  # the job whose server runs now (health checks, the smoke request)

    # -- the login node ---------------------------------------------------------------------------------------

    def execute(self, command: str, *, timeout: float, idempotent: bool) -> CommandResult:
        return self.login.execute(command, timeout=timeout, idempotent=idempotent)

    def write_text(self, path: str, text: str, private: bool = False) -> None:
        self.login.write_text(path, text, private)

    def read_bytes(self, path: str, offset: int = 0, size: int = -1) -> bytes:
        return self.login.read_bytes(path, offset, size)

    def file_size(self, path: str) -> int | None:
        return self.login.file_size(path)

    def fetch(self, remote_path: str, local_path: str) -> None:
        self.login.fetch(remote_path, local_path)

    def remove_dir(self, path: str) -> None:
        self.login.remove_dir(path)

    def close(self) -> None:
        self.login.close()

    # -- a run as a job ---------------------------------------------------------------------------------------

    @property
    def per_task(self) -> dict[str, str]:
        """{node_rank}, {nnodes}, {master_addr}: each task of the job fills them in (SLURM_NODEID, the job's node
        count, the first node of SLURM_JOB_NODELIST), unless the params give master_addr."""
        return dict(cmd.TASK_VALUES)

    @property
    def extra_logs(self) -> tuple[str, ...]:
        """The server logs of the job's other nodes (a multi-node server), collected with node 0's."""
        return tuple(rundir.RunFolder.log_name(rank) for rank in range(1, self.spec.nodes))

    def start_detached(self, role: str, argv, *, cwd: str, log_name: str, env_file: str | None = None) -> ProcessRef:
        server, nodes = role == "server", self.spec.nodes
        script = cmd.launch_script(argv, env_file=env_file, log_name=log_name,
                                   renumber_gpus=self.spec.simulate is not None, per_task=server,
                                   rank_logs=[rundir.RunFolder.log_name(r) for r in range(nodes)] if server and nodes > 1
                                   else None, box_per_rank=server and nodes > 1 and self.spec.simulate is not None)
        if role == "server":
            self.write_text(f"{cwd}/server.sh", script)
            # the provenance is gathered by the job on the node it gets, not here on the login node
            self.write_text(f"{cwd}/{cmd.NODE_FACTS}.sh", cmd.node_facts_script(provenance.node_commands(argv),
                                                                                 provenance.TIMEOUTS_S))
            job = self._jobs.get(cwd)
            if job is None:
                job = self._submit(cwd, hold=False, batch=self._batch_of(cwd, env_file))
            else:
                self.run(cmd.release(job), timeout=60)
            self._current = job
        else:  # the sampler: it starts with the job, which waits (held) for its server
            self.write_text(f"{cwd}/sampler.sh", script)
            job = self._submit(cwd, hold=True, batch=self._batch_of(cwd, env_file))
        return ProcessRef(role, job, job)

    def _batch_of(self, cwd: str, env_file: str | None) -> str:
        """The batch the run belongs to, from the env file the lifecycle wrote (LAUNCHLAB_BATCH): the job's
        comment carries it, so leftover detection can tell a live batch's jobs from a dead one's."""
        if env_file:
            for line in self.read_bytes(f"{cwd}/{env_file}").decode("utf-8", "replace").split("\n"):
                name, _, value = line.partition("=")
                if name == BATCH_ENV:
                    return (shlex.split(value) or ["-"])[0]
        return "-"

    def _submit(self, cwd: str, hold: bool, batch: str = "-") -> int:
        env = None
        if self.spec.simulate is not None:  # the job's own simulated box, in its run folder (one per node)
            from launchlab.hosts.sim import prepare_box
            sim = self.spec.simulate
            box = sim_spec.SimSpec(transport="sim", gpus=sim.gpus, mem_total_mib=sim.mem_total_mib, pace=sim.pace,
                                   mem_reserved_mib=sim.mem_reserved_mib, weights_gib_per_rank=sim.weights_gib_per_rank,
                                   gpu_name=sim.gpu_name.replace(",", " "))
            # one nvidia-smi stand-in for every job: their PATH is the same, as on a real cluster's nodes
            shared_bin = Path(self.state_dir) / "bin"
            env = prepare_box(Path(cwd) / "simbox", self.name, box, bin_dir=shared_bin)
            for rank in range(1, self.spec.nodes):
                prepare_box(Path(cwd) / f"simbox.node{rank}", f"{self.name}-node{rank}", box, bin_dir=shared_bin)
        self.write_text(f"{cwd}/job.sh", cmd.job_script(cwd, env=env, nodes=self.spec.nodes))
        out = self.run(self._sbatch(cwd, hold=hold, batch=batch), timeout=120, idempotent=False)  # twice would be two jobs
        text = out.stdout.strip().splitlines()[-1:] or [""]
        job_text = text[0].split(";")[0]
        if not job_text.isdigit():
            raise HostError(self.name, f"sbatch printed no job id: {out.stdout!r} {out.stderr!r}")
        self._jobs[cwd] = int(job_text)
        return int(job_text)

    def _sbatch(self, cwd: str, *, hold: bool = False, test_only: bool = False, batch: str = "-") -> str:
        s = self.spec
        pinned = self._pinned(cwd) if s.pin_node else None
        return cmd.sbatch(f"{cwd}/job.sh", run_id=os.path.basename(cwd.rstrip("/")), batch=batch, folder=cwd,
                          partition=s.partition, time=s.time, gres=s.gres, account=s.account, nodes=s.nodes, extra=s.sbatch_args,
                          hold=hold, test_only=test_only, nodelist=pinned)

    def check_launchable(self, sampler: str) -> None:
        """Its GPUs are on the nodes its jobs get: whether the scheduler would take one (nvidia-smi is the nodes')."""
        self.check_submission(f"{self.workdir}/.submit-check")

    def gpu_indices(self) -> set[int] | None:
        return None  # the scheduler picks each job's GPUs (gpu_slots do not apply)

    def check_submission(self, folder: str) -> None:
        """Ask the scheduler whether a job of this host would be accepted (`sbatch --test-only`), submitting
        nothing; HostError with Slurm's answer when it would not (an unknown partition, gres no node has)."""
        self.make_dir(folder)
        self.write_text(f"{folder}/job.sh", cmd.job_script(folder))
        res = self.run(self._sbatch(folder, test_only=True), timeout=120, check=False)
        self.remove_dir(folder)
        if res.exit_code != 0:
            s = self.spec
            raise HostError(self.name, f"Slurm refuses the host's job (partition {s.partition!r}, gres {s.gres!r}, "
                                       f"time {s.time!r}, sbatch_args {s.sbatch_args}): {res.stderr.strip()[-500:]}. "
                                       "Nothing was submitted; fix `hosts." + self.name + "` in the params")

    def _pinned(self, cwd: str) -> str | None:
        """The node the first run of the run directory got (pin_node), once one has started."""
        text = self.read_bytes(f"{os.path.dirname(cwd.rstrip('/'))}/{NODE_FILE}").decode().strip()
        return text or None

    def _state(self, job: int) -> tuple[str, str, str]:
        """(state, reason, node list) of the job; ("", "", "") once the controller forgot it."""
        res = self.run(cmd.job_state(job), timeout=60, check=False)
        if res.exit_code != 0:
            if "Invalid job id" in res.stderr:
                return "", "", ""
            raise HostError(self.name, f"cannot tell the state of job {job}: squeue exited {res.exit_code}: "
                                       f"{res.stderr.strip()[-300:]}")
        parts = (res.stdout.strip().splitlines() or [""])[0].split()
        return (parts + ["", "", ""])[0], (parts + ["", "", ""])[1], (parts + ["", "", ""])[2]

    def run_on_gpu_node(self, command: str, *, timeout: float = 60) -> str | None:
        """The run's GPUs are on the node its job gets, which the kit's commands (on the login node) do not reach:
        the job samples them itself."""
        return None

    def facts_before_start(self) -> dict[str, CommandResult] | None:
        """Nothing yet: the job runs the provenance's commands on the node it gets (job_start reads them)."""
        return {}

    def job_start(self, ref: ProcessRef, on_wait) -> JobStart:
        """The job once it runs: the queue waited out (wait_started), where it runs (placement) and the provenance
        its node gathered before the server started (node_facts)."""
        return JobStart(self.wait_started(ref, on_wait), self.placement(ref), self.node_facts(ref))

    def wait_started(self, ref: ProcessRef, on_wait) -> float:
        """Wait while the job is queued (on_wait(Slurm's reason) at each change); return the seconds it waited."""
        tic, last = time.monotonic(), None
        while True:
            state, reason, node = self._state(ref.pgid)
            if state not in ("PENDING", "CONFIGURING", "REQUEUED"):
                break
            reason = reason if reason not in ("", "None") else state  # "None": not yet looked at by the scheduler
            if reason != last:
                on_wait(reason)
                last = reason
            time.sleep(POLL_S)
        if state == "RUNNING" and self.spec.pin_node and node:
            folder = next((f for f, j in self._jobs.items() if j == ref.pgid), None)
            if folder is not None and self._pinned(folder) is None:
                self.write_text(f"{os.path.dirname(folder.rstrip('/'))}/{NODE_FILE}", node + "\n")
        return round(time.monotonic() - tic, 2)

    def group_alive(self, pgid: int) -> bool:
        state = self._state(pgid)[0]
        return state in cmd.LIVE_STATES

    def kill_group(self, pgid: int, grace_s: float) -> str:
        """`scancel --signal=TERM` (the server stops; the job drains and ends), up to grace_s, then `scancel`."""
        if not self.group_alive(pgid):
            return "gone"
        state = self._state(pgid)[0]
        if state == "PENDING":  # nothing runs yet: no server to let stop
            self.run(cmd.cancel(pgid), timeout=60)
            return self._gone(pgid, "KILL")
        self.run(cmd.cancel(pgid, "TERM"), timeout=60, check=False)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not self.group_alive(pgid):
                return "TERM"
            time.sleep(POLL_S)
        self.run(cmd.cancel(pgid), timeout=60)
        return self._gone(pgid, "KILL")

    def _gone(self, job: int, signal: str) -> str:
        deadline = time.monotonic() + KILL_WAIT_S
        while self.group_alive(job):
            if time.monotonic() > deadline:
                raise HostError(self.name, f"job {job} is still not gone {KILL_WAIT_S:.0f} s after scancel; "
                                           f"check it with `squeue -j {job}` and end it with `scancel {job}`")
            time.sleep(POLL_S)
        return signal

    def ended_why(self, pgid: int) -> tuple[str, str] | None:
        """How the job ended, when the scheduler ended it (time limit, node failure, preemption, …): (reason,
        message); None when it ended because its server exited. A job the controller already forgot is looked up
        in the accounting, where the cluster keeps one."""
        state, reason, _ = self._state(pgid)
        if not state:
            state = (self._accounting(pgid)[0] or {}).get("JobState", "")
        reason = reason if reason not in ("", "None") else state  # "None": Slurm gave no reason of its own
        for name, (code, text) in ENDINGS.items():
            if state.startswith(name):
                return code, f"job {pgid}: " + text.format(time=self.spec.time, reason=reason)
        return None

    def placement(self, ref: ProcessRef) -> dict:
        """Where the job runs, from `scontrol show job` (read when it starts to run)."""
        res = self.run(cmd.job_details(ref.pgid), timeout=60, check=False)
        facts = dict(part.split("=", 1) for part in shlex.split(res.stdout.strip()) if "=" in part)
        keep = ("JobId", "JobName", "JobState", "Partition", "NodeList", "ReqNodeList", "BatchHost", "NumNodes", "TimeLimit",
                "SubmitTime", "StartTime", "EndTime", "Reason", "ExitCode", "TRES", "Account", "Comment")
        found = {k: facts[k] for k in keep if k in facts}
        gres = [v for k, v in facts.items() if k.startswith(("TresPerNode", "Gres", "TresPerJob"))]
        if gres:
            found["gres"] = gres[0]
        return found

    def node_facts(self, ref: ProcessRef, timeout_s: float = FACTS_WAIT_S) -> dict[str, CommandResult] | None:
        """What the job's provenance commands printed on its node (node-facts.sh), once the job has run them;
        None when the job ended, or timeout_s passed, before they were done (the provenance then lacks them)."""
        folder = next((f for f, j in self._jobs.items() if j == ref.pgid), None)
        if folder is None:
            return None
        deadline = time.monotonic() + timeout_s
        while not self.read_bytes(f"{folder}/{cmd.NODE_FACTS}.done"):
            if time.monotonic() > deadline or not self.group_alive(ref.pgid):
                return None
            time.sleep(POLL_S)
        found = {}
        for name in provenance.TIMEOUTS_S:
            base = f"{folder}/{cmd.NODE_FACTS}.{name}"
            rc = self.read_bytes(f"{base}.rc").decode("utf-8", "replace").strip()
            if rc:
                found[name] = CommandResult(name, self.read_bytes(f"{base}.out").decode("utf-8", "replace"),
                                            self.read_bytes(f"{base}.err").decode("utf-8", "replace"),
                                            int(rc) if rc.lstrip("-").isdigit() else -1)
        return found

    def final_state(self, ref: ProcessRef) -> dict:
        """How the job ended (JobId, JobState, Reason, ExitCode, NodeList, EndTime, …) and where that was read
        (`source`): sacct where the cluster keeps accounting (what a cluster keeps for good), else
        `scontrol show job` (the controller's memory of the job, MinJobAge), with why sacct could not say
        (`sacct_unavailable`)."""
        found, why = self._accounting(ref.pgid)
        if found is not None:
            return {**found, "source": "sacct"}
        facts = self.placement(ref)
        kept = {k: facts[k] for k in ("JobId", "JobState", "Reason", "ExitCode", "NodeList", "StartTime", "EndTime",
                                      "RunTime") if k in facts}
        return {**kept, "source": "scontrol", "sacct_unavailable": why}

    def _accounting(self, job: int) -> tuple[dict | None, str]:
        """The job's ended record from sacct, or (None, why not): no accounting on the cluster (sacct says
        "accounting storage is disabled"), the database unreachable, or not (yet) an ended job there."""
        res = self.run(cmd.job_accounting(job), timeout=60, check=False)
        if res.exit_code != 0:
            return None, (res.stderr.strip().splitlines() or [f"sacct exited {res.exit_code}"])[-1][-300:]
        found = cmd.parse_accounting(res.stdout, job)
        if found is None:
            return None, f"sacct has no line for job {job}"
        if found.get("JobState", "") in cmd.LIVE_STATES:  # the database hears of the end a moment after it
            return None, f"sacct still says {found['JobState']}"
        return found, ""

    # -- asked from inside the job ----------------------------------------------------------------------------

    def http_status(self, url: str, timeout: float = 2.0) -> int | str:
        if self._current is None:
            return "no job running"
        res = self.run(cmd.in_job(self._current, commands.http_status(url, timeout)), timeout=timeout + 30, check=False)
        return commands.answer_of(res.stdout)

    def http_post(self, url: str, body: dict, timeout: float) -> tuple[int | None, str]:
        import json
        if self._current is None:
            return None, "no job of this host is running"
        out = self.run(cmd.in_job(self._current, commands.http_post(url, body, timeout)), timeout=timeout + 60,
                       check=False, idempotent=False)
        try:
            status, text = json.loads(out.stdout.strip().splitlines()[-1])
            return status, text
        except (ValueError, IndexError):
            return None, (out.stderr or out.stdout)[-500:]

    # -- leftovers --------------------------------------------------------------------------------------------

    def leftovers(self, live: set[str]) -> list[dict]:
        """The user's live jobs the kit submitted for a batch that is gone (no live lock names it), in the form
        of recovery.leftovers: [{pgid (the job id), pids, run, batch}]."""
        out = self.run(cmd.my_jobs(), timeout=60).stdout
        lines = out.splitlines()
        if not lines or lines[-1] != commands.TAGGED_END:  # a cut-off listing never reads as "none left"
            raise HostError(self.name, f"the listing of the user's jobs did not run to its end ({out[-200:]!r})")
        found = []
        for line in lines[:-1]:
            parts = line.split(maxsplit=2)
            if len(parts) != 3 or not parts[0].isdigit() or not parts[2].startswith(cmd.JOB_PREFIX):
                continue
            run, _, batch = parts[2].removeprefix(cmd.JOB_PREFIX).rpartition("@")
            if parts[1] in cmd.LIVE_STATES and batch not in live:
                found.append({"pgid": int(parts[0]), "pids": [int(parts[0])], "run": run, "batch": batch,
                              "job": int(parts[0]), "state": parts[1]})
        return found
