"""A simulated SGLang server: real processes and a real HTTP port, simulated GPU memory, SGLang 0.5 log lines.

    python -m launchlab.sim.sglang_server --model-path M --tp 8 --port P [--mem-fraction-static F]
        [--disable-custom-all-reduce] [--cuda-graph-max-bs N] [--max-total-tokens N] [other SGLang flags]

Like SGLang, the main process starts one scheduler process per TP rank. Each rank allocates simulated memory
on its GPU (CUDA context, distributed init, custom all-reduce buffers, weights, KV pool, CUDA graphs), takes
the MIN of free memory over ranks where SGLang does, and sizes the KV cache with SGLang's formula

    rest = avail_after_weights − pre_load_free × (1 − mem_fraction_static)

failing with SGLang's "Not enough memory" error when the profiled token count is not positive. The main
process serves /health (503 until warm-up, then 200) and prints SGLang's ready line. Log lines use the
SGLang 0.5.6–0.5.8 formats (see reference/log-formats.md).

Custom all-reduce follows the seed scenario's build: on, unless `--disable-custom-all-reduce` is given or
`SGLANG_FORCE_CUSTOM_AR_PCIE=0` makes it fall back on a PCIe box with more than two GPUs (SGLang's warning).
With it on, each rank holds extra IPC buffers, which costs a little KV capacity.

`SIM_SGLANG_VERSION` / `SIM_NCCL_VERSION` change the versions its log names (default 0.5.8 and 2.27.3), to
make the log of an older install. `SIM_DEBUG_PROFILE=1` adds the instrumentation line a user would patch into SGLang:
`DEBUG profile_max_num_token: avail=… GiB, total=… GiB, fraction=…, reserved=… GiB, rest=… GiB`.

FAULT INJECTION of the simulator, for tests of what the kit does with a server whose numbers are wrong:
`SIM_FAULT_AVAIL_OFFSET_GIB=N` makes every rank print the free memory after its weights ("Load weight end …
avail mem=") N GiB above what it really has (and the weights' usage N GiB below), while it sizes its KV cache and
fails from the real figures — so the break-even the log's numbers predict is off by N GiB of the pre-load memory.
The log's first lines say so. No real SGLang does this on purpose; it stands for a server whose printed figures do
not predict its outcome.
`SIM_FAULT_P2P_CHECK_FAILS=1` makes custom all-reduce fail its P2P check on every rank (a box whose GPUs cannot reach
each other, or a driver that says so): SGLang's warning "Custom allreduce is disabled because your platform lacks GPU
P2P capability or P2P test failed. …" on each rank, and the server runs on with NCCL — no custom all-reduce buffers,
no `Registering … cuda graph addresses` — whatever its flags asked (`--disable-custom-all-reduce` still wins).
`SIM_FAULT_COMPILE_S=N` makes CUDA-graph capture compile for N more seconds of wall time (not scaled by the host's
`pace`), as torch.compile does on a cold cache, printing a `Capturing batches (…)` progress line about every second and
no error: a launch that is still making progress when a short ready deadline ends it.
`SIM_FAULT_REQUEST_OOM_DIES=1` makes the first request the server serves (the warm-up is only logged) run out of GPU
memory in the scheduler, which dies of it: TP0's "Scheduler hit an exception" traceback ending in
`torch.OutOfMemoryError`, "Received sigquit from a child process", and the server's process tree killed before it
answers (`SIM_FAULT_REQUEST_OOM` answers 500 and serves on).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
import traceback
from datetime import datetime
from pathlib import Path

from launchlab.sim import state

GIB = 1 << 30
# the versions its log names (SIM_SGLANG_VERSION, SIM_NCCL_VERSION change them: an older install, by hand)
SGLANG_VERSION, NCCL_VERSION = "0.5.8", "2.27.3"
FAULT_AVAIL_OFFSET = "SIM_FAULT_AVAIL_OFFSET_GIB"  # fault injection: the log's post-weights free memory is off by N GiB
FAULT_CRASH_AFTER_READY = "SIM_FAULT_CRASH_AFTER_READY"  # fault injection: an illegal memory access once it serves
FAULT_REQUEST_OOM = "SIM_FAULT_REQUEST_OOM"  # fault injection: every request runs out of GPU memory
FAULT_REQUEST_OOM_DIES = "SIM_FAULT_REQUEST_OOM_DIES"  # fault injection: the first request's OOM kills the server
FAULT_P2P_CHECK = "SIM_FAULT_P2P_CHECK_FAILS"  # fault injection: custom all-reduce disabled by a failed P2P check
FAULT_COMPILE_S = "SIM_FAULT_COMPILE_S"  # fault injection: CUDA-graph capture compiles N more seconds (wall time)
# Kimi-K2 / DeepSeek-V3 MLA: (kv_lora_rank 512 + qk_rope_head_dim 64) × 61 layers × 2 bytes (bf16) per token.
CELL_SIZE_BYTES = (512 + 64) * 61 * 2
# the simulated model's context length when --context-length is not given: short, so that a start just above the
# break-even (a pool of a few thousand tokens) can serve one request; a longer one is asked with --context-length
# (a pool smaller than it is a start that cannot serve one request: degraded, the ledger says)
CONTEXT_LEN = 2048
class _OutOfMemoryError(RuntimeError):
    """Named as PyTorch's is in a traceback's last line (torch.OutOfMemoryError)."""


_OutOfMemoryError.__module__, _OutOfMemoryError.__qualname__ = "torch", "OutOfMemoryError"

MIB = {"cuda_context": 512, "nccl": 1024, "custom_ar": 640, "req_to_token": 300, "graphs": 820, "graphs_custom_ar": 110}


def _log(prefix: str, message: str) -> None:
    sys.stdout.write(f"[{datetime.now():%Y-%m-%d %H:%M:%S}{prefix}] {message}\n")
    sys.stdout.flush()


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--model-path", "--model", default="/models/sim")
    p.add_argument("--tp", "--tp-size", type=int, default=1)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument("--disable-custom-all-reduce", action="store_true")
    p.add_argument("--cuda-graph-max-bs", type=int, default=None)
    p.add_argument("--chunked-prefill-size", type=int, default=8192)
    p.add_argument("--max-total-tokens", type=int, default=None)
    p.add_argument("--context-length", type=int, default=None)  # the model's own (CONTEXT_LEN) when not given
    p.add_argument("--sim-worker-rank", type=int, default=None)
    p.add_argument("--sim-sync-dir", default=None)
    args, _unknown = p.parse_known_args(argv)  # real SGLang flags the simulation does not model are accepted
    return args


def _fault_offset_gib() -> float:
    """The fault injected by SIM_FAULT_AVAIL_OFFSET_GIB (0 without it): how far the printed free memory after the
    weights is off what the rank really has."""
    return float(os.environ.get(FAULT_AVAIL_OFFSET) or 0)


def card_mib(free_before_weights_gib: float, *, reserved_mib: int, custom_ar: bool) -> int:
    """The memory of a simulated card on which a rank has `free_before_weights_gib` free when it starts loading its
    weights ("Load weight begin" avail): what the box reserves, then the rank's CUDA context, NCCL and custom
    all-reduce buffers (as _Rank.run holds them) come on top (launchlab diagnose shapes a box like a log's)."""
    held = MIB["cuda_context"] + MIB["nccl"] + (MIB["custom_ar"] if custom_ar else 0)
    return math.ceil(free_before_weights_gib * 1024 + held + reserved_mib)


def _auto_mem_fraction(args: argparse.Namespace, total_mib: int) -> float:
    """SGLang 0.5.5's default for --mem-fraction-static (server_args._handle_gpu_memory_settings)."""
    graph_bs = args.cuda_graph_max_bs or (512 if args.tp >= 4 else 256)
    reserved = 512 + max(args.chunked_prefill_size, 2048) * 1.5 + graph_bs * 2 + args.tp / 8 * 1024
    if total_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((total_mib - reserved) / total_mib, 3)


# ---------------------------------------------------------------------------------------------------------
# scheduler (one per TP rank)


class _Rank:
    def __init__(self, args: argparse.Namespace, root: Path, host: dict):
        self.args, self.root, self.host = args, root, host
        self.rank = args.sim_worker_rank
        self.prefix = f" TP{self.rank}" if args.tp > 1 else ""
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        gpus = [int(x) for x in visible.split(",")] if visible else list(range(len(host["gpus"])))
        if self.rank >= len(gpus) or gpus[self.rank] >= len(host["gpus"]):
            raise RuntimeError("CUDA error: invalid device ordinal")
        self.gpu = gpus[self.rank]
        self.held_mib = 0.0
        self.sync = Path(args.sim_sync_dir)

    def log(self, message: str) -> None:
        _log(self.prefix, message)

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds * self.host["pace"])

    def hold(self, mib: float, util: int = 0) -> None:
        self.held_mib += mib
        name = f"sglang::scheduler{self.prefix.replace(' ', '_')}"  # SGLang's process title
        state.set_allocation(self.root, os.getpid(), self.gpu, self.held_mib, name, util)

    def free_gib(self) -> float:
        return state.free_mib(self.root, self.gpu) / 1024

    def all_min(self, name: str, value: float) -> float:
        """The MIN over ranks, as SGLang's all_reduce(ReduceOp.MIN) over the CPU group."""
        (self.sync / f"{name}.{self.rank}").write_text(repr(value))
        while True:
            files = list(self.sync.glob(f"{name}.*"))
            if len(files) >= self.args.tp:
                try:
                    return min(float(f.read_text()) for f in files)
                except ValueError:
                    pass  # a rank is writing its file right now
            time.sleep(0.02)

    def custom_all_reduce(self) -> bool:
        if self.args.disable_custom_all_reduce or self.args.tp == 1:
            return False
        if os.environ.get("SGLANG_FORCE_CUSTOM_AR_PCIE", "1") == "0" and self.args.tp > 2:
            self.log("Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. "
                     "To silence this warning, specify disable_custom_all_reduce=True explicitly.")
            return False
        if os.environ.get(FAULT_P2P_CHECK):
            self.log("Custom allreduce is disabled because your platform lacks GPU P2P capability or P2P test failed. "
                     "To silence this warning, specify disable_custom_all_reduce=True explicitly.")
            return False
        return True

    def compile_slowly(self, graph_bs: int) -> None:
        """The fault of SIM_FAULT_COMPILE_S: N seconds of wall time compiling, a progress line about every second."""
        seconds = float(os.environ.get(FAULT_COMPILE_S) or 0)
        steps = max(1, math.ceil(seconds))
        tic = time.monotonic()
        for step in range(1, steps + 1):
            time.sleep(max(0.0, tic + seconds * step / steps - time.monotonic()))
            _log(self.prefix, f"Capturing batches (bs={graph_bs} avail_mem={self.free_gib():.2f} GB): "
                              f"{100 * step // steps}%| {step}/{steps} [{time.monotonic() - tic:.0f}s] (torch.compile)")

    def compile_kernels(self) -> None:
        """A cold compile cache (the host's `cold_start_s`): the first start on the box compiles its kernels before
        capturing graphs, and leaves the cache (a marker in the box's state folder) for every later start."""
        cold_s = self.host.get("cold_start_s") or 0
        cache = self.root / COMPILE_CACHE
        if cold_s <= 0 or cache.exists():
            return
        self.log("Compiling kernels: no compile cache on this box yet (simulated cold start).")
        time.sleep(cold_s)
        cache.write_text("warm\n")

    def run(self) -> None:
        a = self.args
        total_mib = self.host["gpus"][self.gpu]["mem_total_mib"]
        fraction = a.mem_fraction_static if a.mem_fraction_static is not None else _auto_mem_fraction(a, total_mib)
        self.hold(MIB["cuda_context"], 5)
        self.log("Init torch distributed begin.")
        self.log(f"sglang is using nccl=={os.environ.get('SIM_NCCL_VERSION', NCCL_VERSION)}")
        before = self.free_gib()
        self.sleep(0.3)
        custom_ar = self.custom_all_reduce()
        self.hold(MIB["nccl"] + (MIB["custom_ar"] if custom_ar else 0), 10)
        local = self.free_gib()
        self.log(f"Init torch distributed ends. mem usage={before - local:.2f} GB")
        pre_load = self.all_min("pre_load", local)
        if a.tp > 1 and pre_load < local * 0.9:
            raise ValueError("The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
                             f"min_per_gpu_memory={pre_load}, local_gpu_memory={local}, "
                             f"local_gpu_memory * 0.9={local * 0.9}")

        self.log(f"Load weight begin. avail mem={local:.2f} GB")
        weights_mib = self.host["weights_gib_per_rank"] * 1024
        for _ in range(5):
            self.sleep(0.2)
            self.hold(weights_mib / 5, 35)
        after = self.free_gib()
        shown = after + _fault_offset_gib()  # the real `after` sizes the KV cache below; only the log is off
        self.log(f"Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem={shown:.2f} GB, "
                 f"mem usage={local - shown:.2f} GB.")

        avail = self.all_min("post_load", after)
        reserved = pre_load * (1 - fraction)
        rest = avail - reserved
        if os.environ.get("SIM_DEBUG_PROFILE") == "1":
            self.log(f"DEBUG profile_max_num_token: avail={avail:.3f} GiB, total={pre_load:.3f} GiB, "
                     f"fraction={fraction}, reserved={reserved:.3f} GiB, rest={rest:.3f} GiB")
        max_tokens = int(rest * GIB // CELL_SIZE_BYTES)
        if a.max_total_tokens is not None:
            if a.max_total_tokens > max_tokens:
                self.log(f"max_total_tokens={a.max_total_tokens} is larger than the profiled value {max_tokens}. "
                         "Use the profiled value instead.")
            max_tokens = min(max_tokens, a.max_total_tokens)
        if max_tokens <= 0:
            raise RuntimeError("Not enough memory. Please try to increase --mem-fraction-static. "
                               f"Current value: self.server_args.mem_fraction_static={fraction}")
        tokens = int(self.all_min("tokens", max_tokens))
        self.sleep(0.1)
        kv_bytes = tokens * CELL_SIZE_BYTES
        self.hold(kv_bytes / (1 << 20), 20)
        self.log(f"KV Cache is allocated. #tokens: {tokens}, KV size: {kv_bytes / GIB:.2f} GB")
        self.hold(MIB["req_to_token"])
        self.log(f"Memory pool end. avail mem={self.free_gib():.2f} GB")

        graph_before = self.free_gib()
        self.log(f"Capture cuda graph begin. This can take up to several minutes. avail mem={graph_before:.2f} GB")
        graph_bs = a.cuda_graph_max_bs or (512 if a.tp >= 4 else 256)
        if custom_ar:
            self.log(f"Registering {graph_bs * 61} cuda graph addresses")
        tic = time.monotonic()
        self.compile_kernels()
        if os.environ.get(FAULT_COMPILE_S):
            self.compile_slowly(graph_bs)
        graph_mib = MIB["graphs"] + (MIB["graphs_custom_ar"] if custom_ar else 0)
        for _ in range(4):
            self.sleep(0.12)
            if state.free_mib(self.root, self.gpu) < graph_mib / 4:  # a pool that left the graphs no room
                total = self.host["gpus"][self.gpu]["mem_total_mib"] / 1024
                raise _OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {graph_mib / 4:.2f} MiB. GPU {self.gpu} has a total "
                    f"capacity of {total:.2f} GiB of which {state.free_mib(self.root, self.gpu):.2f} MiB is free. "
                    f"Process {os.getpid()} has {self.held_mib / 1024:.2f} GiB memory in use.")
            self.hold(graph_mib / 4, 90)
        graph_after = self.free_gib()
        self.log(f"Capture cuda graph end. Time elapsed: {time.monotonic() - tic:.2f} s. "
                 f"mem usage={graph_before - graph_after:.2f} GB. avail mem={graph_after:.2f} GB.")
        self.hold(0, 0)
        if self.rank == 0:
            self.log(f"max_total_num_tokens={tokens}, chunked_prefill_size={a.chunked_prefill_size}, "
                     f"max_prefill_tokens=16384, max_running_requests={min(4096, max(tokens // 64, 1))}, "
                     f"context_len={a.context_length or CONTEXT_LEN}, available_gpu_mem={graph_after:.2f} GB")
        (self.sync / f"ready.{self.rank}").write_text("1")
        while True:
            time.sleep(3600)


