"""`launchlab parse --json` on logs no server should write, vs `grep -E` for the parser's anchor words, in one run.

    .venv/bin/python bench/parse_huge.py [--line-mb 500] [--short-mb 2048] [--repeat 2]

Issue 23: one line of 500 MB took `launchlab parse` past 400 s and 1 GB; a 2.1 GB log of short lines parsed at
~11 × `grep -E`. This builds, one at a time in a temporary folder: a real SGLang startup, then one line of 500 MB
of decode progress without a newline; 2 GB of SGLang decode-progress and access lines of 8 TP ranks; 2 GB of a
flooding server's short lines that no kind's evidence matches (parsed as `generic`); 2 GB each of a llama-server's
and a TGI router's request lines after a real startup that reaches ready (issue 27). Each ends with a CUDA
out-of-memory the parser must find. It times the whole `launchlab parse --json` command (interpreter start included) and
`grep -E -c` with the anchor words of the parser `parse` picks (logparse.detect) as one alternation over the same
file, and prints both, their ratio and the parse's peak memory. Target: ratio ≤ 2 for every log. Exit status 1
when it is missed, or when the disk has no room for the files (checked first with shutil.disk_usage). The files
are removed afterwards.

Not covered, and slower: a log in which nearly every line holds an anchor word (e.g. `error` in every line of an
SGLang log) is parsed line by line, at ~1–2 MB/s (bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from parse_vs_grep import DECODE, HEAD, build

from launchlab import logparse

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 2.0  # issue 23
LAUNCHLAB = [sys.executable, "-m", "launchlab.cli"]
TRACEBACK = ("[2025-11-30 13:00:00 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
             '  File "scheduler.py", line 1, in event_loop\n'
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
# the parse command, in a child that reports its own time and the command's peak memory (RUSAGE_CHILDREN)
MEASURE = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
out = subprocess.run(sys.argv[1:], capture_output=True, text=True, check=True)
s = time.perf_counter() - t
print(json.dumps({"s": s, "rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "parsed": json.loads(out.stdout)}))
"""
_ERE_SPECIAL = set(".[]()*+?{}|^$\\")


def alternation(words: tuple[str, ...]) -> str:
    """The anchor words as one POSIX extended regex: each literal, special characters escaped."""
    return "|".join("".join("\\" + c if c in _ERE_SPECIAL else c for c in w) for w in words)


