"""Hosts: one protocol for every transport (sim, local, ssh) and the factory that picks one."""

from __future__ import annotations

from pathlib import Path

from launchlab.hosts.base import CommandResult, Host, ProcessRef
from launchlab.params import Experiment


def connect(exp: Experiment, name: str | None = None, sim_box: str | Path | None = None) -> Host:
    """The Host object for a host named in the params (default: the experiment's host); `sim_box`: the
    simulated machine of the batch (hosts/sim.py `new_box`)."""
    name = name or exp.host_name
    spec = exp.hosts[name]
    if spec.transport == "sim":
        from launchlab.hosts.sim import SimHost

        return SimHost(name, spec, Path(sim_box) if sim_box else None)
    if spec.transport == "ssh":
        from launchlab.hosts.ssh import SshHost

        return SshHost(name, spec)
    from launchlab.hosts.local import LocalHost

    return LocalHost(name, workdir=spec.workdir)


__all__ = ["CommandResult", "Host", "ProcessRef", "connect"]
