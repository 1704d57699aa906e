"""The registry of server kinds: one KINDS map that log detection and parsing, params validation of
`server.kind`, `launchlab parse --server` and the report all read.

A new kind is a module of this package that ends with `KIND = ServerKind(…)` (see serverkind.py), named on the
two lines below; nothing else in the kit lists kinds.
"""

from __future__ import annotations

from launchlab.logparse import generic, llamacpp, sglang, tgi, transformers, trtllm, vllm
from launchlab.logparse.serverkind import ServerKind

# In this order: detection breaks a tie for the kind named first, and params and the CLI list them so.
KINDS: dict[str, ServerKind] = {m.KIND.name: m.KIND for m in (sglang, vllm, transformers, tgi, trtllm, llamacpp, generic)}
