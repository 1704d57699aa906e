"""Tidy frames of a run directory, rebuilt from the raw files of each run.

    runs.parquet       one row per run: run_id, variant, repetition, host, status, failure_reason,
                       failure_phase, failure_message, startup_s, peak_mem_used_mib, phase_reached,
                       simulated, smoke_status, queue_s and job_node (a scheduler's host: the job's wait in
                       the queue and the node it ran on; empty elsewhere), then one column per factor
    events.parquet     run_id, t_s, rank, field, value: every metric parsed from the server log
    telemetry.parquet  run_id, t_s, node, gpu_index, gpu_uuid, mem_used_mib, mem_total_mib, mem_free_mib,
                       util_gpu_pct: the nvidia-smi samples (node: 0 unless the server spans several hosts)

t_s is seconds since the server was started, on the host's clock (the clock of its log and nvidia-smi).
"""

from __future__ import annotations

import functools
import hashlib
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pandas as pd

from launchlab import logparse, params, safefiles
from launchlab.errors import ParseError, RunDirError
from launchlab.gpu import telemetry
from launchlab.logparse import logfacts
from launchlab.logparse.parsedlog import rank_order
from launchlab.store import records, rundir

RUN_COLUMNS = list(records.RunRecord.ROW)
# a GPU trace larger (as kept, or once decompressed) is not read (its run says so): 10 minutes of 8 GPUs sampled
# every 5 ms are about 100 MB
MAX_CAPTURE_BYTES = 512 * 2**20
# the rows of telemetry a run directory's frame holds at most, its traces' shares alike (each at most
# telemetry.MAX_TRACE_ROWS): 200 runs of 8 GPUs keep 1,250 samples a GPU — a timeline, never memory of gigabytes
MAX_TELEMETRY_ROWS = 2_000_000
EVENT_COLUMNS = ["run_id", "t_s", "rank", "field", "value"]
TELEMETRY_COLUMNS = ["run_id", "t_s", "node", "gpu_index", "gpu_uuid", "mem_used_mib", "mem_total_mib", "mem_free_mib",
                     "util_gpu_pct"]


@dataclass(frozen=True)
class Frames:
    runs: pd.DataFrame
    events: pd.DataFrame
    telemetry: pd.DataFrame


