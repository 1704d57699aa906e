"""The params of a `slurm` host (a `hosts.<name>` entry with `transport: slurm`): a partition of a cluster,
reached through its scheduler from a login node (this machine, or an ssh alias), each run one batch job.

Every value here reaches `sbatch`'s argv (shell-quoted) or the job script, so each is checked to be what it says.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, StrictStr, model_validator

from launchlab import fields
from launchlab.fields import MAX_MIB, PathStr, no_control
from launchlab.hosts.base import HostParams


class SlurmSimulate(fields.StrictModel):
    """The simulated GPU box each job of a `simulate:` host runs in (the keys of a `sim` host)."""

    gpus: int = Field(8, ge=1, le=64, description="simulated GPUs in each job")
    mem_total_mib: int = Field(97887, gt=0, le=MAX_MIB, description="memory.total of each simulated GPU, MiB")
    mem_reserved_mib: int = Field(566, ge=0, le=MAX_MIB, description="memory the simulated driver reserves, MiB")
    weights_gib_per_rank: float = Field(70.0, ge=0, le=MAX_MIB / 1024,
                                        description="model weights the simulated server loads per rank, GiB")
    gpu_name: Annotated[str, Field(max_length=96, description="the simulated GPUs' name"), no_control("gpu_name")] = (
        "RTX PRO 6000 Blackwell Server Edition (simulated)")
    pace: float = Field(1.0, gt=0, le=1000, description="time scale of the simulated server (1: its usual pace)")


# The sbatch options `sbatch_args` may give, matched exactly as `--name=value` or `--name` (sbatch itself takes
# `-J x`, `--job`, `--out` for --job-name and --output: getopt's short options and unambiguous abbreviations, so a
# deny-list of prefixes let them through). Left out: what the kit sets for every job or what takes a run's job away
# from it — its name, comment, output, folder, partition, account, gres, nodes, tasks, requeue, hold, test-only,
# parsable — and what runs something else or as someone else (--wrap, --array, --uid, --gid, --export, --chdir).
SBATCH_OPTIONS = frozenset({  # each with its value: `--name=value` (a bare `--mem` would take the job script for it)
    "--qos", "--constraint", "--prefer", "--mem", "--mem-per-cpu", "--mem-per-gpu", "--cpus-per-task",
    "--cpus-per-gpu", "--gpus", "--gpus-per-node", "--gpus-per-task", "--gpu-bind", "--gpu-freq", "--reservation",
    "--exclude", "--licenses", "--mail-type", "--mail-user", "--nice", "--priority", "--tmp", "--begin",
    "--deadline", "--time-min", "--dependency", "--kill-on-invalid-dep", "--hint", "--wckey", "--switches",
    "--network", "--core-spec", "--thread-spec", "--threads-per-core", "--cores-per-socket", "--sockets-per-node",
    "--distribution", "--mem-bind", "--cpu-freq", "--acctg-freq", "--gres-flags", "--propagate",
})
SBATCH_FLAGS = frozenset({"--exclusive", "--oversubscribe", "--contiguous", "--use-min-nodes", "--spread-job"})


def sbatch_arg_problem(arg: str) -> str | None:
    """Why `arg` is not an sbatch option `sbatch_args` may give, or None."""
    name, value = arg.split("=", 1) if "=" in arg else (arg, None)
    if name in SBATCH_OPTIONS and value is not None or name in SBATCH_FLAGS and (value is None or name == "--exclusive"):
        return None
    if name in SBATCH_OPTIONS:
        return f"{name} takes its value in the same argument: `{name}=VALUE`"
    if name in SBATCH_FLAGS:
        return f"{name} takes no value"
    return ("not one of the sbatch options the kit passes on, each written whole (no short options, no "
            f"abbreviations): {', '.join(sorted(SBATCH_OPTIONS | SBATCH_FLAGS))}. The kit sets the job's name, "
            "comment, output, folder, partition, account, gres and nodes itself")


class SlurmSpec(HostParams):
    """A Slurm partition: each run is one job (`sbatch`), its server started with `srun` inside it."""

    transport: Literal["slurm"] = Field(description="`slurm`: each run one batch job of the cluster's scheduler")
    login: Annotated[str, fields.address("login")] = Field(
        "local", description="`local` (sbatch runs here) or an ssh alias of the login node")
    partition: Annotated[str, fields.SLURM_NAME.check("partition")] = Field(description="the partition (sbatch --partition)")
    account: Annotated[str, fields.SLURM_NAME.check("account")] | None = Field(
        None, description="the account to charge (sbatch --account)")
    gres: Annotated[str, fields.GRES.check("gres")] | None = Field(
        None, description="generic resources per node, e.g. gpu:8")
    nodes: int = Field(1, ge=1, le=64, description="nodes per job: > 1 is a multi-node server, one task per node "
                                                    "(srun), {node_rank}/{nnodes}/{master_addr} filled in by each task")
    time: Annotated[str, fields.SLURM_TIME.check("time")] = Field(
        "01:00:00", description="the job's time limit (sbatch --time)")
    pin_node: bool = Field(True, description="every run on the node the first run got (the controlled choice)")
    max_jobs: int = Field(1, ge=1, le=64, description="runs in flight at once")
    sbatch_args: list[Annotated[StrictStr, Field(max_length=1000), no_control("sbatch_args")]] = Field(
        default_factory=list, description="more sbatch options, each `--name=value` (or `--name`) of an allow-list "
                                          "matched exactly (--qos, --constraint, --mem, --exclusive, …), passed as "
                                          "one quoted argument")
    workdir: PathStr | None = Field(None, description="run folders on the cluster's shared filesystem "
                                                      "(default ~/.launchlab/work)")
    simulate: SlurmSimulate | None = Field(None, description="tests and demo: a simulated GPU box inside each job")

    gpu_slots: ClassVar[None] = None  # the scheduler places each job on its GPUs: no slots of the kit's own

    @property
    def simulated(self) -> bool:  # type: ignore[override]
        return self.simulate is not None

    @model_validator(mode="after")
    def _simulate_needs_local_login(self) -> SlurmSpec:
        if self.simulate is not None and self.login != "local":
            raise ValueError("`simulate` needs `login: local` (the simulated box is prepared on this machine)")
        for i, arg in enumerate(self.sbatch_args):
            if problem := sbatch_arg_problem(arg):
                raise ValueError(f"sbatch_args[{i}] {arg[:60]!r}: {problem}")
        return self

    def worker_slots(self) -> list[None]:
        """One worker per job allowed in flight; the scheduler picks the GPUs."""
        return [None] * self.max_jobs
