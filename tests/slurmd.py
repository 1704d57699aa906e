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
    node: str
    env: dict[str, str]

    def _pid(self, name: str) -> int | None:
        try:
            return int((self.folder / f"{name}.pid").read_text().strip())
        except (OSError, ValueError):
            return None

    def start(self) -> None:
        _start_munge(self.folder)
        subprocess.run([_exe("slurmctld"), "-f", str(self.conf)], check=True, env=self.env, capture_output=True)
        self._wait(lambda: self._answers(["sinfo", "-h"]), "slurmctld did not answer")
        subprocess.run([_exe("slurmd"), "-f", str(self.conf)], check=True, env=self.env, capture_output=True)
        self._wait(lambda: "idle" in self._answers(["sinfo", "-h", "-o", "%T"]), "the node did not become idle")

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
        for name in ("slurmd", "slurmctld", "munged"):
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


def make_cluster(folder: Path) -> SlurmCluster:
    """Write slurm.conf, gres.conf and the fake GPU devices for a cluster in folder (nothing started)."""
    folder.mkdir(parents=True, exist_ok=True)
    for sub in ("state", "spool"):
        (folder / sub).mkdir(exist_ok=True)
    for i in range(FAKE_GPUS):  # gres/gpu needs device files: c 1 3 behaves like /dev/null
        dev = Path(f"/dev/simgpu{i}")
        if not dev.exists():
            os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))
    node = socket.gethostname()
    free_mib = int(subprocess.run(["free", "-m"], capture_output=True, text=True).stdout.split("\n")[1].split()[3])
    conf = folder / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=launchlab-test", f"SlurmctldHost={node}", "SlurmUser=root",
        f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
        f"StateSaveLocation={folder / 'state'}", f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}", f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}", f"SlurmdLogFile={folder / 'slurmd.log'}",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core", "GresTypes=gpu", "ReturnToService=2", "MpiDefault=none",
        "SchedulerParameters=sched_interval=1", "MinJobAge=600", "KillWait=5", "OverTimeLimit=0",
        f"AuthInfo=socket={folder / 'munge.socket'}",
        f"NodeName={node} CPUs={os.cpu_count()} RealMemory={max(1000, int(free_mib * 0.9))} Gres=gpu:{FAKE_GPUS}",
        # preemption for real: a job of `urgent` (the higher PriorityTier) that needs a `gpu` job's GPUs cancels it
        "PreemptType=preempt/partition_prio", "PreemptMode=CANCEL",
        f"PartitionName=gpu Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4 PriorityTier=1",
        f"PartitionName=urgent Nodes={node} MaxTime=INFINITE State=UP OverSubscribe=FORCE:4 PriorityTier=10",
        "",
    ]))
    (folder / "gres.conf").write_text(f"NodeName={node} Name=gpu File=/dev/simgpu[0-{FAKE_GPUS - 1}]\n")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    return SlurmCluster(folder, conf, node, env)