def build_one_line(path: Path, mb: int) -> None:
    """A real startup, one line of `mb` MB of decode progress without a newline, then a traceback."""
    piece = DECODE.format(m=1, s=2, r=3, a=4, b=5, c=6, d=7).rstrip("\n").encode() + b" "
    block = piece * (2**20 // len(piece))
    with open(path, "wb") as fh:
        fh.write(HEAD.read_bytes())
        written = 0
        while written < mb * 2**20:
            fh.write(block)
            written += len(block)
        fh.write(b"\n" + TRACEBACK.encode())


FLOOD = ("[flood] decode batch, #running-req: {a}, #token: {b}, token usage: 0.{c:02d}, gen throughput (token/s): "
         "{d}.{c:02d}\n")


def build_flood(path: Path, mb: int) -> None:
    """Short lines of a server no kind knows (generic), then a Python traceback."""
    block = "".join(FLOOD.format(a=i % 64, b=1000 + i * 7, c=i % 100, d=i % 3000) for i in range(5000)).encode()
    with open(path, "wb") as fh:
        written = 0
        while written < mb * 2**20:
            fh.write(block)
            written += len(block)
        fh.write(b"Traceback (most recent call last):\n  File \"server.py\", line 1, in <module>\n"
                 b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")


ROUND3 = ROOT / "tests" / "fixtures" / "real-logs-round3"
# a served request's lines in each kind's format (llama-server's slots, TGI's router): the launch words they repeat
# ("all slots are idle", `text_generation_router`) are looked for only until the server is ready
SERVED = {
    "llamacpp": (ROUND3 / "llamacpp-issue11476-docker-ready-listening.log",
                 "slot launch_slot_: id  0 | task {i} | processing task\n"
                 "slot update_slots: id  0 | task {i} | new prompt, n_ctx_slot = 32768, n_keep = 0, n_prompt_tokens = 72\n"
                 "slot update_slots: id  0 | task {i} | prompt processing progress, n_past = 64, n_tokens = 64, "
                 "progress = 0.500000\n"
                 "slot      release: id  0 | task {i} | stop processing: n_past = 584, truncated = 0\n"
                 "srv  update_slots: all slots are idle\n"
                 "srv  log_server_r: request: POST /completion 127.0.0.1 200\n",
                 "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 100.00 MiB on device 0: cudaMalloc failed: "
                 "out of memory\n"),
    "tgi": (ROUND3 / "tgi-issue2534-ready-connected-then-shard-unreachable.log",
            '2024-09-23T12:11:41.{i:06d}Z  INFO compat_generate{{default_return_full_text=true}}:generate{{'
            'total_time="1.2s" validation_time="1ms" queue_time="1ms" inference_time="1.2s" time_per_token="20ms"}}: '
            "text_generation_router::server: router/src/server.rs:322: Success\n",
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"),
}


def build_served(path: Path, mb: int, kind: str) -> None:
    """A real startup of the kind that reaches ready, then its request lines, then a CUDA out-of-memory."""
    head, request, end = SERVED[kind]
    block = "".join(request.format(i=i) for i in range(5000)).encode()
    with open(path, "wb") as fh:
        fh.write(head.read_bytes())
        written = 0
        while written < mb * 2**20:
            fh.write(block)
            written += len(block)
        fh.write(end.encode())


def measure(log: Path, repeat: int) -> dict:
    pattern = alternation(logparse.parser_for(logparse.detect(log)).anchors.words)
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # same page-cache state for both
    grep_s, parse_s, rss, parsed = [], [], 0.0, {}
    for _ in range(repeat):
        t = time.perf_counter()
        # -c: grep reads the whole file (with its output on /dev/null, GNU grep stops at the first match)
        subprocess.run(["grep", "-E", "-c", pattern, str(log)], stdout=subprocess.PIPE, check=True)
        grep_s.append(time.perf_counter() - t)
        out = subprocess.run([sys.executable, "-c", MEASURE, *LAUNCHLAB, "parse", "--json", str(log)],
                             capture_output=True, text=True, check=True)
        result = json.loads(out.stdout)
        parse_s.append(result["s"])
        rss, parsed = max(rss, result["rss_mb"]), result["parsed"]
    return {"size_mb": log.stat().st_size / 2**20, "grep_s": grep_s, "parse_s": parse_s, "rss_mb": rss,
            "ratio": min(parse_s) / min(grep_s), "parsed": parsed}


def report(name: str, m: dict, repeat: int) -> bool:
    failure = m["parsed"]["failure"]
    print(f"{name}: {m['size_mb']:.0f} MB")
    print(f"  grep -E -c (reference): best {min(m['grep_s']):.3f} s of {repeat}  "
          f"({', '.join(f'{t:.3f}' for t in m['grep_s'])})")
    print(f"  launchlab parse --json: best {min(m['parse_s']):.3f} s of {repeat}  "
          f"({', '.join(f'{t:.3f}' for t in m['parse_s'])})")
    print(f"  ratio parse / grep:     {m['ratio']:.2f}   (target ≤ {TARGET_RATIO})")
    print(f"  parse peak memory:      {m['rss_mb']:.0f} MB  (the whole command, interpreter included)")
    print(f"  parsed: server={m['parsed']['server']} phase={m['parsed']['phase_reached']} "
          f"failure={failure['reason'] if failure else None} (line {failure['line'] if failure else '-'})")
    return m["ratio"] <= TARGET_RATIO and failure is not None and failure["reason"] == "cuda_oom"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--line-mb", type=int, default=500)
    ap.add_argument("--short-mb", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="launchlab-bench-") as tmp:
        need = (max(args.line_mb, args.short_mb) + 64) * 2**20  # one file at a time
        free = shutil.disk_usage(tmp).free
        if free < need:
            print(f"not enough disk in {tmp}: {free / 2**30:.1f} GiB free, {need / 2**30:.1f} GiB needed; "
                  "set TMPDIR to a larger disk, or pass smaller --line-mb/--short-mb")
            return 1
        grep = subprocess.run(["grep", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
        print(f"load average at the start: {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
              f"({os.cpu_count()} CPUs); {grep}")
        ok = True
        log = Path(tmp) / "one-line.log"
        build_one_line(log, args.line_mb)
        ok &= report(f"one line of {args.line_mb} MB after a real SGLang startup", measure(log, args.repeat),
                     args.repeat)
        log.unlink()
        log = Path(tmp) / "short-lines.log"
        build(log, args.short_mb)
        ok &= report(f"{args.short_mb} MB of short lines (SGLang decode progress and access lines, 8 TP ranks)",
                     measure(log, args.repeat), args.repeat)
        log.unlink()
        log = Path(tmp) / "flood.log"
        build_flood(log, args.short_mb)
        ok &= report(f"{args.short_mb} MB of short lines of a flooding server no kind knows (generic)",
                     measure(log, args.repeat), args.repeat)
        log.unlink()
        for kind in SERVED:
            log = Path(tmp) / f"served-{kind}.log"
            build_served(log, args.short_mb, kind)
            ok &= report(f"{args.short_mb} MB of a {kind} server's request lines after its ready startup",
                         measure(log, args.repeat), args.repeat)
            log.unlink()
    print(f"load average at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
