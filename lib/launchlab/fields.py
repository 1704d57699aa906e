"""Field types shared by every params model — the experiment's (params/schema.py) and each transport's host
entry (hosts/*_spec.py): the strict base model, limits, paths, host addresses and GPU indices.

It imports nothing of launchlab, so params (which builds its hosts union from the transport registry) and the
transports' specs can both use it without an import cycle.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr

MAX_PATH_CHARS = 4096
MAX_TIMEOUT_S = 7 * 24 * 3600
MAX_MIB = 1 << 24  # 16 TiB: more memory than any GPU or tolerance needs
MAX_GPUS = 1024

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ADDRESS = re.compile(r"^[A-Za-z0-9_.:%\[\]-]+$")


class StrictModel(BaseModel):
    # allow_inf_nan: a timeout of .inf or a fraction of .nan is a typo, not a setting
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def no_control(what: str) -> AfterValidator:
    def check(value: str) -> str:
        if CONTROL.search(value):
            raise ValueError(f"{what} contains a control character (newline, tab, …); remove it")
        return value

    return AfterValidator(check)


def address(what: str) -> AfterValidator:
    """A host name, IP address or ssh_config alias: it reaches ssh and URLs, so never an option (`-…`)."""
    def check(value: str) -> str:
        if not _ADDRESS.match(value) or value.startswith("-") or len(value) > 253:
            raise ValueError(f"{what} `{value[:40]}` must be a host name, an IP address or an ssh_config alias "
                             "(letters, digits, '.', '-', '_', ':', not starting with '-')")
        return value

    return AfterValidator(check)


PathStr = Annotated[StrictStr, Field(max_length=MAX_PATH_CHARS), no_control("the path")]
GpuIndex = Annotated[int, Field(ge=0, lt=MAX_GPUS)]