def build(run_dir: Path, exp: params.Experiment) -> Frames:
    """Frames from every run folder that finished (status.json with state "done"), in plan order; a large batch's
    runs read by several processes (_each)."""
    directory = rundir.RunDir(run_dir)
    factors = list(exp.factors) + ([exp.search.factor] if exp.search else [])  # a search's flag: a column too
    run_ids = directory.manifest().run_ids
    share = min(telemetry.MAX_TRACE_ROWS, max(1_000, MAX_TELEMETRY_ROWS // max(1, len(run_ids))))
    finished = [(directory.run(r), status.record) for r in run_ids
                if (status := records.read_status(directory.run(r))) is not None and status.done]
    built = _each(functools.partial(_run, exp=exp, rules=exp.server.rules(), factors=factors, share=share), finished)
    runs = pd.DataFrame([b.row for b in built], columns=RUN_COLUMNS + factors)
    for col in ("startup_s", "peak_mem_used_mib", "queue_s"):
        runs[col] = pd.to_numeric(runs[col])
    events = _concat([f for b in built for f in b.events], EVENT_COLUMNS)
    events["t_s"] = pd.to_numeric(events["t_s"])
    events["value"] = pd.to_numeric(events["value"])
    return Frames(runs, events, _concat([f for b in built for f in b.telemetry], TELEMETRY_COLUMNS))


@dataclass(frozen=True)
class _Built:
    """One run's part of the frames: its runs row, its events and its GPU samples (a frame a node)."""

    row: dict
    events: list[pd.DataFrame]
    telemetry: list[pd.DataFrame]


def _run(job: tuple[rundir.RunFolder, records.RunRecord], *, exp: params.Experiment, rules, factors: list[str],
         share: int) -> _Built:
    """A finished run's frames, and its parsed.json (re)written: derived, like the frames, with this kit's parser."""
    folder, record = job
    row = {**record.row(), **{f: record.levels.get(f) for f in factors}}
    events: list[pd.DataFrame] = []
    samples: list[pd.DataFrame] = []
    summary, peaks, unread, thinned = _nodes(folder, record, exp, rules, event_frames=events,
                                             telemetry_frames=samples, share=share)
    # from the samples, like every derived figure: no sample is no peak (NaN), never 0
    row["peak_mem_used_mib"] = max(peaks) if peaks else None
    if summary is not None:
        for key, said in (("telemetry_unread", unread), ("telemetry_thinned", thinned)):
            if said:
                summary[key] = said
        summary["log_sha256"] = _logs_sha256(folder, record)  # the same log twice is one launch (ledger.py)
        rundir.write_json(folder.parsed, summary)
    return _Built(row, events, samples)


# from this many bytes of GPU traces on (as kept: gzip), a batch's runs are read by a pool of processes, one a core (at
# most 4): reading a trace is CPU-bound pandas (~40 ms for 5 minutes of 8 GPUs, 2 MB), and a worker's start (its
# imports, ~1.5 s of CPU) costs more than it saves on small traces (bench/report_scale.py: 200 runs of 2 MB read in
# about half the time on 2 cores)
PARALLEL_FROM_BYTES = 64 * 2**20


def _each(one, jobs: list) -> list[_Built]:
    """`one` of each job, in order: in this process for small traces, else in a pool of spawned processes (clean
    ones, not forks of this one with its threads, e.g. pyarrow's; and none is left once the pool is done, as a fork
    server would stay, holding its imports, until this process ends)."""
    workers = min(len(os.sched_getaffinity(0)), 4, len(jobs))  # the cores this process may use (taskset, a cpuset)
    if workers < 2 or _trace_bytes(jobs) < PARALLEL_FROM_BYTES:
        return [one(job) for job in jobs]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(one, jobs, chunksize=max(1, len(jobs) // (workers * 4))))


def _trace_bytes(jobs: list[tuple[rundir.RunFolder, records.RunRecord]]) -> int:
    """The size of the runs' GPU traces as kept (each node's), what reading them costs."""
    sizes = (folder.samples(node) for folder, record in jobs for node in range(max(1, len(record.nodes or []))))
    return sum(path.stat().st_size for path in sizes if path.is_file())


def _nodes(folder: rundir.RunFolder, record: records.RunRecord, exp: params.Experiment, rules, *,
           event_frames: list[pd.DataFrame], telemetry_frames: list[pd.DataFrame],
           share: int = telemetry.MAX_TRACE_ROWS) -> tuple[dict | None, list, list, list]:
    """Each node's log and GPU trace of a run (at most `share` rows of it kept), their frames appended: (parsed.json's
    summary, the nodes' peak memory, the traces that could not be read — no peak, no timeline from them —, the
    traces kept thinned)."""
    summary: dict | None = None
    peaks: list[float] = []
    unread: list[str] = []
    thinned: list[str] = []
    for node in range(max(1, len(record.nodes or []))):
        log, csv = folder.log(node), folder.samples(node)
        if log.exists():  # TP ranks are global across nodes, so events of every node share one frame
            data, events = _node_log(log, exp, rules, run_id=record.run_id, node=node, t0=record.started)
            summary = _merge_parsed(summary, data)
            event_frames.append(events)
        if csv.exists():
            try:
                raw = telemetry.read_query_csv(csv, limit=MAX_CAPTURE_BYTES, max_rows=share)
                samples = telemetry.tidy(raw, record.run_id, record.started)
            except (ParseError, OSError) as exc:  # the run says so; the batch's report stands
                unread.append(f"{csv.name}: {getattr(exc, 'strerror', None) or exc}")
                continue
            samples.insert(2, "node", node)
            telemetry_frames.append(samples)
            every = raw.attrs.get("every", 1)
            if every > 1:  # its peak from every sample, its timeline from every `every`-th of each GPU
                thinned.append(f"{csv.name}: {raw.attrs['samples']:,} samples, kept every {every}th of each GPU "
                               f"({len(samples):,})")
                if raw.attrs["peak_mem_used_mib"] == raw.attrs["peak_mem_used_mib"]:
                    peaks.append(float(raw.attrs["peak_mem_used_mib"]))
            elif samples["mem_used_mib"].notna().any():
                peaks.append(float(samples["mem_used_mib"].max()))
    return summary, peaks, unread, thinned


def _logs_sha256(folder: rundir.RunFolder, record: records.RunRecord) -> str:
    """The SHA-256 of the run's server logs as kept (every node's, in node order): its content's identity."""
    digest = hashlib.sha256()
    for node in range(max(1, len(record.nodes or []))):
        if folder.log(node).exists():
            with safefiles.open_regular(folder.log(node)) as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
    return digest.hexdigest()




def _node_log(log: Path, exp: params.Experiment, rules, *, run_id: str, node: int,
              t0: datetime | None) -> tuple[dict, pd.DataFrame]:
    """One node's log parsed: its parsed.json part (node 0's with the facts its log states: versions, model,
    sizes, which the confounds compare) and its events, timed from the server's start."""
    parsed = logparse.parse_file(log, exp.server.kind, rules)
    data = parsed.to_json()
    if node == 0:
        data["log_facts"] = logfacts.read(log, parsed)
    return data, events_of(parsed, run_id, t0)


def events_of(parsed: logparse.ParsedLog, run_id: str, t0: datetime | None = None) -> pd.DataFrame:
    """A parsed log's events as rows of the events frame, timed from t0 where both are known."""
    rows = [{"run_id": run_id, "t_s": (e.t - t0).total_seconds() if (e.t and t0) else None,
             "rank": e.rank, "field": e.field, "value": e.value} for e in parsed.events]
    seen = {(e.rank, e.field) for e in parsed.events}
    # a rank fact the parser derived rather than read off one line (vLLM's KV tokens as blocks × block size) is a
    # parsed fact too: in the frame, with no time
    rows += [{"run_id": run_id, "t_s": None, "rank": rank, "field": name, "value": value}
             for rank, fields in parsed.ranks.items() for name, value in fields.items()
             if (rank, name) not in seen and isinstance(value, (int, float))]
    return pd.DataFrame(rows, columns=EVENT_COLUMNS)


def _merge_parsed(first: dict | None, more: dict) -> dict:
    """parsed.json of a run: node 0's log, with the per-rank facts of the other nodes' logs added (TP ranks are
    global across nodes)."""
    if first is None:
        return more
    for key in ("ranks", "custom_ar"):
        merged = {**(more.get(key) or {}), **first.get(key, {})}  # node 0's value wins where both name a rank
        first[key] = {rank: merged[rank] for rank in sorted(merged, key=rank_order)}  # runview shows them in order
    return first


def _concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def write(run_dir: Path, frames: Frames) -> None:
    directory = rundir.RunDir(run_dir)
    for name in rundir.FRAMES:
        rundir.write_frame(directory.frame(name), getattr(frames, name))


def load(run_dir: Path, telemetry_columns: list[str] | None = None) -> Frames:
    """The frames of a run directory; telemetry_columns: only those columns of telemetry.parquet (those of them
    it has: an older run directory may lack one)."""
    directory = rundir.RunDir.check(run_dir)
    missing = [n for n in rundir.FRAMES if not directory.frame(n).is_file()]
    if missing:
        raise RunDirError(f"{run_dir} has no {', '.join(f'{n}.parquet' for n in missing)} yet; "
                          f"`launchlab report {run_dir}` builds them from the runs' raw files")
    tables = {name: rundir.read_frame(directory.frame(name), max_rows=rundir.MAX_FRAME_ROWS[name])
              for name in rundir.FRAMES if name != "telemetry"}
    columns = None
    if telemetry_columns is not None:
        import pyarrow.parquet as pq

        with safefiles.open_regular(directory.frame("telemetry")) as fh:
            present = set(pq.read_schema(fh).names)
        columns = [c for c in telemetry_columns if c in present]
    return Frames(**tables, telemetry=rundir.read_frame(directory.frame("telemetry"), columns=columns,
                                                        max_rows=MAX_TELEMETRY_ROWS,
                                                        thin=("gpu_index", "mem_used_mib")))
