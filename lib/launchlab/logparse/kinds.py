"""The registry of server kinds: one KINDS map that log detection and parsing, params validation of
`server.kind`, `launchlab parse --server` and the report all read.

A new kind is a module of this package that ends with `KIND = ServerKind(…)` (see serverkind.py), named on the
two lines below; nothing else in the kit lists kinds.
"""

from __future__ import annotations

from collections.abc import Iterable

from launchlab.logparse import generic, llamacpp, lmdeploy, sglang, tgi, transformers, trtllm, vllm
from launchlab.logparse.serverkind import ServerKind

# In this order: detection breaks a tie for the kind named first, and params and the CLI list them so.
KINDS: dict[str, ServerKind] = {m.KIND.name: m.KIND for m in (sglang, vllm, transformers, tgi, trtllm, llamacpp,
                                                             lmdeploy, generic)}


def kinds_of(servers: Iterable[str | None]) -> list[ServerKind]:
    """The kinds that parsed some logs (ParsedLog.server of each), once each; every kind where a record names none
    the registry knows (one written by hand): then what any kind says holds."""
    names = list(dict.fromkeys(servers))
    if any(name not in KINDS for name in names):
        return list(KINDS.values())
    return [KINDS[name] for name in names]


def volatile_args(servers: Iterable[str | None]) -> set[str]:
    """The arguments that are no confound in the logs of these kinds (ServerKind.volatile_args)."""
    return {arg for kind in kinds_of(servers) for arg in kind.volatile_args}


def model_flags() -> tuple[str, ...]:
    """Every kind's flags that name the model (ServerKind.model_flags), once each: a command's model is found
    whichever kind its params name."""
    return tuple(dict.fromkeys(f for kind in KINDS.values() for f in kind.model_flags))
