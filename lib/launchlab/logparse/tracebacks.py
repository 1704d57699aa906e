"""Where in the startup a traceback failed: the phase its frames name, and the phase a vLLM worker method names.

A failure is placed in the phase of the code it failed in, not only where the progress lines had got to: the
server may die before it flushes "Capture cuda graph begin", and a pasted excerpt often starts inside the
traceback. Python prints frames outermost first, and under each frame the line that calls the next one, so the
last frame (or call) with a known phase is the deepest and wins: `compile_or_warm_up_model` is warm-up, but its
line `self.model_runner.capture_model()` puts the failure in the CUDA-graph capture.

The tables cover SGLang's and vLLM's (V0 and V1) function names; `cuda_graph_runner.py` and `torch/cuda/graphs.py`
frames are capture whatever their function (SGLang's `capture`, torch's `capture_end`).
"""

from __future__ import annotations

import re

from launchlab.logparse.common import PHASES, ParsedLog

# `File "…", line 12, in f` (a traceback) and `File "…", line 12 in f` (faulthandler's dump)
FRAME = re.compile(r'File "(?P<path>[^"]+)", line \d+,? in (?P<func>[\w<>]+)')
_CALL = re.compile(r"(\w+)\(")
_METHOD = re.compile(r"Error executing method '?(\w+)")
_FUNCTIONS = {
    # distributed init
    "init_distributed_environment": "dist_init", "initialize_model_parallel": "dist_init",
    "init_torch_distributed": "dist_init",
    # weights
    "load_model": "weights", "load_weights": "weights", "get_model": "weights",
    # KV sizing: vLLM's profile run and block count, SGLang's memory pool
    "determine_num_available_blocks": "kv_cache", "determine_available_memory": "kv_cache",
    "_initialize_kv_caches": "kv_cache", "profile_run": "kv_cache", "_dummy_sampler_run": "kv_cache",
    "initialize_cache": "kv_cache", "get_kv_cache_config": "kv_cache", "check_enough_kv_cache_memory": "kv_cache",
    "raise_if_cache_size_invalid": "kv_cache", "init_memory_pool": "kv_cache", "profile_max_num_token": "kv_cache",
    "profile_cudagraph_memory": "kv_cache",  # vLLM ≥ 0.21 estimates the graphs' memory while sizing the KV cache
    # CUDA-graph capture
    "capture_model": "cuda_graph", "_capture_cudagraphs": "cuda_graph", "capture_one_batch_size": "cuda_graph",
    "init_cuda_graphs": "cuda_graph", "init_device_graphs": "cuda_graph", "init_piecewise_cuda_graphs": "cuda_graph",
    # warm-up after the capture
    "compile_or_warm_up_model": "warmup", "_warm_up_model": "warmup", "kernel_warmup": "warmup",
    # SGLang's warm-up request once the server is up (0.3–0.4 `_wait_and_warmup`, ≥ 0.5 `_execute_server_warmup`)
    "_wait_and_warmup": "warmup", "_execute_server_warmup": "warmup",
}
_CAPTURE_FILES = ("cuda_graph_runner", "torch/cuda/graphs.py")
# vLLM's `Error executing method X` names the worker method that failed
_METHODS = {"init_device": "dist_init", "load_model": "weights", "determine_num_available_blocks": "kv_cache",
            "determine_available_memory": "kv_cache", "initialize_cache": "kv_cache",
            "initialize_from_config": "kv_cache", "compile_or_warm_up_model": "warmup"}


def method_phase(text: str) -> str | None:
    """The phase of the worker method an `Error executing method …` line names (None: another line, or unknown)."""
    m = _METHOD.search(text)
    return _METHODS.get(m.group(1)) if m is not None else None


class Attribution:
    """The phase the frames of a log's tracebacks name: within one traceback the deepest frame with a phase; over
    several (a worker's, then the engine's that reports it from outer frames) the latest phase."""

    def __init__(self) -> None:
        self.done: str | None = None  # the latest phase of the tracebacks already finished
        self.current: str | None = None  # the deepest phase of the traceback being read
        self.after_frame = False

    @property
    def phase(self) -> str | None:
        return _later(self.done, self.current)

    def see(self, text: str) -> None:
        """Read one line of a traceback: its header, a frame, or the code line under a frame (the call into the next)."""
        if "Traceback (most recent call last)" in text:
            self.done, self.current, self.after_frame = self.phase, None, False
        elif "File " in text and (frame := FRAME.search(text)) is not None:
            self.after_frame = True
            if any(name in frame["path"] for name in _CAPTURE_FILES):
                self.current = "cuda_graph"
            elif (phase := _FUNCTIONS.get(frame["func"])) is not None:
                self.current = phase
        elif self.after_frame:
            self.after_frame = False
            for name in _CALL.findall(text):
                if (phase := _FUNCTIONS.get(name)) is not None:
                    self.current = phase

    def conclude(self, log: ParsedLog) -> None:
        """Place the failure this traceback belongs to in its phase; one in the capture with no more specific reason
        is `cuda_graph_failed`."""
        if self.phase is None or log.failure is None:
            return
        log.place(self.phase)
        if self.phase == "cuda_graph" and log.failure.reason == "exception":
            log.failure = type(log.failure)("cuda_graph_failed", self.phase, log.failure.message, log.failure.line)


def _later(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return a or b
    return a if PHASES.index(a) >= PHASES.index(b) else b
