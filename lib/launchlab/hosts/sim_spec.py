"""The params of a `sim` host (a `hosts.<name>` entry with `transport: sim`): the simulated GPU box's shape."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import AfterValidator, Field

from launchlab.fields import CONTROL, MAX_MIB, GpuIndex, PathStr
from launchlab.hosts.base import HostParams


def _csv_field(value: str) -> str:
    if "," in value or CONTROL.search(value):
        raise ValueError("must not contain commas or line breaks: the simulated nvidia-smi prints it in its CSV")
    return value


class SimSpec(HostParams):
    """A simulated multi-GPU box on this machine (real processes, simulated GPU memory)."""

    simulated: ClassVar[bool] = True

    transport: Literal["sim"] = Field(description="`sim`: a simulated multi-GPU box on this machine (real "
                                                  "processes, simulated GPU memory)")
    gpus: int = Field(8, ge=1, le=64, description="how many simulated GPUs the box has")
    # printed in the simulated nvidia-smi's CSV, so no commas or line breaks
    gpu_name: Annotated[str, Field(max_length=96, description="the name the simulated nvidia-smi prints"),
                        AfterValidator(_csv_field)] = "RTX PRO 6000 Blackwell Server Edition (simulated)"
    mem_total_mib: int = Field(97887, gt=0, le=MAX_MIB, description="memory of each simulated GPU, MiB")
    mem_reserved_mib: int = Field(566, ge=0, le=MAX_MIB, description="memory in use on each simulated GPU before "
                                                                     "any launch (driver reservation), MiB")
    weights_gib_per_rank: float = Field(70.0, ge=0, le=MAX_MIB / 1024, description="the model weights the simulated "
                                                                                   "server loads on each rank, GiB")
    pace: float = Field(1.0, gt=0, le=1000, description="multiplies the simulated startup durations")
    cold_start_s: float = Field(0, ge=0, le=3600, description=(
        "seconds the first server start on the box adds to its CUDA-graph phase, as a cold compile cache does (vLLM's "
        "torch.compile cache, SGLang's kernel JIT): the box keeps a marker once a start has filled it, so later "
        "starts are warm. A batch gets a box of its own, so each batch (and each --resume) starts cold; not scaled "
        "by `pace`"))
    workdir: PathStr | None = Field(None, description="where run files live (default: a folder of the simulated box)")
    gpu_slots: list[list[GpuIndex]] | None = Field(None, description="run this many runs at once, each on its own GPUs "
                                                                  "(CUDA_VISIBLE_DEVICES), e.g. [[0, 1], [2, 3]]")
