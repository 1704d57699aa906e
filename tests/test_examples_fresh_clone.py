"""Issue 67, 1–2: the shipped examples as a new user meets them — in a fresh checkout, `launchlab report` of every
example writes exactly the committed files (nothing tracked changes), `launchlab compare` reads two examples without
a `report` first, and no run directory records a path of the machine that made it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, ROOT

EXAMPLES = sorted(p.parent for p in (ROOT / "examples").glob("*/2*/manifest.json"))


def fresh_checkout(tmp_path: Path) -> Path:
    """The tracked files as they stand, in a repository of their own: what `git clone` of a commit of them holds."""
    copy = tmp_path / "clone"
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, names.decode().split("\0")):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
        elif source.is_symlink():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(source), copy / name)
    for command in (["git", "init", "-q"], ["git", "add", "-A"],
                    ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "fresh"]):
        subprocess.run(command, cwd=copy, check=True, capture_output=True)
    return copy


@pytest.mark.slow
def test_every_example_rerendered_in_a_fresh_checkout_is_byte_identical_and_two_compare_without_a_report_first(tmp_path):
    copy = fresh_checkout(tmp_path)
    # compare first, before any report: it builds the derived frames it needs (never committed) from the raw files
    # the shipped before/after pair: the same SGLang search on the H200 and on the H100
    before = copy / "examples/h200-sglang-threshold/20261203-093428"
    after = copy / "examples/h100-sglang-threshold/20261207-101000"
    out = tmp_path / "compared"
    done = subprocess.run([*LAUNCHLAB, "compare", str(before), str(after), "--out", str(out)], cwd=copy,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "has no telemetry.parquet yet" not in done.stdout + done.stderr
    assert "Same question" in done.stdout
    assert "the minimum --mem-fraction-static that starts moved up, from (0.0025, 0.003] before to (0.005, " \
           "0.0055] after" in done.stdout
    assert "GPU model differs: NVIDIA H200: all 4 runs before; NVIDIA H100 80GB HBM3: all 4 runs after" in done.stdout
    assert "params " not in done.stdout.split("What differs outside the factors:")[1].split("Outcomes per")[0], \
        "a default an older kit left unwritten read as a difference of the params"
    assert json.loads((out / "compare.json").read_text())
    for example in EXAMPLES:
        folder = copy / example.relative_to(ROOT)
        rendered = subprocess.run([*LAUNCHLAB, "report", str(folder)], cwd=copy, capture_output=True, text=True,
                                  timeout=600)
        assert rendered.returncode == 0, f"{example.name}: {rendered.stderr[-2000:]}"
    changed = subprocess.run(["git", "status", "--porcelain"], cwd=copy, capture_output=True, text=True,
                             check=True).stdout
    assert changed == "", f"re-rendering the examples changed tracked files:\n{changed}"


def test_no_example_records_a_path_of_the_machine_that_made_it_and_the_unfinished_one_says_why():
    for example in EXAMPLES:
        manifest = json.loads((example / "manifest.json").read_text())
        params_file = manifest.get("params_file")
        assert params_file and not os.path.isabs(params_file), f"{example}: {params_file}"
        assert (example / params_file).resolve().is_file(), f"{example}: {params_file} is not beside it"
    listed = subprocess.run([*LAUNCHLAB, "ls", str(ROOT / "examples")], capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    for line in listed.stdout.splitlines():
        if "unfinished" in line:
            assert "(stopped: the GPU machine was taken back" in line, line
    assert "/work/" not in "".join(p.read_text() for e in EXAMPLES for p in (e / "report.md", e / "manifest.json"))


@pytest.mark.slow
def test_a_batch_records_its_params_relative_to_its_run_directory_and_what_stopped_it(small_params, tmp_path):
    """A new run directory names its params file from itself (it travels with the workspace), an interrupted batch
    says what stopped it, and a resumed one no longer does."""
    import signal
    import time

    out, params_file = tmp_path / "outputs", small_params(pace=1.5)  # phases of a second or more: SIGINT lands mid-plan
    proc = subprocess.Popen([*LAUNCHLAB, "run", str(params_file), "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    manifest = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and manifest is None:
        found = list(out.glob("*/*/manifest.json"))
        manifest = found[0] if found else None
        time.sleep(0.2)
    assert manifest is not None, "no run directory was made"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    recorded = json.loads(manifest.read_text())
    assert recorded["params_file"] == os.path.relpath(params_file.resolve(), manifest.parent.resolve())
    assert (recorded.get("stopped") or "").startswith("interrupted by"), recorded.get("stopped")
    listed = subprocess.run([*LAUNCHLAB, "ls", str(out)], capture_output=True, text=True, timeout=120)
    assert f"(stopped: {recorded['stopped']})" in listed.stdout
    again = subprocess.run([*LAUNCHLAB, "run", str(params_file), "--resume", str(manifest.parent)],
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert json.loads(manifest.read_text()).get("stopped") is None
