"""Commands of the slurm transport: the job script and the scripts it runs, sbatch (for real and
--test-only), the job's state and facts (squeue, scontrol show job, sacct after the end), scancel, a command run inside a running
job (srun --overlap), and the listing of the user's launchlab jobs. They run on the login node; every value
is shell-quoted."""

from __future__ import annotations

import shlex

from launchlab.fields import ENV_NAME
from launchlab.hosts.commands.processes import TAGGED_END

JOB_PREFIX = "launchlab:"  # the job name and --comment of every job the kit submits start with it
# the states in which a job still holds (or waits for) its node and GPUs
LIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "REQUEUE_HOLD",
               "REQUEUE_FED", "RESIZING", "SIGNALING", "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD")
FACTS_FILE = "job.facts"  # what the job learnt about itself (node, GPUs, start time), key=value lines
SERVER_EXIT_FILE = "server.exit"
NODE_FACTS = "node-facts"  # the provenance commands the job runs on its node: node-facts.sh, .NAME.out/.err/.rc, .done


# the job's GPUs as 0…n-1, as a cluster that constrains devices with cgroups shows them to the job
RENUMBER_GPUS = ('n=$(echo "${SLURM_JOB_GPUS:-}" | tr , "\\n" | grep -c .); '
                 '[ "$n" -gt 0 ] && export CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n - 1)))')


# {node_rank}, {nnodes} and {master_addr} of a job's server: only its tasks know them, so they are rendered as
# these markers and each task's launch script replaces them (in argv and in the env file's values)
TASK_VALUES = {"node_rank": "@@LAUNCHLAB_NODE_RANK@@", "nnodes": "@@LAUNCHLAB_NNODES@@",
               "master_addr": "@@LAUNCHLAB_MASTER_ADDR@@"}
# what each task sets them to: its node's rank in the job, the job's node count, the first node of its list
_TASK_SHELL = """\
task_node_rank=${SLURM_NODEID:-0}
task_nnodes=${SLURM_JOB_NUM_NODES:-1}
task_master_addr=$(scontrol show hostnames "${SLURM_JOB_NODELIST:-}" 2>/dev/null | head -n 1)
[ -n "$task_master_addr" ] || task_master_addr=${SLURMD_NODENAME:-127.0.0.1}"""
_FILL = ('{var}=${{{var}//"@@LAUNCHLAB_NODE_RANK@@"/"$task_node_rank"}}; '
         '{var}=${{{var}//"@@LAUNCHLAB_NNODES@@"/"$task_nnodes"}}; '
         '{var}=${{{var}//"@@LAUNCHLAB_MASTER_ADDR@@"/"$task_master_addr"}}')


def launch_script(argv: list[str] | tuple[str, ...], *, env_file: str | None, log_name: str,
                  renumber_gpus: bool = False, per_task: bool = False, rank_logs: list[str] | None = None,
                  box_per_rank: bool = False) -> str:
    """A script (run inside the job, in the run folder) that execs argv with the env file's variables exported
    byte for byte, its output into log_name: the server (under srun, one task per node) or the sampler.
    `renumber_gpus`: see the job's GPUs as 0…n-1 (a simulated box in the job has exactly the job's GPUs,
    numbered from 0), before the env file, so a CUDA_VISIBLE_DEVICES of the params still wins. `per_task`:
    replace the TASK_VALUES markers in argv and in exported values with this task's. `rank_logs`: the log of
    each node rank (rank 0's is log_name). `box_per_rank`: a simulated box per node (simbox.node<rank>)."""
    lines = ["#!/bin/bash", "# written by launchlab: run inside the Slurm job, in the run folder"]
    if renumber_gpus:
        lines.append(RENUMBER_GPUS)
    if box_per_rank:
        lines.append('[ "${SLURM_NODEID:-0}" = 0 ] || export LAUNCHLAB_SIM_STATE="$LAUNCHLAB_SIM_STATE.node$SLURM_NODEID"')
    if env_file:
        lines.append(f"set -a; . ./{shlex.quote(env_file)}; set +a")
    log = shlex.quote(log_name)
    if rank_logs:
        cases = " ".join(f"{rank}) log={shlex.quote(name)};;" for rank, name in enumerate(rank_logs))
        lines.append(f'log={log}; case "${{SLURM_NODEID:-0}}" in {cases} esac')
        log = '"$log"'
    if not per_task:
        lines.append(f"exec {shlex.join(argv)} > {log} 2>&1 < /dev/null")
        return "\n".join(lines) + "\n"
    lines += [_TASK_SHELL,
              "for name in $(compgen -e); do",
              '  value=${!name}',
              '  case $value in *@@LAUNCHLAB_*) ;; *) continue;; esac',
              "  " + _FILL.format(var="value"),
              '  export "$name=$value"',
              "done",
              f"args=({' '.join(shlex.quote(a) for a in argv)})",
              'for i in "${!args[@]}"; do',
              '  a=${args[$i]}; ' + _FILL.format(var="a") + '; args[$i]=$a',
              "done",
              f'exec "${{args[@]}}" > {log} 2>&1 < /dev/null']
    return "\n".join(lines) + "\n"


