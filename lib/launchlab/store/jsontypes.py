"""Records read back from JSON files others may have written (a shared outputs/): each known field checked against
its annotation before the record is built, so a crafted `status.json` (`startup_s: "abc"`, `levels: 5`) ends
in a RunDirError that names the file and the field, never in a traceback somewhere in the report."""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from pathlib import Path

from launchlab.errors import RunDirError


def _accepts(hint: object, value: object) -> bool:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(h, value) for h in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:  # NaN too (pandas writes a missing number so), never ±inf (1e999 in a file): no figure is
        return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) != math.inf
    if hint is str:
        return isinstance(value, str)
    if origin is list or hint is list:
        args = typing.get_args(hint)
        return isinstance(value, list) and (not args or all(_accepts(args[0], v) for v in value))
    if origin is dict or hint is dict:
        args = typing.get_args(hint)
        return isinstance(value, dict) and (not args or all(_accepts(args[0], k) and _accepts(args[1], v)
                                                            for k, v in value.items()))
    return True  # a type this checker does not know: left to the record


def checked(cls: type, data: object, path: Path | str) -> dict:
    """The keys of `data` that are fields of the dataclass `cls`, each checked against its annotation; RunDirError
    naming the file and the first field that does not fit. Keys a newer kit added are left out."""
    if not isinstance(data, dict):
        raise RunDirError(f"{path} is not a JSON object as the kit writes it (a JSON {type(data).__name__}); "
                          "`launchlab report RUN_DIR` cannot use it")
    hints = _hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value = data[f.name]
        if not _accepts(hints[f.name], value):
            raise RunDirError(f"{path}: `{f.name}` is {str(value)[:40]!r}, which is not what the kit writes there "
                              f"({hints[f.name]}); the file was not written by this kit — rerun the run with "
                              "`launchlab run PARAMS --resume RUN_DIR`, or remove the run directory")
        out[f.name] = value
    return out


@functools.cache
def _hints(cls: type) -> dict[str, object]:
    """The dataclass's annotations evaluated, once per class: typing.get_type_hints takes 0.24 ms a call here, all
    of a manifest entry's check, and a manifest is read whole (every entry) several times per run."""
    return typing.get_type_hints(cls)
