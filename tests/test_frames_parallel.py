"""A large batch's runs are read by a pool of processes (frames._each, from frames.PARALLEL_FROM_BYTES of GPU traces
on): the frames and every parsed.json they write are those of reading the runs one by one in this process."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from conftest import ROOT
from launchlab import params
from launchlab.store import records, rundir
from launchlab.verdicts import frames

EXAMPLE = ROOT / "examples" / "h200-sglang-kv" / "20261203-092613"  # 18 real SGLang runs on an H200


def _parsed(run_dir) -> dict[str, bytes]:
    return {p.parent.name: p.read_bytes() for p in sorted(run_dir.glob("runs/*/parsed.json"))}


@pytest.mark.slow
def test_a_pool_of_processes_reads_the_runs_as_this_process_does_in_plan_order(tmp_path, monkeypatch):
    run_dir = tmp_path / EXAMPLE.name
    shutil.copytree(EXAMPLE, run_dir)
    exp = params.load(rundir.RunDir(run_dir).experiment_file)
    alone = frames.build(run_dir, exp)
    written_alone = _parsed(run_dir)
    for p in run_dir.glob("runs/*/parsed.json"):
        p.unlink()
    started = []
    real = frames.ProcessPoolExecutor
    monkeypatch.setattr(frames, "PARALLEL_FROM_BYTES", 1)
    monkeypatch.setattr(frames, "ProcessPoolExecutor", lambda *a, **k: started.append(a) or real(*a, **k))
    pooled = frames.build(run_dir, exp)
    assert started and started[0][0] >= 2, "the runs were read by a pool of at least two processes"
    assert len(alone.runs) == 18 and len(alone.telemetry) > 0 and len(alone.events) > 0  # and a warm-up
    for name in ("runs", "events", "telemetry"):
        pd.testing.assert_frame_equal(getattr(pooled, name), getattr(alone, name))
    assert _parsed(run_dir) == written_alone and len(written_alone) == 18


def test_small_traces_are_read_in_this_process(monkeypatch):
    """Below the bytes a worker's start is worth, no pool: the one given here would fail the test if used."""
    monkeypatch.setattr(frames, "ProcessPoolExecutor", None)
    run_dir = EXAMPLE  # read only: its runs' traces are a few MB in all
    directory = rundir.RunDir(run_dir)
    jobs = [(directory.run(r), records.read_status(directory.run(r)).record) for r in directory.manifest().run_ids]
    assert 0 < frames._trace_bytes(jobs) < frames.PARALLEL_FROM_BYTES
    assert frames._each(lambda job: job[1].run_id, jobs) == [record.run_id for _, record in jobs]


def _children() -> set[int]:
    import os
    from pathlib import Path

    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.add(int(stat.parent.name))
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.slow
def test_the_summary_kernel_started_while_the_verdict_is_made_is_stopped_when_the_verdict_fails(tmp_path, monkeypatch):
    """`launchlab report` starts the summary's kernel before it makes the verdict (notebooks._summary_kernel): a
    verdict that fails (or a Ctrl-C then) leaves no kernel running."""
    from launchlab.reporting import reportmd
    from launchlab.runner import notebooks

    run_dir = tmp_path / "run"
    shutil.copytree(ROOT / "examples" / "h200-transformers-kv" / "20261129-232709", run_dir)
    before = _children()

    def fails(_run_dir):
        import time

        deadline = time.monotonic() + 30
        while not _children() - before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _children() - before, "the kernel is starting meanwhile"
        raise KeyboardInterrupt

    monkeypatch.setattr(reportmd, "write_verdict", fails)
    with pytest.raises(KeyboardInterrupt):
        notebooks.summarize(run_dir, say=lambda _: None)
    left = {pid for pid in _children() - before if not open(f"/proc/{pid}/stat").read().split()[2] == "Z"}
    assert left == set(), "a kernel outlived the report"
