"""The `sim` transport: the local transport plus a simulated GPU box (state files and an nvidia-smi stand-in).

Commands on a sim host run on this machine with two changes to their environment: the kit's own Python
comes first on PATH (so `python3 -m launchlab.sim.sglang_server` resolves to it), preceded by a folder
holding the simulated `nvidia-smi`; and LAUNCHLAB_SIM_STATE names the box's state folder.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import launchlab
from launchlab import config, safefiles
from launchlab.hosts import commands, sim_spec
from launchlab.hosts.local import LocalHost
from launchlab.sim import state


def open_host(name: str, spec: sim_spec.SimSpec, *, sim_box: Path | None = None) -> SimHost:
    """The host of a `transport: sim` entry, on the batch's simulated machine (a shared default box without one)."""
    return SimHost(name, spec, sim_box)


def sim_root() -> Path:
    """The simulated boxes' folder, made 0700 and refused unless it is this user's alone (safefiles.own_folder):
    its default lies in the shared temp directory, and a box's bin/ is first on its commands' PATH."""
    return safefiles.own_folder(config.sim_root(), "the simulated boxes' folder (LAUNCHLAB_SIM_ROOT)")


def new_box() -> Path:
    """A simulated machine of its own for one batch: its GPUs' state, nvidia-smi, locks and run folders live
    here, so two batches (two demos from two clones) never see each other. The batch removes it at the end."""
    root = sim_root()
    return Path(tempfile.mkdtemp(prefix="box-", dir=root))


def prepare_box(state_dir: Path, name: str, spec: sim_spec.SimSpec, bin_dir: Path | None = None) -> dict[str, str]:
    """Create (or refresh) a simulated box's state and nvidia-smi stand-in; return the environment its
    commands need. Also used by tests to make an SSH host look like a GPU box. `bin_dir`: where the stand-in
    goes (default: the box's bin/); it finds its box by the environment, so boxes can share one."""
    bin_dir = bin_dir or state_dir / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    state.write_host(state_dir, {
        "name": name,
        "pace": spec.pace,
        "cold_start_s": spec.cold_start_s,
        "weights_gib_per_rank": spec.weights_gib_per_rank,
        "gpus": [
            {"index": i, "name": spec.gpu_name, "uuid": state.gpu_uuid(name, i),
             "bus_id": f"00000000:{0x18 + i * 0x10:02X}:00.0", "mem_total_mib": spec.mem_total_mib,
             "mem_reserved_mib": spec.mem_reserved_mib}
            for i in range(spec.gpus)
        ],
    })
    smi = bin_dir / "nvidia-smi"
    wrapper = commands.wrapper_script(stand_in_argv())
    if not smi.is_file() or smi.read_text() != wrapper:  # a shared one may be running: replaced whole, never rewritten
        partial = bin_dir / f".nvidia-smi.{os.getpid()}"
        partial.write_text(wrapper)
        partial.chmod(0o755)
        partial.replace(smi)
    own = box_env(state_dir, bin_dir)
    return {**own, "PATH": os.pathsep.join([own["PATH"], os.environ.get("PATH", "")])}


def box_env(state_dir: Path, bin_dir: Path | None = None) -> dict[str, str]:
    """The kit's own part of a box's environment: its state folder, and the entries put in front of PATH (the
    stand-in nvidia-smi's folder, the kit's Python). Both name a folder of this batch's box, so they differ between
    a batch and its --resume: provenance records them as the host's `kit_env`, and confounds never compares them."""
    return {"PATH": os.pathsep.join([str(bin_dir or state_dir / "bin"), os.path.dirname(sys.executable)]),
            state.STATE_ENV: str(state_dir)}


def stand_in_argv() -> list[str]:
    """How the simulated nvidia-smi is started: the kit's Python without `site` (-S), launchlab's own folder put
    first on sys.path by hand. A run starts it half a dozen times (preflight, facts, sampler, drain), and site's
    .pth files cost each start more than the stand-in's own work (bench/run_overhead.py); the stand-in needs
    nothing but the standard library and launchlab.sim."""
    package_parent = str(Path(launchlab.__file__).resolve().parent.parent)
    code = f"import sys; sys.path.insert(0, {package_parent!r}); from launchlab.sim import nvidia_smi; nvidia_smi.cli()"
    return [sys.executable, "-S", "-c", code]


class SimHost(LocalHost):
    transport = "sim"
    simulated = True

    def __init__(self, name: str, spec: sim_spec.SimSpec, box: Path | None = None):
        self.state_dir = (box or sim_root()) / name
        workdir = spec.workdir or str(self.state_dir / "work")
        super().__init__(name, workdir=workdir, env=prepare_box(self.state_dir, name, spec))

    @property
    def kit_env(self) -> dict[str, str]:
        return box_env(self.state_dir)
