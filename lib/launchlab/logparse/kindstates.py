"""What sets the states the kit reads from SGLang's and vLLM's logs, and how each log shows them: the tables behind
ServerKind.states (an environment variable is evidence of a level only where its kind's table says the server reads
it), and SGLang's test of a start that cannot serve one request (ServerKind.usable).

The facts are the shared log-formats reference's (sections 2.5 and 3.4), each with the versions that read it.
"""

from __future__ import annotations

from launchlab.logparse.serverkind import Setting, State

CUSTOM_AR = "custom all-reduce"
KV_POOL = "KV pool"

SGLANG_STATES = (
    State(CUSTOM_AR, (
        Setting("--disable-custom-all-reduce", "off (NCCL instead)"),
        Setting("--enable-p2p-check", "runs the real P2P test, which can turn it off (without it SGLang assumes P2P)"),
        Setting("SGLANG_SKIP_P2P_CHECK", "trusts the driver's P2P report", since="0.5"),
        Setting("SGLANG_USE_1STAGE_ALLREDUCE", "the one-stage kernel", since="0.5"),
        Setting("USE_VLLM_CUSTOM_ALLREDUCE", "vLLM's implementation instead of sgl-kernel's", until="0.4"),
        Setting("SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2", "the V2 implementation (on by default)", since="0.5.10"),
        Setting("SGLANG_CUSTOM_ALL_REDUCE_V2_MAX_SIZE_KB", "the V2 implementation's largest message", since="0.5.10"),
        Setting("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "FlashInfer's PCIe-IPC all-reduce, beside it", since="0.5.23"),
        Setting("SGLANG_FORCE_CUSTOM_AR_PCIE", "\"0\": off, \"1\": on, on a PCIe box with more than two GPUs",
                note="the seed's build and the kit's simulator; no upstream release (0.3.0–0.5.23) reads it"),
        Setting("SGLANG_CUSTOM_AR_ALLOW_PCIE", "\"1\": on for more than two PCIe GPUs (the P2P test still runs)",
                note="the fork haohervchb/sglang-V100; no upstream release reads it"),
    ), "disable_custom_all_reduce in the server's argument dump; a \"Custom allreduce is disabled because …\" or "
       "\"Setup Custom allreduce failed …\" line per rank; \"Registering … cuda graph addresses\" (on, at CUDA-graph "
       "capture); the memory each rank takes at distributed init (its buffers)"),
    State(KV_POOL, (
        Setting("--mem-fraction-static", "the share of the memory before the weights that weights and pool may take"),
        Setting("--max-total-tokens", "caps the pool (a cap above the profiled size is replaced by it, and said)"),
        Setting("--context-length", "the longest request the server accepts"),
    ), "\"KV Cache is allocated. #tokens: N\" per rank and \"max_total_num_tokens=…, context_len=…\" in the "
       "scheduler's summary; \"max_total_tokens=… is larger than the profiled value …\" where a cap is not taken"),
)

VLLM_STATES = (
    State(CUSTOM_AR, (
        Setting("--disable-custom-all-reduce", "off (NCCL instead)"),
        Setting("VLLM_SKIP_P2P_CHECK", "trusts the driver's P2P report (the default from 0.10)"),
        Setting("VLLM_ENABLE_PCIE_ALLREDUCE", "on for more than two PCIe GPUs",
                note="the fork local-inference-lab/vllm; no upstream release reads it"),
    ), "disable_custom_all_reduce in the non-default arguments or the engine config; a \"Custom allreduce is "
       "disabled because …\" line per worker; an error of custom_all_reduce.cuh"),
    State(KV_POOL, (
        Setting("--gpu-memory-utilization", "the share of the card the engine may take"),
        Setting("--max-model-len", "the longest request (vLLM refuses to start where the pool cannot hold one)"),
        Setting("--num-gpu-blocks-override", "the pool's size in blocks"),
    ), "\"GPU KV cache size: N tokens\", \"# GPU blocks\", \"Available KV cache memory\""),
)


def sglang_usable(parsed: dict) -> str | None:
    """A started SGLang whose KV pool cannot hold one request at the context length it serves: its scheduler summary's
    `max_total_num_tokens` below its `context_len` (SGLang starts, and cuts every longer request to the pool)."""
    for fields in (parsed.get("ranks") or {}).values():
        pool, context = fields.get("max_total_num_tokens"), fields.get("context_len")
        if isinstance(pool, (int, float)) and isinstance(context, (int, float)) and 0 <= pool < context:
            return (f"its KV pool holds {pool:,.0f} tokens, fewer than one request at its context length "
                    f"({context:,.0f} tokens)")
    return None
