"""Custom all-reduce statements of SGLang and vLLM → a per-rank state: active, disabled or failed, with a reason code.

Statement texts: reference/log-formats.md sections 2.5 (SGLang, `CustomAllreduce` / `CustomAllReduceV2` since 0.5.10)
and 3.4 (vLLM, same text 0.5 – 0.33). Whether a run's custom all-reduce was on is the fact an experiment on
`disable_custom_all_reduce` needs, and the servers state it only indirectly: a disable warning, a setup failure
that falls back to NCCL, a CUDA error in the kernel, or `Registering N cuda graph addresses` when it was in use.

Reason codes: pcie_more_than_two_gpus, no_p2p, spans_nodes, unsupported_world_size, missing_library (why it was
disabled), disabled_by_user (the server's own arguments say `disable_custom_all_reduce=True`), disabled_by_server (the
server switched it off for every rank itself: vLLM 0.3's "Custom all-reduce kernels are temporarily disabled due to
stability issues"), cuda_error (the kernel failed) and init_failed (setup failed for another reason); None for a
disable reason not listed here.
"""

from __future__ import annotations

import re

from launchlab.logparse.parsedlog import CustomAR, ParsedLog

ANCHORS = ("allreduce", "AllReduce", "Allreduce", "custom_all_reduce", "Registering", "peer access", "CUDART")
USER_FLAG = "disable_custom_all_reduce"
SERVER_WIDE = "disabled_by_server"  # the reason of a statement that holds for every rank (held_by_every_rank)

_DISABLED = re.compile(r"Custom ?[Aa]ll ?[Rr]educe(?:V2)? is disabled (?:because|due to) ")
_SETUP_FAILED = re.compile(r"Setup Custom allreduce failed with ")
# `Failed: Cuda error …/custom_all_reduce.cuh:164 'invalid argument'`, and the newer (jit) kernel's
# `Runtime check failed at …/custom_all_reduce.cuh:37: CUDA error: invalid argument`
_KERNEL_ERROR = re.compile(r"custom_all_reduce\.cuh:\d+(?: '[^']+'|: CUDA error)")
_PEER_ACCESS = re.compile(r"CUDART error: peer access is not supported|cudaErrorPeerAccessUnsupported")
_REGISTERING = re.compile(r"Registering \d+ cuda graph addresses")
_SERVER_DISABLED = re.compile(r"Custom all-reduce kernels are temporarily disabled")
_REASONS = (
    (re.compile(r"more than two PCIe-only GPUs"), "pcie_more_than_two_gpus"),
    (re.compile(r"lacks GPU P2P capability|P2P test failed|peer access is not supported|cudaErrorPeerAccessUnsupported"),
     "no_p2p"),
    (re.compile(r"spans across nodes"), "spans_nodes"),
    (re.compile(r"unsupported world size"), "unsupported_world_size"),
    (re.compile(r"missing custom allreduce library"), "missing_library"),
)


def recognise(message: str) -> CustomAR | None:
    """The custom all-reduce state a log message states, or None when it says nothing about it."""
    if "educe" not in message and "eer access" not in message and "cuda graph addresses" not in message:
        return None  # the common case, decided without a regex
    text = message.strip()
    if _KERNEL_ERROR.search(text):
        return CustomAR("failed", "cuda_error", text)
    if _SETUP_FAILED.search(text) or _PEER_ACCESS.search(text):
        return CustomAR("failed", _reason(text) or "init_failed", text)
    if _DISABLED.search(text):
        return CustomAR("disabled", _reason(text), text)
    if _SERVER_DISABLED.search(text):
        return CustomAR("disabled", SERVER_WIDE, text)
    if _REGISTERING.search(text):
        return CustomAR("active", None, text)
    return None


def failed(message: str) -> CustomAR:
    """The custom all-reduce failed with this error (a server's own words said whose it was: a frame, a wrapper)."""
    return CustomAR("failed", _reason(message) or "init_failed", message.strip())


def _reason(text: str) -> str | None:
    for rx, code in _REASONS:
        if rx.search(text):
            return code
    return None


def held_by_every_rank(log: ParsedLog, found: CustomAR, tp_size: str | None) -> None:
    """A state the server stated once for all its ranks (SERVER_WIDE): ranks 0 … tp_size-1 without a state of their
    own have it (applied when the log ends, when its arguments have said how many ranks there are)."""
    for rank in range(_size(tp_size)):
        log.custom_ar.setdefault(str(rank), found)


def _size(tp_size: str | None) -> int:
    try:
        return int(tp_size or "1")
    except ValueError:
        return 1


def disabled_by_user(log: ParsedLog, tp_size: str | None, source: str) -> None:
    """Ranks 0 … tp_size-1 without an observed state are disabled when the server's arguments say so.

    Applied when the log ends: any statement a rank made itself (even `Registering …`, which would mean the flag did
    not take effect) is more specific than the flag, so it is kept."""
    if log.args.get(USER_FLAG) != "True":
        return
    flag = CustomAR("disabled", "disabled_by_user", f"{USER_FLAG}=True ({source})")
    for rank in range(_size(tp_size)):
        log.custom_ar.setdefault(str(rank), flag)
