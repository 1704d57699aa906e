"""The params of an `ssh` host (a `hosts.<name>` entry with `transport: ssh`): where the box is and how to log in.

Every value here reaches ssh or a URL, so each is checked to be what it says (never an option such as `-oX`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from launchlab import fields
from launchlab.fields import MAX_GPUS, MAX_TIMEOUT_S, GpuIndex, PathStr
from launchlab.hosts.base import HostParams


class SshSpec(HostParams):
    """A GPU box over SSH. `address` may be an alias of ~/.ssh/config (or of $LAUNCHLAB_SSH_CONFIG)."""

    transport: Literal["ssh"] = Field(description="`ssh`: a GPU box over SSH (fabric; strict host keys)")
    address: Annotated[str, fields.address("address")] = Field(description="host name, IP address or an alias of "
                                                                           "~/.ssh/config")
    port: int | None = Field(None, ge=1, le=65535, description="SSH port; default: ~/.ssh/config's, else 22")
    user: Annotated[str, fields.USER.check("user")] | None = Field(None, description="login name; default: "
                                                                                 "~/.ssh/config's, else yours")
    identity_file: PathStr | None = Field(None, description="private key file; default: ~/.ssh/config's and the "
                                                            "SSH agent's keys")
    gpus: int | None = Field(None, ge=0, le=MAX_GPUS, description="how many GPUs the host has; default: what its "
                                                                   "nvidia-smi lists")
    workdir: PathStr | None = Field(None, description="where run files live on the host (default ~/.launchlab/work)")
    reconnect_s: float = Field(30, ge=0, le=MAX_TIMEOUT_S, description="how long to keep reopening a dropped connection")
    gpu_slots: list[list[GpuIndex]] | None = Field(None, description="run this many runs at once, each on its own GPUs "
                                                                  "(CUDA_VISIBLE_DEVICES), e.g. [[0, 1], [2, 3]]")

    def default_master_addr(self) -> str:
        """The address other nodes reach node 0 at: the one the kit reaches it at."""
        return self.address