COMPILE_CACHE = "compile-cache"  # in the box's state folder: present once a start has filled the cache
TEARDOWN_S = 1.0  # seconds at pace 1; a real scheduler takes longer still


def _scheduler(args: argparse.Namespace) -> int:
    root = Path(state.state_dir())
    prefix = f" TP{args.sim_worker_rank}" if args.tp > 1 else ""
    host = state.read_host(root)
    try:
        _Rank(args, root, host).run()
    except Exception:  # SGLang logs every scheduler exception this way, then exits
        _log(prefix, f"Scheduler hit an exception: {traceback.format_exc().rstrip()}")
        # a real scheduler takes a moment to go (its CUDA context torn down) and its memory stays held that long:
        # a sampler every 100 ms sees what the rank held when it failed, as on a real GPU, not a race it may lose
        time.sleep(TEARDOWN_S * host["pace"])
        return 1
    return 0


# ---------------------------------------------------------------------------------------------------------
# main process: starts schedulers, then the HTTP server


def _handler_class():
    """The HTTP handler of the main process (http.server imported here: the scheduler processes, started once per
    rank and waited for by every run, need none of it)."""
    from http.server import BaseHTTPRequestHandler

    class _Handler(BaseHTTPRequestHandler):
        server_version = "uvicorn"
        warmed = threading.Event()
        answered = threading.Event()  # the first health answer 200 (FAULT_CRASH_AFTER_READY waits for it)

        def _reply(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # http.server's naming
            if self.path in ("/health", "/health_generate"):
                self._reply(200 if self.warmed.is_set() else 503, {})
                if self.warmed.is_set():
                    self.answered.set()
            elif self.path in ("/get_model_info", "/model_info"):
                self._reply(200, {"model_path": self.server.model_path, "simulated": True})
            else:
                self._reply(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            if self.path in ("/generate", "/v1/completions") and os.environ.get(FAULT_REQUEST_OOM_DIES):
                _die_of_request_oom(self.server.children)
            if self.path in ("/generate", "/v1/completions") and os.environ.get(FAULT_REQUEST_OOM):
                _log(" TP0", "Scheduler hit an exception: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                             "2.00 GiB. GPU 0 has a total capacity of 95.59 GiB of which 1.02 GiB is free.")
                self._reply(500, {"error": "CUDA out of memory"})
            elif self.path in ("/generate", "/v1/completions"):
                self._reply(200, {"text": " simulated", "meta_info": {"simulated": True}})
            else:
                self._reply(404, {"detail": "Not Found"})

        def log_message(self, fmt: str, *args) -> None:
            code = args[1] if len(args) > 1 else ""
            _log("", f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{args[0]}" {code}')

    return _Handler


def _die_of_request_oom(children: list) -> None:
    """SIM_FAULT_REQUEST_OOM_DIES: the scheduler's forward pass of the request runs out of GPU memory and the scheduler
    dies; the main process kills its tree as SGLang does, the request unanswered."""
    _log(" TP0", "Scheduler hit an exception: Traceback (most recent call last):\n"
                 '  File "scheduler.py", line 1, in event_loop_overlap\n'
                 '  File "model_runner.py", line 1, in forward_extend\n'
                 "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                 "of 95.59 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 94.57 GiB "
                 "memory in use.")
    _log("", "Received sigquit from a child process. It usually means the child failed.")
    for c in children:
        c.kill()
    os.kill(os.getpid(), signal.SIGKILL)  # SGLang kills its own process tree this way


def _server_args_line(args: argparse.Namespace, fraction: float) -> str:
    return (f"server_args=ServerArgs(model_path='{args.model_path}', tokenizer_path='{args.model_path}', "
            f"host='{args.host}', port={args.port}, mem_fraction_static={fraction}, "
            f"max_total_tokens={args.max_total_tokens}, context_length={args.context_length}, "
            f"chunked_prefill_size={args.chunked_prefill_size}, "
            f"tp_size={args.tp}, dp_size=1, ep_size=1, "
            f"disable_custom_all_reduce={args.disable_custom_all_reduce}, "
            f"cuda_graph_max_bs={args.cuda_graph_max_bs or (512 if args.tp >= 4 else 256)})")


def _main(argv: list[str]) -> int:
    args = _args(argv)
    root = Path(state.state_dir())
    host = state.read_host(root)
    total = host["gpus"][0]["mem_total_mib"]
    fraction = args.mem_fraction_static if args.mem_fraction_static is not None else _auto_mem_fraction(args, total)
    version = os.environ.get("SIM_SGLANG_VERSION", SGLANG_VERSION)
    _log("", f"launchlab SIMULATED SGLang server (SGLang version {version} log format; simulated GPUs, not a real "
             "inference server)")
    if offset := _fault_offset_gib():
        _log("", f"launchlab SIMULATED FAULT ({FAULT_AVAIL_OFFSET}={offset:g}): the free memory this server prints "
                 f"after loading the weights is {offset:+g} GiB off what it really has; it sizes its KV cache from "
                 "the real figure, so its logged numbers do not predict its outcome")
    _log("", _server_args_line(args, fraction))
    sync = Path(tempfile.mkdtemp(prefix="sglang-sync-", dir=root))  # inside the box: nothing outside it
    children: list[_Forked] = []

    def shutdown(signum: int, _frame) -> None:
        for c in children:
            if c.poll() is None:
                c.terminate()
        for c in children:
            c.wait()
        _cleanup(sync)
        os._exit(0)

    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    for rank in range(args.tp):
        # TERM and INT are held from before the fork until the rank is in `children`: a stop that reaches the group
        # while a rank is being forked would otherwise miss it (the signal delivered before the child existed, the
        # handler run before the append) and leave that rank running on, alone in the group (seen as a KILL after
        # the kit's grace under load)
        with _held(signal.SIGTERM, signal.SIGINT):
            children.append(_Forked.start(_args([*argv, "--sim-worker-rank", str(rank), "--sim-sync-dir", str(sync)])))
    pause = 0.005  # back-off, not a fixed 50 ms: a rank that is ready at once is served at once
    while len(list(sync.glob("ready.*"))) < args.tp:
        if any(c.poll() not in (None, 0) for c in children):
            _log("", "Received sigquit from a child process. It usually means the child failed.")
            for c in children:
                if c.poll() is None:
                    c.kill()
            _cleanup(sync)
            os.kill(os.getpid(), signal.SIGKILL)  # SGLang kills its own process tree this way
        time.sleep(pause)
        pause = min(0.05, pause * 2)
    _cleanup(sync)

    from http.server import ThreadingHTTPServer

    handler = _handler_class()
    try:
        httpd = ThreadingHTTPServer((args.host, args.port), handler)
    except OSError as exc:
        _log("", f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                 f"('{args.host}', {args.port}): {exc.strerror.lower()}")
        shutdown(signal.SIGTERM, None)
    httpd.model_path = args.model_path
    httpd.children = children  # SIM_FAULT_REQUEST_OOM_DIES kills them
    _log("", f"INFO:     Started server process [{os.getpid()}]")
    _log("", "INFO:     Waiting for application startup.")
    _log("", "INFO:     Application startup complete.")
    _log("", f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    time.sleep(0.3 * host["pace"])  # the warm-up request
    _log("", f'INFO:     {args.host}:0 - "POST /generate HTTP/1.1" 200')
    handler.warmed.set()
    _log("", "The server is fired up and ready to roll!")
    if os.environ.get(FAULT_CRASH_AFTER_READY):  # a kernel that breaks once the server serves
        handler.answered.wait()
        _log(" TP0", "Scheduler hit an exception: Traceback (most recent call last):\n"
                     '  File "scheduler.py", line 1, in event_loop_overlap\n'
                     "RuntimeError: CUDA error: an illegal memory access was encountered")
        for c in children:
            c.kill()
        os.kill(os.getpid(), signal.SIGKILL)  # SGLang kills its own process tree this way
    while True:
        time.sleep(3600)


@contextlib.contextmanager
def _held(*signums: int):
    """Signals blocked while the block runs, delivered (to the handlers then installed) when it ends."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, set(signums))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class _Forked:
    """A scheduler process forked from the main one (SGLang spawns a fresh interpreter per rank; the simulation
    forks, so that a TP-8 start does not pay for eight interpreters' start-up). What subprocess.Popen offers the
    main process's loop: poll, terminate, kill, wait."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    @classmethod
    def start(cls, args: argparse.Namespace) -> _Forked:
        sys.stdout.flush()
        pid = os.fork()  # the main process has no thread yet: its HTTP server starts after every rank is ready
        if pid == 0:
            code = 1
            try:
                for number in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(number, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})  # held by the parent
                code = _scheduler(args)
            finally:
                sys.stdout.flush()
                os._exit(code)
        return cls(pid)

    def poll(self) -> int | None:
        return self._reap(os.WNOHANG)

    def wait(self) -> int:
        return self._reap(0)

    def _reap(self, options: int) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, options)
            except ChildProcessError:
                # the shutdown handler can run between a waitpid that reaped the child and the assignment after it
                # (Slurm's time limit signals the server and its ranks at once): the child is gone, its status lost
                self.returncode = -signal.SIGTERM
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)

    def _signal(self, number: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, number)


def _cleanup(sync: Path) -> None:
    for f in sync.glob("*"):
        f.unlink(missing_ok=True)
    try:
        sync.rmdir()
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _args(argv)
    if args.sim_worker_rank is not None:
        return _scheduler(args)
    return _main(argv)


if __name__ == "__main__":
    sys.exit(main())