def node_facts_script(facts: dict[str, str], timeouts_s: dict[str, float] | None = None) -> str:
    """A script (run by the job, on its node, before its server starts) that runs each provenance command
    (provenance.node_commands) and keeps its stdout, stderr and exit status in node-facts.NAME.out/.err/.rc.
    Each is cut off after its timeout (exit status 124): a hung nvidia-smi must not keep the server from starting."""
    lines = ["#!/bin/bash", "# written by launchlab: the provenance of the node the job got, before its server starts"]
    for name, command in facts.items():
        if not name.isidentifier():
            raise ValueError(f"not a name for a provenance command: {name!r}")
        limit = float((timeouts_s or {}).get(name, 300))
        lines.append(f"timeout -k 5 {limit:g} bash -c {shlex.quote(command)} > {NODE_FACTS}.{name}.out "
                     f"2> {NODE_FACTS}.{name}.err < /dev/null; echo $? > {NODE_FACTS}.{name}.rc")
    return "\n".join(lines) + "\n"


def _exports(env: dict[str, str] | None) -> list[str]:
    """The export lines of `env`; ValueError for a name the shell would not take."""
    exports = []
    for name, value in (env or {}).items():
        if not ENV_NAME.accepts(name):
            raise ValueError(f"not a valid environment variable name: {name!r}")
        exports.append(f"export {name}={shlex.quote(value)}")
    return exports


def job_script(folder: str, *, env: dict[str, str] | None = None, drain_s: float = 30, nodes: int = 1) -> str:
    """The batch script of one run: record the job's facts, run the node's provenance commands (node-facts.sh,
    when the kit wrote one), start the sampler (sampler.sh, when the run has one; on the job's first node) and
    the server (server.sh, one srun task per node; one that fails ends them all), forward a TERM to the server,
    wait for it, record its exit status, wait (bounded) for the server's GPU processes to go, then stop the
    sampler. `env`: variables exported first (a simulated box's PATH and state)."""
    exports = _exports(env)
    body = f"""\
#!/bin/bash
# written by launchlab: one run as one Slurm job
cd {shlex.quote(folder)} || exit 1
{chr(10).join(exports)}
{{ echo "job_id=$SLURM_JOB_ID"; echo "node=$SLURMD_NODENAME"; echo "nodelist=$SLURM_JOB_NODELIST"
  echo "partition=$SLURM_JOB_PARTITION"; echo "gpus=${{SLURM_JOB_GPUS:-}}"
  echo "cuda_visible_devices=${{CUDA_VISIBLE_DEVICES:-}}"; echo "started_at=$(date +%Y-%m-%dT%H:%M:%S.%N)"; }} > {FACTS_FILE}
# the node's provenance, where the server will run and before it starts (it must not compete with the start)
if [ -f {NODE_FACTS}.sh ]; then bash ./{NODE_FACTS}.sh; fi
echo done > {NODE_FACTS}.done
sampler=
if [ -f sampler.sh ]; then setsid bash ./sampler.sh & sampler=$!; fi
srun --nodes={int(nodes)} --ntasks={int(nodes)} --ntasks-per-node=1 --kill-on-bad-exit=1 bash ./server.sh &
server=$!
# scancel --signal=TERM (and the time limit's TERM) reach the batch shell too: pass it on, then keep waiting
trap 'kill -TERM "$server" 2>/dev/null' TERM
wait "$server"; rc=$?
while kill -0 "$server" 2>/dev/null; do wait "$server"; rc=$?; done
echo "$rc" > {SERVER_EXIT_FILE}
# the drain, inside the job: give the GPUs' processes up to {drain_s:.0f} s to leave before the job ends
if command -v nvidia-smi >/dev/null 2>&1; then
  for _ in $(seq {max(1, int(drain_s * 2))}); do
    [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -v '^$')" ] && break
    sleep 0.5
  done
fi
if [ -n "$sampler" ]; then kill -TERM -- -"$sampler" 2>/dev/null; wait "$sampler"; fi
exit "$rc"
"""
    return body


