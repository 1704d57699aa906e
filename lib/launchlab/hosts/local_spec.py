"""The params of a `local` host (a `hosts.<name>` entry with `transport: local`): this machine."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from launchlab.fields import MAX_GPUS, GpuIndex, PathStr
from launchlab.hosts.base import HostParams


class LocalSpec(HostParams):
    """This machine, its real GPUs (if any) and its real nvidia-smi."""

    transport: Literal["local"] = Field(description="`local`: this machine, its own GPUs and nvidia-smi")
    gpus: int | None = Field(None, ge=0, le=MAX_GPUS, description="how many GPUs the host has; default: what "
                                                                   "nvidia-smi lists")
    workdir: PathStr | None = Field(None, description="where run files live on the host (default ~/.launchlab/work)")
    gpu_slots: list[list[GpuIndex]] | None = Field(None, description="run this many runs at once, each on its own GPUs "
                                                                  "(CUDA_VISIBLE_DEVICES), e.g. [[0], [1]]")
