"""Issue 39, part 5: what a host's nvidia-smi prints is read up to a limit, and a listing with more GPUs than the
host's params declare (or than any host may have) stops the batch before anything is launched, naming the host —
an nvidia-smi stand-in listing 10⁶ GPUs made a one-run batch take 122 s and 4.5 GB and write a 407 MB
provenance.json. A sampler capture whose header cannot place a sample in time keeps the batch's report: the run
says its GPU trace could not be read (it was a KeyError, exit 1, no report.md)."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import ROOT, write_params
from launchlab.hosts import commands
from launchlab.hosts.local import LocalHost

EXAMPLE = ROOT / "examples/h200-transformers-kv/20261129-232709"  # small (1.3 MB), real nvidia-smi captures

MILLION_GPUS = """#!/bin/sh
# a broken or hostile nvidia-smi: a million GPUs, whatever it is asked
seq 0 999999
"""


@pytest.fixture
def hostile_path(tmp_path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(MILLION_GPUS)
    os.chmod(bin_dir / "nvidia-smi", 0o755)
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


def test_a_host_facts_section_is_cut_at_the_limit(tmp_path, hostile_path):
    host = LocalHost("box", workdir=str(tmp_path / "work"), env={"PATH": hostile_path})
    out = host.run(commands.host_facts(only=("gpus", "table")), timeout=60).stdout
    assert len(out) <= 2 * (commands.SMI_OUTPUT_BYTES + 100) and out.count(commands.SECTION_MARK) == 2
    assert len(host.gpu_indices()) < 200_000  # the first MiB of the listing, not a million
    for command in (commands.gpu_snapshot([0]), commands.gpu_apps([0])):
        cut = host.run(command, timeout=60, check=False)
        assert cut.exit_code == 141 and len(cut.stdout) == commands.SMI_OUTPUT_BYTES  # cut, and said to have failed


def test_a_bounded_command_keeps_its_exit_status(tmp_path):
    host = LocalHost("box", workdir=str(tmp_path / "work"))
    assert host.run(commands.bounded_checked("printf 'a,b\\n'"), timeout=30).stdout == "a,b\n"
    failed = host.run(commands.bounded_checked("sh -c 'echo partial; exit 9'"), timeout=30, check=False)
    assert (failed.exit_code, failed.stdout) == (9, "partial\n")
    inside = host.run(f"a=$({commands.gpu_apps()}) || exit 2; echo \"[$a]\"", timeout=30, check=False)
    assert inside.exit_code in (0, 2)  # composes inside $(…) as gpu_owners uses it: no arithmetic `$((`


@pytest.mark.parametrize("declared", [2, None], ids=["gpus-2", "undeclared"])
def test_a_listing_of_more_gpus_than_declared_stops_the_batch_naming_the_host(tmp_path, hostile_path, declared):
    gpus = f", gpus: {declared}" if declared is not None else ""
    params = write_params(tmp_path, f"""\
        experiment: hostile-smi
        hosts:
          box: {{transport: local, workdir: {tmp_path / 'work'}{gpus}}}
        server:
          kind: generic
          command: [python3, -c, "import time; time.sleep(60)"]
          ready: {{timeout_s: 5, health_url: "http://127.0.0.1:{{port}}/health"}}
        factors:
          f: {{"a": {{}}, "b": {{}}}}
        baseline: {{f: "a"}}
        repetitions: 1
        """)
    env = {**os.environ, "PATH": hostile_path, "LAUNCHLAB_OUTPUTS": str(tmp_path / "out")}
    proc = subprocess.run([sys.executable, "-m", "launchlab.cli", "run", str(params)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    said = "the 2 its params declare (`gpus: 2`)" if declared else "the 1024 a host may have"
    assert "host 'box': nvidia-smi there lists" in proc.stderr and said in proc.stderr, proc.stderr
    assert "nothing was launched" in proc.stderr and "Traceback" not in proc.stderr
    assert not list((tmp_path / "out").rglob("provenance.json"))


@pytest.mark.slow
def test_a_capture_without_timestamps_keeps_the_report_and_its_run_says_why(tmp_path):
    run_dir = tmp_path / EXAMPLE.name
    shutil.copytree(EXAMPLE, run_dir)
    run = sorted((run_dir / "runs").glob("02_*"))[0]
    kept, csv = run / "nvidia-smi.csv.gz", run / "nvidia-smi.csv"  # as an earlier kit kept it: plain
    csv.write_text(gzip.decompress(kept.read_bytes()).decode().replace("timestamp, index", "when, index", 1))
    kept.unlink()
    proc = subprocess.run([sys.executable, "-m", "launchlab.cli", "report", str(run_dir), "--no-html"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads((run_dir / "verdict.json").read_text())
    [warning] = [w for w in verdict["warnings"] if run.name in w]
    assert "its GPU trace could not be read (nvidia-smi.csv: its header has no timestamp column" in warning
    assert "no peak memory" in warning and "could not be read" in (run_dir / "report.md").read_text()
    runs = pd.read_parquet(run_dir / "runs.parquet").set_index("run_id")
    assert pd.isna(runs.loc[run.name, "peak_mem_used_mib"])  # missing, never a zero
    others = runs.drop(index=run.name)
    assert others["peak_mem_used_mib"].notna().any()
    telemetry = pd.read_parquet(run_dir / "telemetry.parquet")
    assert run.name not in set(telemetry["run_id"]) and len(telemetry)


def test_a_capture_over_the_limit_is_not_read(tmp_path, monkeypatch):
    from launchlab import params
    from launchlab.verdicts import frames

    run_dir = tmp_path / EXAMPLE.name
    shutil.copytree(EXAMPLE, run_dir)
    monkeypatch.setattr(frames, "MAX_CAPTURE_BYTES", 1000)  # the real one is 512 MiB: a file that size costs time
    built = frames.build(run_dir, params.load(run_dir / "experiment.yaml"))
    assert built.runs["peak_mem_used_mib"].isna().all() and built.telemetry.empty
    parsed = json.loads(next(Path(run_dir).glob("runs/01_*/parsed.json")).read_text())
    assert "larger than the limit of 1000 bytes" in parsed["telemetry_unread"][0]
