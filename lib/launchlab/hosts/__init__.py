"""Hosts: one protocol for every transport, and TRANSPORTS, the registry that maps a `transport:` name to one.

A transport is two modules of this package: `<name>_spec.py`, the pydantic model of its `hosts.<name>` entry
(cheap to import: params builds its hosts union, its messages and master_addr's default from the registry),
and `<name>.py`, its Host and `open_host(name, spec, *, sim_box=None)`, imported only when a host of that
transport is opened, so validating params never loads fabric or paramiko. Every shell command a transport
runs is built in commands/. Adding a transport is those two modules, its commands, and one line in TRANSPORTS.

    base.py      the contract: HostParams (base of a spec), the Host protocol, CommandResult, ProcessRef, JobStart
    shell.py     ShellHost: what shell-driven transports share (run and check in one place, process groups, HTTP)
    commands/    every shell command, one function each
    sim.py  local.py  ssh.py  slurm.py   and their *_spec.py: the transports
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from launchlab.hosts import local_spec, sim_spec, slurm_spec, ssh_spec
from launchlab.hosts.base import CommandResult, Host, HostParams, JobStart, ProcessRef


@dataclass(frozen=True)
class Transport:
    """A way to reach a host: the model of its params entry, and the module that opens it."""

    spec: type[HostParams]
    module: str  # defines open_host(name, spec, *, sim_box=None) -> Host

    def open(self, name: str, spec: HostParams, *, sim_box: Path | None = None) -> Host:
        """The Host for a params entry; `sim_box`: the simulated machine of the batch (sim hosts live in it)."""
        return importlib.import_module(self.module).open_host(name, spec, sim_box=sim_box)


# what a user may write for "this machine" where a host is named (diagnose's --host): the one list
THIS_MACHINE = ("local", "localhost", "127.0.0.1")

# The order is the order of the params JSON Schema's `oneOf` and of the names in messages.
TRANSPORTS: dict[str, Transport] = {
    "sim": Transport(sim_spec.SimSpec, "launchlab.hosts.sim"),
    "local": Transport(local_spec.LocalSpec, "launchlab.hosts.local"),
    "ssh": Transport(ssh_spec.SshSpec, "launchlab.hosts.ssh"),
    "slurm": Transport(slurm_spec.SlurmSpec, "launchlab.hosts.slurm"),
}


def connect(name: str, spec: HostParams, *, sim_box: str | Path | None = None) -> Host:
    """The Host of the params entry `hosts.<name>` (its transport's spec); `sim_box`: the simulated machine of the
    batch (hosts/sim.py `new_box`). The caller closes it (`close()`)."""
    return TRANSPORTS[spec.transport].open(name, spec, sim_box=Path(sim_box) if sim_box else None)


__all__ = ["TRANSPORTS", "CommandResult", "Host", "HostParams", "JobStart", "ProcessRef", "Transport", "connect"]
