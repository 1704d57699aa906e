"""The README's papermill pair as a user types it: each notebook says on the terminal which run directory it wrote or
read, and `launchlab ls` points the one-run folder it leaves at the command that runs the rest."""

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import LAUNCHLAB, ROOT

PAPERMILL = str(Path(sys.executable).parent / "papermill")


def papermill(*args: str) -> subprocess.CompletedProcess:
    # as from a user's shell: ipykernel leaves a kernel's output descriptors alone where it sees pytest's variable
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    return subprocess.run([PAPERMILL, *args, "--cwd", "notebooks"], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env=env)


def stream_texts(notebook: Path) -> str:
    cells = json.loads(notebook.read_text())["cells"]
    return "".join("".join(o.get("text", "")) for c in cells for o in c.get("outputs", []))


@pytest.mark.slow
def test_the_pair_prints_its_run_directory_and_ls_points_at_resume(tmp_path, sim_root):
    outputs = tmp_path / "outputs"
    run = papermill("notebooks/run_variant.ipynb", str(tmp_path / "run.ipynb"), "-p", "experiment",
                    "../params/demo.yaml")
    assert run.returncode == 0, run.stderr[-3000:]
    [run_dir] = [p.parent for p in outputs.glob("*/*/manifest.json")]
    repetitions = yaml.safe_load((ROOT / "params/demo.yaml").read_text())["repetitions"]
    planned = 4 * repetitions  # the demo's 2 × 2 variants
    # the plan it was made with, which --resume must be given again
    resume = f"launchlab run {ROOT / 'params/demo.yaml'} --resume {run_dir} --repetitions {repetitions}"
    said = [line for line in run.stderr.replace("\r", "\n").splitlines() if line.startswith("run_variant.ipynb:")]
    assert said == [f"run_variant.ipynb: run directory {run_dir} (1 of its {planned} planned runs; `{resume}` runs the rest)"]
    # the notebook says it once, in its own output: the terminal's line is not copied into it
    assert stream_texts(tmp_path / "run.ipynb").count(str(run_dir)) == 2  # "run directory: …" and "run … written to …"
    assert "run_variant.ipynb:" not in stream_texts(tmp_path / "run.ipynb")
    # run alone, the notebook's run is a batch of its own, "-": what `launchlab run --resume` then changes is named as
    # changed at the resume only when every run names the batch that ran it (confounds.at_the_resume)
    [provenance] = run_dir.glob("runs/*/provenance.json")
    assert json.loads(provenance.read_text())["batch"] == "-"
    summary = papermill("notebooks/summary.ipynb", str(tmp_path / "summary.ipynb"))
    assert summary.returncode == 0, summary.stderr[-3000:]
    assert (f"summary.ipynb: run directory {run_dir} (no batch under it finished: the newest of all)"
            in summary.stderr.replace("\r", "\n").splitlines()), summary.stderr[-2000:]
    listed = subprocess.run([*LAUNCHLAB, "ls", str(outputs)], capture_output=True, text=True, timeout=120)
    [line] = listed.stdout.splitlines()
    assert f"unfinished: 1 of {planned} planned runs ended (one run of run_variant.ipynb)" in line
    assert "launchlab report" not in line
    assert line.endswith(f"; next: {resume}"), line
    assert shlex.split(line.split("; next: ")[1])[:5] == ["launchlab", "run", str(ROOT / "params/demo.yaml"),
                                                          "--resume", str(run_dir)]
