"""The live progress of one run in a notebook, and the line that says how a run ended: read from real files
(a real nvidia-smi capture of an H200, a real run folder) and, in the slow tests, shown by a real kernel."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import DATA, ROOT
from launchlab.runner import liveprogress
from launchlab.store.records import RunRecord

H200 = DATA / "h200-transformers-serve"


def record(**fields) -> RunRecord:
    return RunRecord("01_x_rep1", "x", 1, "box", {}, **fields)


def test_the_final_line_says_the_outcome_and_when_it_was_reached_before_how_the_run_was_stopped():
    assert liveprogress.outcome_line(record(status="ready", startup_s=6.3, stopped_with="TERM")) == \
        "ready at 6.3 s, stopped by the kit"
    assert liveprogress.outcome_line(record(status="degraded", startup_s=12.04, stopped_with="KILL")) == \
        "degraded at 12.0 s, killed by the kit (SIGTERM was not enough)"
    assert liveprogress.outcome_line(record(status="failed", failure_reason="kv_cache_no_memory",
                                            failure_phase="kv_cache", stopped_with="gone")) == \
        "failed (kv_cache_no_memory) in kv_cache, had exited by itself"


def test_the_newest_sample_of_each_gpu_is_read_from_a_csv_still_being_written(tmp_path):
    lines = (H200 / "trace-cb90.csv").read_text().splitlines(keepends=True)
    growing = tmp_path / "nvidia-smi.csv"
    # cut right after the fullest sample, as if the sampler were writing the next line now
    middle = 1 + max(range(1, len(lines)), key=lambda i: float(lines[i].split(", ")[3])) + 1
    growing.write_text("".join(lines[:middle]) + lines[middle][:20])  # the sampler is mid-line
    newest = {}
    for line in lines[1:middle]:
        cells = line.strip().split(", ")
        newest[int(cells[1])] = (float(cells[3]), float(cells[2]))
    assert liveprogress.latest_memory(growing) == [(i, *newest[i]) for i in sorted(newest)]
    assert any(used > 100_000 for _, used, _ in liveprogress.latest_memory(growing)), "mid-run: the KV cache is held"
    assert liveprogress.latest_memory(tmp_path / "absent.csv") == []


def test_the_display_escapes_what_the_log_says_and_names_the_peak_of_each_gpu():
    snap = liveprogress.Snapshot("01_x_rep1", state="watching", elapsed_s=3.25, phase="weights",
                                 gpus=[(0, 1024.0, 143771.0)], peaks={0: 73728.0},
                                 tail=["<script>alert(1)</script> Load weight end"])
    html = liveprogress.render(snap)
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "watching · log reached weights · 3.2 s" in html or "watching · log reached weights · 3.3 s" in html
    assert "GPU 0 1.0/140 GiB (peak 72.0)" in html


@pytest.mark.slow
def test_the_run_notebook_updates_one_progress_display_in_place_and_shows_its_gpu_trace(demo_env, tmp_path):
    """JupyterLab and papermill both get the progress as updates of one display (update_display_data with
    its display_id), not as a wall of lines: counted here on the messages of a real kernel."""
    _, env = demo_env
    updates: list[dict] = []

    class Counting(NotebookClient):
        def process_message(self, msg, cell, cell_index):
            if msg["msg_type"] == "update_display_data":
                updates.append(msg["content"])
            return super().process_message(msg, cell, cell_index)

    nb = nbformat.read(ROOT / "notebooks/run_variant.ipynb", as_version=4)
    saved = {k: os.environ.get(k) for k in ("LAUNCHLAB_OUTPUTS", "LAUNCHLAB_SIM_ROOT")}
    os.environ.update({k: env[k] for k in saved})
    try:
        Counting(nb, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(ROOT / "notebooks")}}
                 ).execute()
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    states = [re.search(r"</b>: ([^<]*)<br>", u["data"]["text/html"]).group(1) for u in updates]
    assert len({u["transient"]["display_id"] for u in updates}) == 1, "one display, updated in place"
    assert any("watching" in s for s in states), states
    assert any(re.search(r"log reached (dist_init|weights)", s) for s in states), states
    # the samples reach the display while the run goes; which values it catches is the scheduler's luck: the demo's
    # server holds its memory about a second before the kit stops it, and a make test of a fresh clone once saw no
    # update in that second (the values read mid-run and as shown, with their peak: the two tests above)
    assert any(re.search(r"GPU 0 \d+\.\d/96 GiB", u["data"]["text/html"]) for u in updates), \
        "the memory of the run's GPUs while it ran"
    assert states[-1].startswith("ready at") and "stopped by the kit" in states[-1], states[-1]
    main = next(c for c in nb.cells if "runview.run_variant(" in c.source)
    printed = "".join(o.get("text", "") for o in main.outputs if o.output_type == "stream")
    run_dir = Path(re.search(r"run directory: (\S+)", printed).group(1))
    assert (run_dir / "runs" / "01_custom_ar-off.mem_fraction-0.75_rep1" / "status.json").exists()
    assert any("image/png" in o.get("data", {}) for c in nb.cells for o in c.get("outputs", [])
               if "gpu_trace" in c.source), "the run's GPU trace"
    ranks = next(c for c in nb.cells if "rank_table" in c.source).outputs[0]["data"]["text/html"]
    assert "rank 0" in ranks and "rank 7" in ranks and "weights_mem_gib" in ranks


def _outputs(path: Path) -> list[dict]:
    return [o for c in json.loads(path.read_text())["cells"] for o in c.get("outputs", [])]


def _shown(outputs: list[dict]) -> str:
    return "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/markdown", ""))
                   + "".join(o.get("data", {}).get("text/plain", "")) for o in outputs)


@pytest.mark.slow
def test_the_papermill_commands_of_the_readme_run_as_written_and_end_in_the_demo_s_verdict_or_say_why_not(
        demo_env, demo_run, tmp_path):
    """The README's papermill block, run from a copy of the checkout's layout as a user types it: the run notebook
    names its run directory once, on no error stream; the summary, with no finished batch under outputs/, says so
    and that the one-run folder is no batch (never "interrupted"); with the demo's finished batch there too, it
    shows that batch's verdict and says it passed the newer one-run folder over."""
    _, env = demo_env
    block = re.search(r"```sh\n(papermill --help-notebook.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    commands = [line.split("  #")[0].strip() for line in block.splitlines() if line.startswith("papermill")]
    assert len(commands) == 3
    bin_dir = Path(sys.executable).parent
    outputs = Path(env["LAUNCHLAB_OUTPUTS"]) / "readme"
    env = {**env, "LAUNCHLAB_OUTPUTS": str(outputs), "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}"}
    done = []
    for command in commands:
        command = command.replace("outputs/", f"{tmp_path}/")
        proc = subprocess.run(command, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{command}\n{proc.stderr[-3000:]}"
        # issue 67, 9: the kernel's "running over TCP without encryption" notice before every notebook
        assert "without encryption" not in proc.stderr, proc.stderr[-2000:]
        done.append(proc)
    assert "experiment: str" in done[0].stdout and "run_dir: str" in done[0].stdout, "typed parameters"
    run = _outputs(tmp_path / "run.ipynb")
    [run_dir] = re.findall(r"run directory: (\S+)", _shown(run))  # once
    assert Path(run_dir).parent.parent == outputs
    assert not [o for o in run if o.get("name") == "stderr"], "nothing of the run notebook on its error stream"
    assert "ready at" in _shown(run)  # the first demo run, starting as the notebook's introduction says
    summary = _shown(_outputs(tmp_path / "summary.ipynb")).replace("\\_", "_")  # as Markdown renders it
    assert "1 of 16 planned runs finished" in summary and Path(run_dir).name in summary
    assert "one run of run_variant.ipynb, not a batch" in summary and "No finished batch" in summary
    assert "interrupted" not in summary

    # the demo's finished batch, older than the one-run folder: the summary's default is that batch
    batch, _ = demo_run
    shutil.copytree(batch, outputs / batch.parent.name / batch.name)
    os.utime(outputs / batch.parent.name / batch.name / "manifest.json", (0, 0))
    again = subprocess.run(commands[2].replace("outputs/", f"{tmp_path}/"), shell=True, cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    summary = _shown(_outputs(tmp_path / "summary.ipynb")).replace("\\_", "_")  # as Markdown renders it
    assert "16 of 16 planned runs finished" in summary and batch.name in summary
    assert "the newest run directory whose batch finished" in summary
    assert f"{Path(run_dir).name}: one run of run_variant.ipynb (1 of 16 planned runs), not a batch" in summary
    said = json.loads((batch / "verdict.json").read_text())
    assert said["outcome_factors"] == ["custom_ar", "mem_fraction"], (said["inconclusive_reasons"], said["warnings"][:6])
    assert "Inconclusive" not in summary and "**Decides the launch:** mem_fraction" in summary
