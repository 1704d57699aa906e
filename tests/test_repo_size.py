"""The repository travels: a call to the GPU machine carries the working tree and one wheel part within 64 MiB, and
a user clones it. No tracked file over 1 MiB outside the allow-list below, the tracked tree under 10 MiB, and
scripts/server-wheels.sh computes the part size the tree leaves — from a checkout, from a copy that is not one —
or refuses, saying why, when the tree leaves too little (it once cut parts of 0 MiB)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

MIB = 2**20
FILE_LIMIT = 1 * MIB
TREE_LIMIT = 10 * MIB
# path → why it may be larger than FILE_LIMIT (none is today: the examples' GPU traces are kept gzip-compressed)
LARGE_FILES_ALLOWED: dict[str, str] = {}
SCRIPT = ROOT / "scripts" / "server-wheels.sh"


def tracked() -> dict[str, int]:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: there are no tracked files to measure")
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    sizes = {}
    for name in names.decode().split("\0"):
        if name and (ROOT / name).is_file() and not (ROOT / name).is_symlink():
            sizes[name] = (ROOT / name).stat().st_size
    return sizes


def large(sizes: dict[str, int]) -> list[str]:
    return sorted(f"{name} ({size / MIB:.1f} MiB)" for name, size in sizes.items()
                  if size > FILE_LIMIT and name not in LARGE_FILES_ALLOWED)


def test_no_tracked_file_is_over_1_mib_outside_the_allow_list():
    assert large(tracked()) == [], "compress it (GPU traces: .csv.gz) or add it to LARGE_FILES_ALLOWED with why"


def test_the_size_rule_catches_a_large_file_added():
    sizes = {**tracked(), "examples/new/runs/01/nvidia-smi.csv": 4 * MIB}
    assert large(sizes) == ["examples/new/runs/01/nvidia-smi.csv (4.0 MiB)"]


def test_the_tracked_tree_is_under_10_mib():
    total = sum(tracked().values())
    assert total < TREE_LIMIT, f"the tracked tree is {total / MIB:.1f} MiB"


def _part_size(cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PART_MIB"}
    return subprocess.run(["bash", str(SCRIPT), "--part-size"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=60)


def test_the_wheel_parts_get_at_least_40_mib_from_this_checkout():
    proc = _part_size(ROOT)
    assert proc.returncode == 0, proc.stderr
    assert int(proc.stdout) >= 40


@pytest.fixture
def copy_without_git(tmp_path) -> Path:
    """The tracked files copied into a folder that is not a git checkout (an unpacked archive)."""
    copy = tmp_path / "launchlab"
    for name in tracked():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, copy / name)
    (copy / ".venv").mkdir()  # what .gitignore keeps out of a checkout is not carried: not counted
    (copy / ".venv" / "big").write_bytes(b"\0" * 70 * MIB)
    return copy


def test_the_part_size_is_computed_in_a_copy_that_is_not_a_git_checkout(copy_without_git):
    proc = _part_size(copy_without_git)
    assert proc.returncode == 0, proc.stderr  # it exited 123 (git ls-files) before
    assert int(proc.stdout) >= 40  # the 70 MiB under .venv/ is not counted


def test_a_checkout_with_a_tracked_file_deleted_and_not_committed_gets_its_part_size(copy_without_git):
    subprocess.run(["git", "init", "-q"], cwd=copy_without_git, check=True)
    subprocess.run(["git", "add", "-A"], cwd=copy_without_git, check=True)  # tracked: in the index
    (copy_without_git / "README.md").unlink()  # what a user editing the checkout does before the commit
    proc = _part_size(copy_without_git)
    assert proc.returncode == 0, proc.stderr  # it exited 123, saying nothing: stat of the deleted file failed
    assert int(proc.stdout) >= 40


def test_a_tree_that_leaves_no_room_is_refused_with_why(copy_without_git):
    (copy_without_git / "capture.bin").write_bytes(b"\0" * 55 * MIB)  # a large file the user left in the tree
    proc = _part_size(copy_without_git)
    assert proc.returncode == 2 and proc.stdout == ""
    assert "leaves" in proc.stderr and "at least 16 are needed" in proc.stderr and "PART_MIB" in proc.stderr
    proc = subprocess.run(["bash", str(SCRIPT), "sglang"], cwd=copy_without_git, capture_output=True, text=True,
                          timeout=60)  # refused before anything is downloaded
    assert proc.returncode == 2 and not (copy_without_git / ".sglang").exists()
