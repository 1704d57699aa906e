"""Issue 39, part 2 and 6: a run directory others can write to (a shared outputs/) is untrusted. Every file the kit
writes there goes to a private folder first and is renamed into place: a name someone linked to a file elsewhere
(`summary.ipynb`, `runs.parquet`, the old fixed temporary `.runs.parquet.tmp`, a run's `parsed.json`) is replaced,
never written through; two `launchlab report`s of one run directory both finish with whole files. Each test fails
on the code before (which wrote summary.ipynb through the link and the frames through `.NAME.tmp`)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import LAUNCHLAB, LAUNCHLAB_EXEC, ROOT
from launchlab import safefiles

EXAMPLE = ROOT / "examples/h200-transformers-kv/20261129-232709"  # small (1.3 MB), written by an older kit


def _copy(tmp_path: Path) -> Path:
    run_dir = tmp_path / "shared-outputs" / EXAMPLE.name
    shutil.copytree(EXAMPLE, run_dir)
    return run_dir


def test_replacing_renames_over_a_planted_link_and_leaves_its_target_alone(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("theirs")
    (tmp_path / "out").mkdir()
    target = tmp_path / "out" / "report.md"
    target.symlink_to(victim)
    with safefiles.replacing(target) as tmp:
        tmp.write_text("ours")
    assert victim.read_text() == "theirs" and not target.is_symlink() and target.read_text() == "ours"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.md"]  # no temporary left


def test_a_failed_write_leaves_the_old_file_and_no_temporary_and_a_notebook_is_kept_however_it_ends(tmp_path):
    target = tmp_path / "runs.parquet"
    target.write_text("old")
    with pytest.raises(RuntimeError), safefiles.replacing(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("disk gone")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["runs.parquet"]
    notebook = tmp_path / "summary.ipynb"
    with pytest.raises(RuntimeError), safefiles.replacing(notebook, keep_on_error=True) as tmp:
        tmp.write_text("executed up to the failing cell")
        raise RuntimeError("a cell failed")
    assert notebook.read_text() == "executed up to the failing cell"


@pytest.mark.slow
def test_report_never_writes_through_links_planted_in_a_shared_run_directory(tmp_path):
    run_dir = _copy(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    first_run = sorted((run_dir / "runs").iterdir())[0].name
    planted = ["summary.ipynb", "runs.parquet", "report.md", "verdict.json", ".runs.parquet.tmp",
               f"runs/{first_run}/parsed.json"]
    for i, name in enumerate(planted):
        victim = outside / f"victim-{i}"
        victim.write_text(f"someone else's file {i}")
        (run_dir / name).unlink(missing_ok=True)
        (run_dir / name).symlink_to(victim)
    res = subprocess.run([*LAUNCHLAB, "report", str(run_dir)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    for i, _ in enumerate(planted):
        assert (outside / f"victim-{i}").read_text() == f"someone else's file {i}"
    for name in planted:
        if name != ".runs.parquet.tmp":  # no longer a name the kit writes
            assert not (run_dir / name).is_symlink() and (run_dir / name).is_file(), name
    assert pd.read_parquet(run_dir / "runs.parquet")["run_id"].str.startswith("0").all()
    assert json.loads((run_dir / "summary.ipynb").read_text())["cells"]


@pytest.mark.slow
def test_two_reports_of_one_run_directory_both_finish_with_whole_files(tmp_path):
    run_dir = _copy(tmp_path)
    procs = [subprocess.Popen([*LAUNCHLAB, "report", "--no-html", str(run_dir)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
    assert len(pd.read_parquet(run_dir / "runs.parquet")) == 8
    assert json.loads((run_dir / "verdict.json").read_text())["outcome_factors"] == ["num_blocks"]
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith(".")]  # no temporary left behind


@pytest.mark.slow
def _report_rendering(tmp_path: Path, launchlab: list[str]) -> tuple[Path, int, Path, subprocess.Popen]:
    """`launchlab report` of a copy of the example, in a session of its own, once it renders the summary: (the run
    directory, its summary.html's mtime before, its $TMPDIR, the process). $TMPDIR is a folder of the test's: the
    summary kernel's folder (its connection file and sockets), what a killed process cannot remove, is kept out of
    the machine's /tmp."""
    run_dir = _copy(tmp_path)
    page = (run_dir / "summary.html").stat().st_mtime_ns
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([*launchlab, "report", str(run_dir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, "TMPDIR": str(tmp)})
    said = ""
    while "rendering the summary" not in said and proc.poll() is None:
        said += proc.stderr.readline()
    assert proc.poll() is None, said + proc.stderr.read()
    return run_dir, page, tmp, proc


def test_a_report_killed_with_sigkill_leaves_no_temporary_file_behind(tmp_path):
    """Issue 50 (round 4's, still open): `kill -9` of `launchlab report` while it renders the summary left its
    `.summary.ipynb.*` folder in the run directory. The summary is written as an unnamed file (O_TMPFILE), which has
    no name to leave until it is whole."""
    run_dir, page, tmp, proc = _report_rendering(tmp_path, LAUNCHLAB_EXEC)
    # the summary notebook is being executed: its kernel takes about a second to start, and the whole render of this
    # example about 3 s on an idle machine (it had finished by the old 3 s wait when nothing else ran)
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (run_dir / "summary.html").stat().st_mtime_ns == page  # killed before it rendered the page
    left = [p.name for p in run_dir.rglob(".*")]
    assert left == [], left
    # what a killed process cannot remove, the next kernel start of the user does: the killed report's kernel folder
    time.sleep(1)  # its kernel, watching its parent, ends within a second
    [stale] = [p.name for p in tmp.iterdir()]
    again = subprocess.run([*LAUNCHLAB_EXEC, "report", str(run_dir)], capture_output=True, text=True, timeout=300,
                           env={**os.environ, "TMPDIR": str(tmp)})
    assert again.returncode == 0, again.stderr[-2000:]
    assert stale.startswith("launchlab-kernel-") and list(tmp.iterdir()) == []


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_report_stopped_with_sigterm_or_sighup_stops_its_summary_kernel_and_leaves_nothing_behind(tmp_path, signum):
    """`kill PID` of `launchlab report` while the summary renders: as Ctrl-C does, the report stops its summary kernel,
    whose folder in $TMPDIR (its connection file and sockets) goes with it, and says why in the shell's exit status.
    Before, the signal's default action ended the process at once: the kernel ended by itself (it watches its
    parent), its folder stayed."""
    from conftest import processes_using

    run_dir, page, tmp, proc = _report_rendering(tmp_path, LAUNCHLAB)
    [kernel_folder] = list(tmp.iterdir())  # the summary kernel's, as it renders
    assert kernel_folder.name.startswith("launchlab-kernel-") and processes_using(str(tmp))
    os.kill(proc.pid, signum)  # the process only, as `kill PID` (and a closed terminal's SIGHUP to its leader)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, stderr[-2000:]
    assert f"launchlab: interrupted by {signal.Signals(signum).name}." in stderr and "Traceback" not in stderr
    assert list(tmp.iterdir()) == [] and processes_using(str(tmp)) == []
    assert (run_dir / "summary.html").stat().st_mtime_ns == page and [p.name for p in run_dir.rglob(".*")] == []
