"""`launchlab report` at scale: a run directory of N runs × 5 minutes of nvidia-smi samples at 100 ms on 8 GPUs
(200 runs: about 5 M telemetry rows) plus their server logs, and the real `launchlab report` timed on it.

    .venv/bin/python bench/report_scale.py [--runs 20 50 100 200] [--minutes 5] [--keep DIR]

The run directory is synthetic but in the kit's own formats: made from the demo's params (4 variants of a
simulated 8-GPU box) by the batch's own code (manifest, experiment.yaml, run folders through rundir.RunDir),
each run with a status.json written by records.write_final, a simulated SGLang server log (the sim server's
lines, one startup of 8 TP ranks; a variant that runs out of memory fails like the sim does) and a sampler CSV
as `nvidia-smi --query-gpu=… --format=csv,nounits -lms 100` writes it (launchlab.sim.nvidia_smi's columns).
`launchlab report` then runs in a subprocess (frames, verdict, summary notebook, HTML), four times per size: three
timed (wall and CPU; the median counts), once sampled from /proc for the peak memory of its whole process tree (the
sampling slows it); and the HTML's size. Prints a
table of how the time grows with the number of runs, and writes it to bench/results/report-scale-<date>.md.
Targets (issue 68), at the largest size: ≤ 15 s, ≤ 1 GB peak memory of the whole process tree, HTML < 10 MB. Exit
status 1 when one is missed.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from launchlab.runner import batch
from launchlab.runner import plan as plans
from launchlab.sim import state
from launchlab.store import records, rundir
from launchlab.store.records import RunRecord

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params" / "demo.yaml"
GPUS = 8
INTERVAL_S = 0.1
TOTAL_MIB = 97887
TARGET_S, TARGET_RSS_MB, TARGET_HTML_MB = 15.0, 1024.0, 10.0  # issue 68 (issue 12's were 60 s and 2 GB)
CLI = "import sys; from launchlab.cli import main; sys.exit(main(sys.argv[1:]))"  # the `launchlab` script
HEADER = ("timestamp, index, uuid, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
          "utilization.gpu [%]\n")

READY_LOG = """\
[{t0}] launchlab SIMULATED SGLang server (SGLang 0.5.8 log format; simulated GPUs, not a real inference server)
[{t0}] server_args=ServerArgs(model_path='/models/kimi-k2.5-int4', tokenizer_path='/models/kimi-k2.5-int4', \
host='127.0.0.1', port=30000, mem_fraction_static={fraction}, max_total_tokens=None, chunked_prefill_size=8192, \
tp_size=8, dp_size=1, ep_size=1, disable_custom_all_reduce={no_ar}, cuda_graph_max_bs=128)
{ranks}"""
RANK = """\
[{t1} TP{r}] Init torch distributed begin.
[{t1} TP{r}] Init torch distributed ends. mem usage=1.50 GB
[{t1} TP{r}] Load weight begin. avail mem=93.54 GB
[{t2} TP{r}] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, avail mem=23.54 GB, mem usage=70.00 GB.
"""
RANK_READY = """\
[{t2} TP{r}] KV Cache is allocated. #tokens: {tokens}, KV size: {kv:.2f} GB
[{t2} TP{r}] Memory pool end. avail mem=9.80 GB
[{t2} TP{r}] Capture cuda graph begin. This can take up to several minutes. avail mem=9.80 GB
[{t3} TP{r}] Capture cuda graph end. Time elapsed: 0.48 s. mem usage=0.80 GB. avail mem=9.00 GB.
"""
READY_END = """\
[{t3} TP0] max_total_num_tokens={tokens}, chunked_prefill_size=8192, max_prefill_tokens=16384, \
max_running_requests=4096, context_len=2048, available_gpu_mem=9.00 GB
[{t3}] INFO:     Started server process [4242]
[{t3}] INFO:     Waiting for application startup.
[{t3}] INFO:     Application startup complete.
[{t3}] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)
[{t3}] INFO:     127.0.0.1:0 - "POST /generate HTTP/1.1" 200
[{t3}] The server is fired up and ready to roll!
"""
FAILED_RANK = """\
[{t2} TP{r}] Scheduler hit an exception: Traceback (most recent call last):
  File "sglang/srt/managers/scheduler.py", line 2556, in run_scheduler_process
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: \
self.server_args.mem_fraction_static={fraction}
"""


def _stamp(t: datetime) -> str:
    return f"{t:%Y-%m-%d %H:%M:%S}"


def write_run(folder: rundir.RunFolder, run, started: datetime, samples: int, rng: random.Random) -> None:
    """One run's raw files and status.json, as the kit leaves them."""
    levels = run.variant.levels
    fraction = levels.get("mem_fraction", "0.55")
    ready = fraction == "0.85"  # the demo's story: the fraction decides, custom all-reduce does not
    t = [started + timedelta(seconds=s) for s in (0.2, 0.5, 2.0, 3.5)]
    ranks = "".join(RANK.format(t1=_stamp(t[1]), t2=_stamp(t[2]), r=r) for r in range(GPUS))
    tokens = 190_000 + rng.randrange(2000)
    if ready:
        ranks += "".join(RANK_READY.format(t2=_stamp(t[2]), t3=_stamp(t[3]), r=r, tokens=tokens,
                                           kv=tokens * 70272 / (1 << 30)) for r in range(GPUS))
        ranks += READY_END.format(t3=_stamp(t[3]), tokens=tokens)
    else:
        ranks += "".join(FAILED_RANK.format(t2=_stamp(t[2]), r=r, fraction=fraction) for r in range(GPUS))
        ranks += f"[{_stamp(t[2])}] Received sigquit from a child process. It usually means the child failed.\n"
    folder.log().write_text(READY_LOG.format(t0=_stamp(t[0]), fraction=fraction, no_ar=levels.get("custom_ar") == "off",
                                             ranks=ranks))
    uuids = [state.gpu_uuid("box", i) for i in range(GPUS)]
    peak = 0.0
    with open(folder.samples(), "w") as fh:
        fh.write(HEADER)
        for k in range(samples):
            at = started + timedelta(seconds=k * INTERVAL_S)
            stamp = f"{at:%Y/%m/%d %H:%M:%S}.{at.microsecond // 1000:03d}"
            phase = min(1.0, k / 40)
            base = 512 + 70 * 1024 * phase + (12_000 * phase if ready else 0)
            lines = []
            for i in range(GPUS):
                used = int(base + rng.randrange(64)) if (ready or k < 60) else 0
                peak = max(peak, used)
                lines.append(f"{stamp}, {i}, {uuids[i]}, {TOTAL_MIB}, {used}, {TOTAL_MIB - 566 - used}, "
                             f"{rng.randrange(100) if used else 0}\n")
            fh.write("".join(lines))
    record = RunRecord(run.run_id, run.variant.name, run.repetition, run.host, dict(levels),
                       status="ready" if ready else "failed",
                       failure_reason=None if ready else "not_enough_memory",
                       failure_phase=None if ready else "kv_cache",
                       failure_message=None if ready else "RuntimeError: Not enough memory. Please try to increase "
                                                          f"--mem-fraction-static. Current value: {fraction}",
                       phase_reached="ready" if ready else "weights", startup_s=3.5 if ready else None,
                       peak_mem_used_mib=peak, server_started_at=started.isoformat(timespec="microseconds"),
                       stopped_with="TERM" if ready else "gone", drained=True, drain_s=0.3, simulated=True,
                       nodes=[run.host])
    records.write_final(folder, record)


