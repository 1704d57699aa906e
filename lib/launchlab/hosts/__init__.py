"""Hosts: one protocol for every transport (sim, local, ssh) and the factory that picks one."""

from __future__ import annotations

from launchlab.hosts.base import CommandResult, Host, ProcessRef
from launchlab.params import Experiment


def connect(exp: Experiment, name: str | None = None) -> Host:
    """The Host object for a host named in the params (default: the experiment's host)."""
    name = name or exp.host_name
    spec = exp.hosts[name]
    if spec.transport == "sim":
        from launchlab.hosts.sim import SimHost

        return SimHost(name, spec)
    if spec.transport == "ssh":
        from launchlab.hosts.ssh import SshHost

        return SshHost(name, spec)
    from launchlab.hosts.local import LocalHost

    return LocalHost(name, workdir=spec.workdir)


__all__ = ["CommandResult", "Host", "ProcessRef", "connect"]