def sbatch(script: str, *, run_id: str, batch: str, folder: str, partition: str, time: str, gres: str | None,
           account: str | None, nodes: int, extra: list[str] | tuple[str, ...] = (), hold: bool = False,
           test_only: bool = False, nodelist: str | None = None) -> str:
    """Submit the job script (sbatch --parsable prints the job id); --test-only: ask whether it would be
    accepted, submitting nothing. The job name carries the run id, the comment the run id and the batch
    (`launchlab:<run id>@<batch>`: leftover detection tells a live batch's jobs from a dead one's)."""
    argv = ["sbatch", "--test-only"] if test_only else ["sbatch", "--parsable"]
    argv += [f"--job-name={JOB_PREFIX}{run_id}", f"--comment={JOB_PREFIX}{run_id}@{batch}", f"--partition={partition}",
             f"--time={time}", f"--nodes={nodes}", "--ntasks-per-node=1", f"--chdir={folder}",
             f"--output={folder}/job.out",
             # one run, one attempt: a job requeued after a node failure or a preemption would start the server
             # again into the same folder; ended, it is a named failure instead
             "--no-requeue"]
    if gres:
        argv.append(f"--gres={gres}")
    if account:
        argv.append(f"--account={account}")
    if nodelist:
        argv.append(f"--nodelist={nodelist}")
    if hold:
        argv.append("--hold")
    argv += list(extra)
    return f"{shlex.join(argv)} {shlex.quote(script)}"


def release(job_id: int) -> str:
    return f"scontrol release {int(job_id)}"


def job_state(job_id: int) -> str:
    """Print `STATE REASON NODES` of the job (any state the controller still remembers); squeue fails with
    "Invalid job id" once it forgot it."""
    return f"squeue -h -t all -j {int(job_id)} -o '%T %r %N'"


def job_details(job_id: int) -> str:
    """`scontrol show job` of one job, one line of key=value pairs."""
    return f"scontrol show job -o {int(job_id)}"


# what sacct is asked for one job's allocation (-X), and the name `scontrol show job` gives each field
ACCOUNTING_FIELDS = {"JobID": "JobId", "JobName": "JobName", "Partition": "Partition", "State": "JobState",
                     "ExitCode": "ExitCode", "NodeList": "NodeList", "Start": "StartTime", "End": "EndTime",
                     "Elapsed": "RunTime", "AllocTRES": "TRES"}
NO_VALUE = ("", "None", "None assigned", "Unknown")  # sacct's words for a field the job never had (never ran)


def job_accounting(job_id: int) -> str:
    """sacct of one job's allocation, one `|`-separated line without a header (parse_accounting reads it)."""
    return f"sacct -X -n -P -j {int(job_id)} -o {','.join(ACCOUNTING_FIELDS)}"


def parse_accounting(text: str, job_id: int) -> dict[str, str] | None:
    """The job's line of `job_accounting` in `scontrol show job`'s names (JobId, JobState, ExitCode, NodeList,
    StartTime, EndTime, …); None when sacct printed no line for the job (not in the database yet). A state of
    `CANCELLED by 1000` is JobState CANCELLED and CancelledBy 1000 (the uid); fields the job never had (a job
    cancelled while PENDING: NodeList `None assigned`, Start `None`) are left out."""
    names = list(ACCOUNTING_FIELDS.values())
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < len(names) or parts[0] != str(int(job_id)):
            continue
        extra = len(parts) - len(names)  # a `|` in the job name (the only free text here)
        parts = [parts[0], "|".join(parts[1:2 + extra]), *parts[2 + extra:]]
        found = {name: value for name, value in zip(names, parts, strict=True) if value not in NO_VALUE}
        state, _, detail = found.get("JobState", "").partition(" by ")
        if detail:
            found["JobState"], found["CancelledBy"] = state, detail
        return found
    return None


def cancel(job_id: int, signal: str | None = None) -> str:
    """scancel: with a signal, only signal the job's steps (its server); without, end the job."""
    if signal is not None and not signal.isalnum():
        raise ValueError(signal)
    sig = f"--signal={signal} " if signal else ""  # the steps (the server), not the batch shell: it drains after
    return f"scancel {sig}{int(job_id)}"


def in_job(job_id: int, command: str) -> str:
    """Run a shell command on the job's first node (--relative=0: node 0 of a multi-node server), inside its
    allocation, next to its server (srun --overlap shares the job's resources instead of waiting for them)."""
    return (f"srun --jobid={int(job_id)} --overlap --nodes=1 --ntasks=1 --relative=0 --quiet --gres=none "
            f"bash -c {shlex.quote(command)}")


def my_jobs() -> str:
    """The user's jobs the kit submitted, `JOBID STATE COMMENT` lines (the comment: `launchlab:<run id>@<batch>`),
    then a last line TAGGED_END (a listing cut short never reads as "no jobs")."""
    return f"squeue -h -u \"$(id -un)\" -o '%i %T %k' && echo {shlex.quote(TAGGED_END)}"