def build(root: Path, runs: int, minutes: float) -> Path:
    exp, plan = plans.planned(PARAMS, repetitions=max(1, runs // 4))
    plan = plan[:runs]
    run_dir, _ = batch._open_run_dir(exp, plan, PARAMS, root, resume=None)  # the batch's manifest and experiment.yaml
    rng = random.Random(12)
    start = datetime(2026, 11, 30, 9, 0, 0)
    samples = int(minutes * 60 / INTERVAL_S)
    for n, run in enumerate(plan):
        folder = rundir.RunDir(run_dir).run(run.run_id)
        folder.path.mkdir(parents=True)
        write_run(folder, run, start + timedelta(minutes=n * (minutes + 1)), samples, rng)
    return run_dir


def report(run_dir: Path, times: int = 3) -> tuple[list[float], float, float, float, float]:
    """`launchlab report RUN_DIR` in a subprocess, `times` times timed and once more sampled: (the timed runs' wall
    s, the CPU s of their median, peak memory MB and wall s of the sampled run, HTML MB). A timed run's CPU is what
    this process's children used (getrusage): the summary kernel and the pool that reads a large batch's runs too,
    since the report reaps both. The sampled run is read every 50 ms for the peak memory of its process tree (the sum
    of each process's PSS: shared pages counted once, shared out); sampling is not free on two cores (the same report
    took 16.9 s sampled, 12.3 to 14.3 s not, 2026-12-07), so no time is taken from it. The run directory's files are
    flushed to disk first: their writeback, minutes after the batch that wrote them, is not the report's."""
    os.sync()
    walls, cpus = [], []
    for _ in range(times):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        tic = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", CLI, "report", str(run_dir)], capture_output=True, text=True)
        walls.append(time.perf_counter() - tic)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if proc.returncode != 0:
            raise SystemExit(f"launchlab report failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
    tic = time.perf_counter()
    sampled = subprocess.Popen([sys.executable, "-c", CLI, "report", str(run_dir)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
    peak_kib = 0
    while sampled.poll() is None:
        peak_kib = max(peak_kib, sum(_pss_kib(pid) for pid in _tree(sampled.pid)))
        time.sleep(0.05)
    sampled_wall = time.perf_counter() - tic
    _, stderr = sampled.communicate()
    if sampled.returncode != 0:
        raise SystemExit(f"launchlab report failed ({sampled.returncode}):\n{stderr[-3000:]}")
    html = rundir.RunDir(run_dir).summary_html
    median = sorted(range(times), key=walls.__getitem__)[times // 2]
    return walls, cpus[median], peak_kib / 1024, sampled_wall, html.stat().st_size / 1e6


def _tree(root: int) -> list[int]:
    """root and every process descended from it (from /proc/*/stat's parent ids)."""
    parent = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        parent[int(stat.parent.name)] = int(fields[1])
    tree, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, up in parent.items() if up in frontier]
        tree += frontier
    return tree


def _pss_kib(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in text.splitlines() if line.startswith("Pss:")), 0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, nargs="+", default=[20, 50, 100, 200])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--keep", type=Path, help="build the run directories here and keep them")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="launchlab-scale-"))
    rows = []
    try:
        for n in sorted(args.runs):
            tic = time.perf_counter()
            run_dir = build(work / f"runs-{n}", n, args.minutes)
            built = time.perf_counter() - tic
            telemetry_rows = n * int(args.minutes * 60 / INTERVAL_S) * GPUS
            walls, cpu, rss, sampled_wall, html = report(run_dir)
            wall = statistics.median(walls)
            rows.append((n, telemetry_rows, wall, cpu, rss, html))
            print(f"  {n} runs ({telemetry_rows / 1e6:.2f} M samples; built in {built:.0f} s): report median "
                  f"{wall:.1f} s of {', '.join(f'{w:.1f}' for w in walls)} ({cpu:.1f} s CPU); sampled again: peak "
                  f"memory {rss:.0f} MB (PSS of the process tree; {sampled_wall:.1f} s under sampling), "
                  f"summary.html {html:.2f} MB", flush=True)
            if not args.keep:
                shutil.rmtree(work / f"runs-{n}", ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    first = rows[0]
    table = ["| runs | telemetry rows | `launchlab report` wall (median of 3) | CPU | × wall of the smallest "
             "| peak memory (tree PSS) | summary.html |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    table += [f"| {n} | {r / 1e6:.2f} M | {w:.1f} s | {c:.1f} s | {w / first[2]:.1f} (runs ×{n / first[0]:g}) "
              f"| {rss:.0f} MB | {h:.2f} MB |" for n, r, w, c, rss, h in rows]
    load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end"
    n, _, wall, _, rss, html = rows[-1]
    missed = [what for what, bad in (("time", wall > TARGET_S), ("memory", rss > TARGET_RSS_MB),
                                     ("HTML size", html > TARGET_HTML_MB)) if bad]
    verdict = f"{n} runs: {wall:.1f} s (≤ {TARGET_S:.0f}), {rss:.0f} MB (≤ {TARGET_RSS_MB:.0f}), " \
              f"{html:.2f} MB HTML (< {TARGET_HTML_MB:.0f}): " + ("met" if not missed else "MISSED " + ", ".join(missed))
    text = "\n".join(table) + f"\n\n{verdict}\n({load})\n"
    print(text, end="")
    out = ROOT / "bench" / "results" / f"report-scale-{datetime.now():%Y%m%d}.md"
    out.write_text(f"# `launchlab report` at scale ({datetime.now():%Y-%m-%d}, this dev machine; "
                   f"{args.minutes:g} min of 100 ms samples of 8 GPUs per run)\n\n{text}")
    print(f"written to {out.relative_to(ROOT)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
