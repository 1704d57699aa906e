"""Issue 39, part 3: run directories are untrusted input (a shared outputs/). Run ids that are paths or no strings,
JSON files of the wrong shape or field types end in one line naming the file and field (exit 1), never a traceback
and never a read or write outside the run directory; `launchlab ls` lists the readable ones and names the others.
Each case ended in a traceback, or read `/abs/path`, on the code before."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, ROOT

EXAMPLE = ROOT / "examples/h200-transformers-kv/20261129-232709"
RUN = "runs/01_batching-continuous.memory_percent-0.5.num_blocks-auto_rep1"


def _edit(path: Path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


def _ids(value):
    def change(data):
        data["run_ids"] = value
        return data
    return change


def _field(name, value):
    def change(data):
        data[name] = value
        return data
    return change


CASES = {  # name: (file, change, what the one line must say)
    "absolute-path": ("manifest.json", _ids(["{victim}"]), "must be a run id"),
    "dot-dot": ("manifest.json", _ids(["../x"]), "must be a run id"),
    "string": ("manifest.json", _ids("abc"), "`run_ids` must be a list of run ids"),
    "number": ("manifest.json", _ids([5]), "run id `5` must be a run id"),
    "null": ("manifest.json", _ids([None]), "run id `null` must be a run id"),
    "list-manifest": ("manifest.json", lambda d: [d], "holds a JSON list where the kit writes a JSON object"),
    "status-list": (f"{RUN}/status.json", lambda d: [], "status.json holds a JSON list"),
    "startup-text": (f"{RUN}/status.json", _field("startup_s", "abc"), "`startup_s` is 'abc'"),
    "provenance-list": (f"{RUN}/provenance.json", lambda d: [], "provenance.json holds a JSON list"),
    "startup-infinite": (f"{RUN}/status.json", _field("startup_s", float("inf")), "`startup_s` is 'inf'"),
}


@pytest.mark.slow
def test_crafted_run_directories_get_one_line_naming_the_file_and_ls_names_them(tmp_path):
    outputs, victim = tmp_path / "outputs" / "exp", tmp_path / "victim"
    victim.mkdir(parents=True)
    shutil.copytree(EXAMPLE, outputs / "good")
    for name, (file, change, said) in CASES.items():
        run_dir = outputs / name
        shutil.copytree(EXAMPLE, run_dir)
        _edit(run_dir / file, lambda d, c=change: json.loads(json.dumps(c(d)).replace("{victim}", str(victim))))
        res = subprocess.run([*LAUNCHLAB, "report", "--no-html", str(run_dir)], capture_output=True, text=True,
                             timeout=120)
        assert res.returncode == 1 and "Traceback" not in res.stderr, (name, res.stderr[-1500:])
        assert said in res.stderr and file.split("/")[-1] in res.stderr, (name, res.stderr)
    assert list(victim.iterdir()) == []  # nothing read as a run folder there, nothing written
    res = subprocess.run([*LAUNCHLAB, "ls", str(tmp_path / "outputs")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    lines = res.stdout.splitlines()
    assert any(line.startswith(str(outputs / "good")) and "8/8 runs" in line for line in lines), lines
    for name in ("absolute-path", "dot-dot", "string", "number", "null", "list-manifest"):
        assert any(line.startswith(f"{outputs / name}  UNREADABLE: ") for line in lines), (name, lines)


def test_json_nested_past_the_interpreters_depth_is_one_line_too(tmp_path):
    run_dir = tmp_path / "outputs" / "exp" / "deep"
    shutil.copytree(EXAMPLE, run_dir)
    manifest = run_dir / "manifest.json"
    manifest.write_text(manifest.read_text().rstrip()[:-1] + ', "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    res = subprocess.run([*LAUNCHLAB, "report", "--no-html", str(run_dir)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-1500:]
    assert "manifest.json is not valid JSON (maximum recursion depth exceeded" in res.stderr


@pytest.mark.slow
def test_ls_lists_past_a_fifo_a_folder_and_huge_files_without_reading_them_whole(tmp_path):
    """Issue 50: `launchlab ls` hung on a manifest.json that is a FIFO, ended in a traceback on one that is a folder,
    and read every record whole (a 300 MB verdict.json). Each record is now opened as a regular file within a
    limit (finding.LISTED_BYTES), and one that is not is named, the others still listed."""
    outputs = tmp_path / "outputs" / "exp"
    shutil.copytree(EXAMPLE, outputs / "good")
    for name in ("fifo", "folder", "huge"):
        shutil.copytree(EXAMPLE, outputs / name)
    (outputs / "fifo" / "manifest.json").unlink()
    os.mkfifo(outputs / "fifo" / "manifest.json")
    (outputs / "folder" / "manifest.json").unlink()
    (outputs / "folder" / "manifest.json").mkdir()
    with open(outputs / "huge" / "verdict.json", "r+b") as fh:
        fh.truncate(300 * 2**20)  # sparse: costs no disk, but reading it whole costs 300 MB
    res = subprocess.run([*LAUNCHLAB, "ls", str(tmp_path / "outputs")], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    assert any(line.startswith(str(outputs / "good")) and "8/8 runs" in line for line in lines), lines
    [huge] = [line for line in lines if line.startswith(str(outputs / "huge"))]
    assert "8/8 runs" in huge and "larger than the limit of 4 MiB" in huge, huge
    for name, what in (("fifo", "a FIFO (named pipe)"), ("folder", "a folder")):
        [line] = [line for line in lines if line.startswith(str(outputs / name))]
        assert line.startswith(f"{outputs / name}  UNREADABLE: ") and f"it is {what}, not a regular file" in line, line


@pytest.mark.slow
@pytest.mark.parametrize("command, place", [("report", f"{RUN}/provenance.json"), ("compare", "verdict.json")])
def test_a_folder_where_a_json_file_goes_is_one_line_naming_it(tmp_path, command, place, example_built):
    """Issue 50: `launchlab report` and `launchlab compare` ended in a traceback (IsADirectoryError) on a run
    directory holding a folder where the kit writes a JSON file."""
    run_dir = tmp_path / "outputs" / "exp" / "crafted"
    shutil.copytree(example_built(EXAMPLE), run_dir)  # its frames too: compare then reads as far as verdict.json
    (run_dir / place).unlink()
    (run_dir / place).mkdir()
    reference = example_built(EXAMPLE)
    args = ["report", "--no-html", str(run_dir)] if command == "report" else ["compare", str(reference), str(run_dir)]
    res = subprocess.run([*LAUNCHLAB, *args], capture_output=True, text=True, timeout=300)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert f"{place.split('/')[-1]} cannot be read: it is a folder, not a regular file" in res.stderr, res.stderr
