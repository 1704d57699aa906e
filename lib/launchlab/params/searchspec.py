"""The `search:` block of a params file: bisect one numeric flag of the server command between `low` and `high`
until the interval between failing and succeeding is no wider than `resolution` (search.py does the bisection).

Values are quoted decimals like every level (`"0.50"`), so what the server sees is what was written. The
checks across fields (the flag set by a factor, the size of the search) are in design.py.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Literal

from pydantic import Field, StrictStr, field_validator, model_validator

from launchlab.fields import SEARCH_FLAG, StrictModel
from launchlab.search import Bounds, Guide

_DECIMAL = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def _decimal(value: str) -> Decimal:
    if not _DECIMAL.fullmatch(value):
        raise ValueError(f"`{value[:40]}` is not a plain decimal number; the searched flag must be numeric, "
                         "e.g. \"0.75\" (quoted, like every level)")
    try:
        return Decimal(value)
    except InvalidOperation:  # the pattern admits only what Decimal reads; kept for safety
        raise ValueError(f"`{value[:40]}` is not a number") from None


class SearchSpec(StrictModel):
    """Find the value of a numeric flag at which the launch starts to succeed, per combination of the factors'
    levels (stratum). Success (the `outcome`) is assumed at and above the threshold, failure (`failed`,
    `timeout`, `degraded`) below it; the search checks that assumption and reports where it does not hold."""

    flag: StrictStr = Field(description="a numeric flag of the server command, e.g. --mem-fraction-static")
    low: StrictStr = Field(description="the lowest value probed, quoted, e.g. \"0.50\"")
    high: StrictStr = Field(description="the highest value probed, quoted, e.g. \"0.95\"")
    resolution: StrictStr = Field(description="stop when the interval is no wider than this, e.g. \"0.005\"")
    outcome: Literal["ready"] = Field("ready", description="the status that counts as success")
    repetitions: int = Field(1, ge=1, le=100, description="runs per probed value")
    predicted: StrictStr | None = Field(None, description=(
        "a break-even known before any probe (`launchlab diagnose` writes the one a failing log's own numbers "
        "give), quoted: every stratum probes just below and just above it first — two launches where the "
        "prediction holds — and the ends of the range only where it does not"))

    @field_validator("flag")
    @classmethod
    def _looks_like_a_flag(cls, flag: str) -> str:
        if problem := SEARCH_FLAG.problem("search flag", flag):
            raise ValueError(problem)
        return flag

    @field_validator("low", "high", "resolution", "predicted")
    @classmethod
    def _numeric(cls, value: str | None) -> str | None:
        if value is not None:
            _decimal(value)
        return value

    @model_validator(mode="after")
    def _ordered(self) -> SearchSpec:
        low, high, resolution = _decimal(self.low), _decimal(self.high), _decimal(self.resolution)
        if low >= high:
            raise ValueError(f"low ({self.low}) must be below high ({self.high})")
        if resolution <= 0:
            raise ValueError(f"resolution ({self.resolution}) must be above 0")
        if resolution >= high - low:
            raise ValueError(f"resolution ({self.resolution}) must be smaller than high − low ({high - low}); "
                             "otherwise there is nothing to search")
        if self.predicted is not None and not low < _decimal(self.predicted) < high:
            raise ValueError(f"predicted ({self.predicted}) must lie between low ({self.low}) and high ({self.high})")
        return self

    @property
    def prior(self) -> Guide | None:
        """The predicted break-even as the guide of every stratum before its probes (search.Guide, prior)."""
        return None if self.predicted is None else Guide(_decimal(self.predicted), prior=True)

    @property
    def bounds(self) -> Bounds:
        return Bounds.parse(self.low, self.high, self.resolution)

    @property
    def factor(self) -> str:
        """The name the flag's value has as a column of runs.parquet and in run ids: `mem_fraction_static`."""
        return self.flag.lstrip("-").replace("-", "_")
