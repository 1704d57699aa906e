"""Which run directory summary.ipynb shows when it is given none (issue 41): the newest whose batch finished, said
with the newer ones it passed over and why; a run notebook's own one-run folder is no batch, and says so; a params
path the notebook cannot find says what to do."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT
from launchlab.errors import ParamsError, RunDirError
from launchlab.runner import batch, runview
from launchlab.store import finding, rundir

DEMO = ROOT / "params" / "demo.yaml"


def made(*, done: int, single_run: bool, at: float) -> rundir.RunDir:
    """A run directory of the demo's plan (as a run notebook makes one) with `done` runs finished, as a batch's
    (single_run=False) or one run notebook's, its manifest dated `at`."""
    directory = rundir.RunDir(batch.new_run_dir(DEMO))
    directory.update_manifest(single_run=single_run)
    for run_id in directory.manifest().run_ids[:done]:
        rundir.write_json(directory.run(run_id).status, {"run_id": run_id, "state": "done", "status": "failed"})
    os.utime(directory.manifest_file, (at, at))
    return directory


def test_a_run_notebook_s_own_run_directory_is_marked_as_one_run_not_a_batch(tmp_path, monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_OUTPUTS", str(tmp_path))
    assert rundir.RunDir(runview.ensure_run_dir(DEMO)).manifest().single_run is True


def test_the_summary_s_default_is_the_newest_finished_batch_and_it_names_the_newer_ones_it_passed_over(
        tmp_path, monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_OUTPUTS", str(tmp_path))
    finished = made(done=16, single_run=False, at=1_000)
    unfinished = made(done=3, single_run=False, at=2_000)
    alone = made(done=1, single_run=True, at=3_000)
    assert finding.latest(tmp_path).path == alone.path  # the newest of all is the one-run folder
    chosen = finding.newest_finished(tmp_path)
    assert chosen.finished and chosen.run_dir.path == finished.path
    name = f"{alone.path.parent.name}/"
    assert chosen.skipped == [
        f"{name}{alone.path.name}: one run of run_variant.ipynb (1 of 16 planned runs), not a batch",
        f"{name}{unfinished.path.name}: its batch did not finish (3 of 16 planned runs have a final status; "
        "`launchlab run PARAMS --resume RUN_DIR` finishes it)"]


def test_with_no_finished_batch_the_summary_s_default_is_the_newest_run_directory_and_why_it_is_none(
        tmp_path, monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_OUTPUTS", str(tmp_path))
    older = made(done=3, single_run=False, at=1_000)
    alone = made(done=1, single_run=True, at=2_000)
    chosen = finding.newest_finished(tmp_path)
    assert not chosen.finished and chosen.run_dir.path == alone.path
    assert chosen.why_not == "one run of run_variant.ipynb (1 of 16 planned runs), not a batch"
    assert [s.split(":")[0] for s in chosen.skipped] == [f"{older.path.parent.name}/{older.path.name}"]
    with pytest.raises(RunDirError, match="no run directory under"):
        finding.newest_finished(tmp_path / "empty")


def test_a_relative_params_path_the_notebook_cannot_find_says_it_is_the_notebook_s_folder_s(tmp_path, monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_OUTPUTS", str(tmp_path / "outputs"))
    monkeypatch.chdir(tmp_path)  # papermill without --cwd: the kernel runs where papermill was started
    with pytest.raises(ParamsError, match=r"relative to the notebook's folder: use `--cwd notebooks` \(papermill\) "
                                          "or an absolute path"):
        runview.ensure_run_dir("../params/demo.yaml")
    assert not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_papermill_without_cwd_ends_in_the_kit_s_message_not_a_traceback_of_the_kit(tmp_path):
    """A kit error in a notebook is shown as the CLI shows it (LaunchlabError._render_traceback_): the cell's
    error is its message alone, the last lines papermill prints."""
    env = {**os.environ, "LAUNCHLAB_OUTPUTS": str(tmp_path / "outputs")}
    proc = subprocess.run([sys.executable, "-m", "papermill", "notebooks/run_variant.ipynb", str(tmp_path / "run.ipynb"),
                           "-p", "experiment", "../params/demo.yaml"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1
    cell = proc.stderr.split('Exception encountered at "In [', 1)[1]
    assert "use `--cwd notebooks` (papermill) or an absolute path" in cell
    assert "File " not in cell and "launchlab/" not in cell, cell  # no frame of the kit's code
