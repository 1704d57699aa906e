"""A real single-node Slurm cluster on this machine for tests: munged, slurmctld and slurmd with their own
configuration, ports, state and logs in a temp folder, 16 fake GPUs as gres (character devices that behave like
/dev/null), a partition `gpu` and a partition `urgent` of a higher PriorityTier whose jobs preempt (cancel)
`gpu`'s jobs. The configuration is the one checked in ../shared/reference/slurm.md.

The daemons run as root (SlurmUser=root, the only way inside a container without systemd); clients find them
through SLURM_CONF. `stop()` ends every daemon by the pid it wrote.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "srun")
FAKE_GPUS = 16  # two 8-GPU jobs at once (max_jobs: 2)
INSTALL = "apt-get install -y slurmctld slurmd slurm-client munge"


def missing() -> list[str]:
    """The Slurm/munge programs this machine lacks."""
    return [b for b in BINARIES if shutil.which(b) is None and not Path(f"/usr/sbin/{b}").exists()]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _exe(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


@dataclass
class SlurmCluster:
    folder: Path
    conf: Path
    node: str  # the (first) node
    env: dict[str, str]
    nodes: tuple[str, ...] = ()  # several nodes: one slurmd each (`slurmd -N`), all on this machine

    def _pid(self, name: str) -> int | None:
        try:
            return int((self.folder / f"{name}.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def start(self) -> None:
        _start_munge(self.folder)
        subprocess.run([_exe("slurmctld"), "-f", str(self.conf)], check=True, env=self.env, capture_output=True)
        self._wait(lambda: self._answers(["sinfo", "-h"]), "slurmctld did not answer")
        for name in self.nodes or [None]:
            subprocess.run([_exe("slurmd"), "-f", str(self.conf), *(["-N", name] if name else [])], check=True,
                           env=self.env, capture_output=True)
        idle = ["idle"] * max(1, len(self.nodes))
        self._wait(lambda: self._answers(["sinfo", "-h", "-N", "-p", "gpu", "-o", "%T"]).split() == idle,
                   "the nodes did not become idle")

    def _answers(self, argv: list[str]) -> str:
        proc = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=30)
        return proc.stdout if proc.returncode == 0 else ""

    def _wait(self, ok, what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ok():
                return
            time.sleep(0.3)
        logs = "".join(f"\n--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in self.folder.glob("*.log"))
        raise RuntimeError(f"{what} within {timeout:.0f} s{logs}")

    def jobs(self) -> list[str]:
        """Every job the controller still lists (any state squeue shows)."""
        return self._answers(["squeue", "-h", "-o", "%i %T %j"]).splitlines()

    def stop(self) -> None:
        """Cancel what is left, then end slurmd, slurmctld and munged by their pids."""
        subprocess.run(["scancel", "--user", str(os.getuid())], env=self.env, capture_output=True, timeout=30)
        for name in (*(f"slurmd-{n}" for n in self.nodes), "slurmd", "slurmctld", "munged"):
            pid = self._pid(name)
            if pid is None:
                continue
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                continue
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                time.sleep(0.1)
            if Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)


def _start_munge(folder: Path) -> None:
    """munged with its own key, socket and pid file in the folder (a machine's own munged is left alone)."""
    key = folder / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    sock = folder / "munge.socket"
    subprocess.run([_exe("munged"), "--force", f"--key-file={key}", f"--socket={sock}",
                    f"--pid-file={folder / 'munged.pid'}", f"--log-file={folder / 'munged.log'}",
                    f"--seed-file={folder / 'munged.seed'}"], check=True, capture_output=True)


def make_cluster(folder: Path, nodes: int = 1) -> SlurmCluster:
    """Write slurm.conf, gres.conf and the fake GPU devices for a cluster in folder (nothing started). `nodes` > 1:
    that many nodes n1, n2, … on this machine (this Debian slurmd runs several instances, each with `-N name`, its
    own port, and spool, pid and log files by %n), FAKE_GPUS // nodes GPUs each, one CPU each."""
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool"):
        (folder / sub).mkdir(exist_ok=True)
    for i in range(FAKE_GPUS):  # gres/gpu needs device files: c 1 3 behaves like /dev/null
        dev = Path(f"/dev/simgpu{i}")
        if not dev.exists():
            os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))
    node = socket.gethostname()
    names = [f"n{i}" for i in range(1, nodes + 1)]
    members = ",".join(names) if nodes > 1 else node
    free_mib = int(subprocess.run(["free", "-m"], capture_output=True, text=True).stdout.split("\n")[1].split()[3])
    conf = folder / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=launchlab-test", f"SlurmctldHost={node}", "SlurmUser=root",
        f"SlurmctldPort={_free_port()}", f"StateSaveLocation={folder / 'state'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}", f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "GresTypes=gpu", "ReturnToService=2", "MpiDefault=none",
        "SchedulerParameters=sched_interval=1", "MinJobAge=600", "KillWait=5", "OverTimeLimit=0",
        f"AuthInfo=socket={folder / 'munge.socket'}",
        *(_node_lines(node, nodes, folder, free_mib)),
        # preemption for real: a job of `urgent` (the higher PriorityTier) that needs a `gpu` job's GPUs cancels it
        "PreemptType=preempt/partition_prio", "PreemptMode=CANCEL",
        f"PartitionName=gpu Nodes={members} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4 PriorityTier=1",
        f"PartitionName=urgent Nodes={members} MaxTime=INFINITE State=UP OverSubscribe=FORCE:4 PriorityTier=10",
        "",
    ]))
    per = FAKE_GPUS // nodes
    (folder / "gres.conf").write_text("".join(
        f"NodeName={name} Name=gpu File=/dev/simgpu[{i * per}-{(i + 1) * per - 1}]\n"
        for i, name in enumerate(names if nodes > 1 else [node])))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    return SlurmCluster(folder, conf, names[0] if nodes > 1 else node, env, tuple(names) if nodes > 1 else ())


def _node_lines(host: str, nodes: int, folder: Path, free_mib: int) -> list[str]:
    """slurmd's files and the NodeName lines: this machine as one node, or `nodes` nodes n1… on its loopback."""
    if nodes == 1:
        return [f"SlurmdPort={_free_port()}", f"SlurmdSpoolDir={folder / 'spool'}",
                f"SlurmdPidFile={folder / 'slurmd.pid'}", f"SlurmdLogFile={folder / 'slurmd.log'}",
                f"NodeName={host} CPUs={os.cpu_count()} RealMemory={max(1000, int(free_mib * 0.9))} Gres=gpu:{FAKE_GPUS}"]
    return [f"SlurmdSpoolDir={folder / 'spool-%n'}", f"SlurmdPidFile={folder / 'slurmd-%n.pid'}",
            f"SlurmdLogFile={folder / 'slurmd-%n.log'}",
            *(f"NodeName=n{i} NodeHostname={host} NodeAddr=127.0.0.1 Port={_free_port()} CPUs=1 "
              f"RealMemory={max(500, int(free_mib * 0.9 / nodes))} Gres=gpu:{FAKE_GPUS // nodes}"
              for i in range(1, nodes + 1))]
