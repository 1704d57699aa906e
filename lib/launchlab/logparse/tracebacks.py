"""Where in the startup a traceback failed: the phase its frames name, and the phase a vLLM worker method names.

A failure is placed in the phase of the code it failed in, not only where the progress lines had got to: the
server may die before it flushes "Capture cuda graph begin", and a pasted excerpt often starts inside the
traceback. Python prints frames outermost first, and under each frame the line that calls the next one, so the
last frame (or call) with a known phase is the deepest and wins: `compile_or_warm_up_model` is warm-up, but its
line `self.model_runner.capture_model()` puts the failure in the CUDA-graph capture.

The tables cover SGLang's and vLLM's (V0 and V1) function names; `cuda_graph_runner.py` and `torch/cuda/graphs.py`
frames are capture whatever their function (SGLang's `capture`, torch's `capture_end`). The frames also say when the
failing code was a speculative-decoding draft model's (speculative.DRAFT_CODE: SGLang's `speculative/`, vLLM's
drafter): the failure is then the draft's, and the draft's step gets the line that first named it. Where the frames
name the phase, the line that first named it is the phase's first line — a traceback pasted without its header or
its indentation has no other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from launchlab.logparse.parsedlog import PHASES, ParsedLog
from launchlab.logparse.speculative import DRAFT_CODE, DRAFT_WORKER

# `File "…", line 12, in f` (a traceback), `File "…", line 12 in f` (faulthandler's dump) and `in **init**` (markdown
# made `__init__` bold in a paste)
FRAME = re.compile(r'File "(?P<path>[^"]+)", line \d+,? in (?P<func>[\w<>*]+)')
# a traceback's frame at the start of a line: the first line of an excerpt that starts inside a traceback
HEADERLESS_FRAME = re.compile(r'\s*File "[^"]+", line \d+, in [\w<>*]+')
_CALL = re.compile(r"(\w+)\(")
# an executor running a method on its workers by name (`self._run_workers("init_device")`, V1's `collective_rpc(…)`)
_WORKER_METHOD = re.compile(r"""\b(?:_run_workers|collective_rpc)\(\s*["'](\w+)["']""")
_METHOD = re.compile(r"Error executing method '?(\w+)")
_FUNCTIONS = {
    # distributed init (the communicator NCCL creates there: `ncclCommInitRank`)
    "init_distributed_environment": "dist_init", "initialize_model_parallel": "dist_init",
    "init_torch_distributed": "dist_init", "init_model_parallel_group": "dist_init", "ncclCommInitRank": "dist_init",
    "init_worker_distributed_environment": "dist_init", "ensure_model_parallel_initialized": "dist_init",
    "init_device": "dist_init",  # vLLM's worker: its device, then its process group (an NCCL error raised there)
    # weights
    "load_model": "weights", "load_weights": "weights", "get_model": "weights",
    "_create_weight": "weights", "create_shared_weights": "weights",  # LMDeploy's TurboMind, per GPU thread
    # KV sizing: vLLM's profile run and block count, SGLang's memory pool; the KV-cache managers' own setup
    "determine_num_available_blocks": "kv_cache", "determine_available_memory": "kv_cache",
    "_initialize_kv_caches": "kv_cache", "profile_run": "kv_cache", "_dummy_sampler_run": "kv_cache",
    "initialize_cache": "kv_cache", "get_kv_cache_config": "kv_cache", "check_enough_kv_cache_memory": "kv_cache",
    "raise_if_cache_size_invalid": "kv_cache", "init_memory_pool": "kv_cache", "profile_max_num_token": "kv_cache",
    "profile_cudagraph_memory": "kv_cache",  # vLLM ≥ 0.21 estimates the graphs' memory while sizing the KV cache
    "get_kv_cache_configs": "kv_cache", "get_kv_cache_groups": "kv_cache", "initialize_kv_cache": "kv_cache",
    "init_cache_with_memory_pool": "kv_cache", "alloc_memory_pool": "kv_cache",
    # CUDA-graph capture
    "capture_model": "cuda_graph", "_capture_cudagraphs": "cuda_graph", "capture_one_batch_size": "cuda_graph",
    "init_cuda_graphs": "cuda_graph", "init_device_graphs": "cuda_graph", "init_piecewise_cuda_graphs": "cuda_graph",
    "capture_one": "cuda_graph",
    # warm-up after the capture
    "compile_or_warm_up_model": "warmup", "_warm_up_model": "warmup", "kernel_warmup": "warmup",
    # SGLang's warm-up request once the server is up (0.3–0.4 `_wait_and_warmup`, ≥ 0.5 `_execute_server_warmup`)
    "_wait_and_warmup": "warmup", "_execute_server_warmup": "warmup",
}
# capture whatever the function: SGLang's graph runners (eagle_draft_cuda_graph_runner.py too) and backends
# (runner_backend/full_cuda_graph_backend.py), torch's own
_CAPTURE_FILES = ("cuda_graph_runner", "cuda_graph_backend", "torch/cuda/graphs.py")
# vLLM's `Error executing method X` names the worker method that failed
_METHODS = {"init_device": "dist_init", "load_model": "weights", "determine_num_available_blocks": "kv_cache",
            "determine_available_memory": "kv_cache", "initialize_cache": "kv_cache",
            "initialize_from_config": "kv_cache", "compile_or_warm_up_model": "warmup"}
# the draft's step of a main phase its frames name (speculative.py)
_DRAFT_STEP = {"weights": "draft_weights", "kv_cache": "draft_kv_cache", "cuda_graph": "draft_cuda_graph"}


def method_phase(text: str) -> str | None:
    """The phase of the worker method an `Error executing method …` line names (None: another line, or unknown)."""
    m = _METHOD.search(text)
    return _METHODS.get(m.group(1)) if m is not None else None


@dataclass(frozen=True)
class Place:
    """Where a traceback's frames put its failure: the phase, the line that first named it, and whether the code was
    the draft model's by then (from `draft_line` on)."""

    phase: str
    line: int
    draft: bool = False
    draft_line: int | None = None


class Attribution:
    """The phase the frames of a log's tracebacks name: within one traceback the deepest frame with a phase; over
    several (a worker's, then the engine's that reports it from outer frames) the latest phase. Once a traceback runs
    through a draft model's code (speculative.DRAFT_CODE) every deeper frame is the draft's."""

    def __init__(self) -> None:
        self.done: Place | None = None  # the latest place of the tracebacks already finished
        self.current: Place | None = None  # the deepest place of the traceback being read
        self.after_frame = False
        self.in_draft = False  # the traceback being read has gone into a draft model's code

    @property
    def place(self) -> Place | None:
        if self.done is None or self.current is None:
            return self.done or self.current
        return self.done if PHASES.index(self.done.phase) >= PHASES.index(self.current.phase) else self.current

    @property
    def phase(self) -> str | None:
        return None if (place := self.place) is None else place.phase

    def see(self, text: str, line: int = 0) -> None:
        """Read one line of a traceback: its header, a frame, or the code line under a frame (the call into the next)."""
        if "Traceback (most recent call last)" in text:
            self.done, self.current, self.after_frame, self.in_draft = self.place, None, False, False
        elif "File " in text and (frame := FRAME.search(text)) is not None:
            self.after_frame = True
            draft = DRAFT_CODE.search(frame["path"]) is not None
            if any(name in frame["path"] for name in _CAPTURE_FILES):
                self._name("cuda_graph", line, draft)
            else:
                self._name(_FUNCTIONS.get(frame["func"]), line, draft)
        elif self.after_frame:
            self.after_frame = False
            self.call(text, line)

    def call(self, text: str, line: int = 0) -> None:
        """A code line: the call it makes into the next frame (also the line above an excerpt's first frame)."""
        draft = DRAFT_CODE.search(text) is not None
        if DRAFT_WORKER.search(text):
            self._name("weights", line, True)
            return
        phases = [phase for name in _CALL.findall(text) if (phase := _FUNCTIONS.get(name)) is not None]
        phases += [phase for name in _WORKER_METHOD.findall(text) if (phase := _METHODS.get(name)) is not None]
        self._name(phases[-1] if phases else None, line, draft)

    def _name(self, phase: str | None, line: int, draft: bool) -> None:
        """A frame or call names `phase` (None: no phase), in a draft's code or not."""
        self.in_draft = self.in_draft or draft
        if phase is None:
            return
        cur = self.current
        if cur is None or cur.phase != phase:
            self.current = Place(phase, line, self.in_draft, line if self.in_draft else None)
        elif self.in_draft and not cur.draft:
            self.current = replace(cur, draft=True, draft_line=line)

    def conclude(self, log: ParsedLog) -> None:
        """Place the failure this traceback belongs to in its phase, from the line that named it (a draft's step
        too); one in the capture with no more specific reason is `cuda_graph_failed`."""
        place = self.place
        if place is None or log.failure is None:
            return
        log.place(place.phase, place.draft)
        if place.line:
            log.phase_lines.setdefault(place.phase, place.line)
        if place.draft and (step := _DRAFT_STEP.get(place.phase)) is not None:
            log.reach_draft(step, place.draft_line)
        if place.phase == "cuda_graph" and log.failure.reason == "exception":
            log.failure = replace(log.failure, reason="cuda_graph_failed")
