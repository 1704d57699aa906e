"""A run directory deleted, or a run file that cannot be written, while a run goes: every process the run started
is stopped all the same, and what the CLI prints says what happened — a kit error naming the folder, the run
stopped by the kit — never that the server "had exited by itself", never a traceback."""

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, processes_using

pytestmark = pytest.mark.slow


def start_and_wait_for_watching(small_params, out: Path, *options: str) -> tuple[subprocess.Popen, Path]:
    """A batch on the simulated host, and the status.json of its first run once that one watches."""
    path = small_params(pace=3.0, timeout=120)  # a slow start: the run still watches when the test acts
    proc = subprocess.Popen([*LAUNCHLAB, "run", "--no-html", str(path), "--out", str(out), *options],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        for status in out.glob("*/*/runs/*/status.json"):
            try:
                if json.loads(status.read_text()).get("state") == "watching":
                    return proc, status
            except ValueError:
                pass  # being replaced
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"no run reached its watch: {proc.communicate()[1][-2000:]}")


def nothing_left(sim_root: Path) -> list[int]:
    deadline = time.monotonic() + 5
    while (left := processes_using(str(sim_root))) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def test_a_run_directory_deleted_while_a_run_watches_stops_the_batch_with_a_kit_error_naming_it(
        small_params, tmp_path, sim_root):
    proc, watching = start_and_wait_for_watching(small_params, tmp_path / "out")
    run_dir, run_id = watching.parent.parent.parent, watching.parent.name
    deadline = time.monotonic() + 10
    while run_dir.exists() and time.monotonic() < deadline:  # the run writes its files meanwhile: a file made
        shutil.rmtree(run_dir, ignore_errors=True)             # during the walk left a folder "not empty" once
    assert not run_dir.exists(), "the run directory could not be deleted"
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]  # a kit error
    assert "Traceback" not in err and "had exited by itself" not in err, err[-3000:]
    assert nothing_left(sim_root) == []  # its server and sampler stopped, and no further run started
    [line] = [ln for ln in err.splitlines() if f"] {run_id}  kit error:" in ln]
    assert f"the run directory {run_dir} was deleted" in line and "stopped by the kit" in line, line
    assert "02_mem_fraction-0.85_rep1" not in err, err[-3000:]  # the batch did not go on without its run directory
    assert "--resume" not in err, err[-3000:]  # there is nothing left to resume
    assert "`launchlab run " in err.splitlines()[-1], err[-3000:]  # what to do: start the batch again


def test_a_run_file_that_cannot_be_written_does_not_keep_the_run_from_being_cleaned_up_and_finished(
        small_params, tmp_path, sim_root):
    """processes.json turned into a folder while the run watches: the kit cannot rewrite it after the stop, and
    says so in the run's notes; the run's files are collected, its folder on the host removed, its status final.
    (The level whose server gets ready: the kit stops it, where the other level's server fails and exits.)"""
    proc, watching = start_and_wait_for_watching(small_params, tmp_path / "out", "--only", "mem_fraction=0.85")
    folder = watching.parent
    (folder / "processes.json").unlink()
    (folder / "processes.json" / "in-the-way").mkdir(parents=True)
    _, err = proc.communicate(timeout=300)
    assert "Traceback" not in err and "had exited by itself" not in err, err[-3000:]
    assert nothing_left(sim_root) == []
    record = json.loads((folder / "status.json").read_text())
    assert record["state"] == "done" and record["stopped_with"] == "TERM", (record, err[-3000:].splitlines())
    assert any("processes.json" in note for note in record["notes"]), record["notes"]
    assert (folder / "server.log").stat().st_size > 0 and (folder / "nvidia-smi.csv.gz").stat().st_size > 0
    assert not list((tmp_path / "hostwork").glob(f"*/*/{folder.name}")), "the run's folder was left on the host"
    assert f"] {folder.name}  " in err and "stopped by the kit" in err, err[-3000:]
