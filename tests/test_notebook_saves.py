"""A notebook saved from JupyterLab changes nothing the kit compares: a template saved from `make lab` without a
change of code is written byte for byte as committed (the save hook), and a notebook of the server's package
rewritten during a batch (indentation, metadata, outputs) does not make the runs after it "modified files" —
only a change of its code does."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from jupyter_server.services.contents.filemanager import FileContentsManager
from traitlets.config.loader import PyFileConfigLoader

from conftest import LAUNCHLAB, ROOT, write_params
from launchlab import nbcheck

TEMPLATES = ("run_variant.ipynb", "summary.ipynb")


def lab_contents(root: Path) -> FileContentsManager:
    """Jupyter's own contents manager with the config `make lab` passes, serving root."""
    config = PyFileConfigLoader("jupyter_server_config.py", path=str(ROOT / "jupyter")).load_config()
    return FileContentsManager(root_dir=str(root), config=config)


def worked_in(model: dict) -> dict:
    """The notebook as Lab sends it back after a session of work: outputs and execution counts, the kernel's
    full language_info, per-cell timing and collapsed outputs — and not a character of code changed."""
    nb = model["content"]
    nb["metadata"]["language_info"] = {"name": "python", "version": "3.11.9", "mimetype": "text/x-python",
                                       "file_extension": ".py", "codemirror_mode": {"name": "ipython", "version": 3}}
    for n, cell in enumerate(nb["cells"]):
        cell["metadata"]["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00.000Z"}
        if cell["cell_type"] == "code":
            cell["metadata"]["collapsed"] = True
            cell["execution_count"] = n + 1
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "run directory: /tmp/x\n"}]
    return model


def test_a_template_saved_from_lab_without_a_change_of_code_is_byte_identical_to_the_committed_file(tmp_path):
    manager = lab_contents(tmp_path)
    for name in TEMPLATES:
        shutil.copy(ROOT / "notebooks" / name, tmp_path / name)
        manager.save(worked_in(manager.get(name, content=True)), name)
        assert (tmp_path / name).read_bytes() == (ROOT / "notebooks" / name).read_bytes(), name
    assert nbcheck.main([str(ROOT / "notebooks")]) == 0  # the committed files are in that format


def test_a_template_saved_from_lab_with_a_change_of_code_keeps_the_change(tmp_path):
    manager = lab_contents(tmp_path)
    shutil.copy(ROOT / "notebooks" / "summary.ipynb", tmp_path / "summary.ipynb")
    model = worked_in(manager.get("summary.ipynb", content=True))
    model["content"]["cells"][1]["source"] += "\nprint('mine')"
    manager.save(model, "summary.ipynb")
    saved = json.loads((tmp_path / "summary.ipynb").read_text())
    assert saved["cells"][1]["source"][-1] == "print('mine')"
    assert nbcheck.dirty_cells(tmp_path / "summary.ipynb") == [] and nbcheck.committed_format(tmp_path / "summary.ipynb")


# A server package of its own in a git checkout (an editable install, as `make setup` makes of launchlab): it runs
# the simulated SGLang server and carries a notebook, so a batch's integrity check looks at that notebook.
WRAPPER = {
    "labwrap/__init__.py": "",
    "labwrap/__main__.py": "import runpy\n\nrunpy.run_module('launchlab.sim.sglang_server', run_name='__main__')\n",
    "labwrap-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: labwrap\nVersion: 0.1\n",
    "labwrap-0.1.dist-info/RECORD": "labwrap/__init__.py,,\nlabwrap/__main__.py,,\n",
}

DESIGN = """\
experiment: saved
hosts:
  box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: 0.3, workdir: {workdir}}}
server:
  kind: sglang
  command: [python3, -m, labwrap, --tp, "2", --host, 127.0.0.1, --port, "{{port}}"]
  ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 5
factors:
  mem_fraction:
    "0.55": {{flags: {{--mem-fraction-static: "0.55"}}}}
    "0.85": {{flags: {{--mem-fraction-static: "0.85"}}}}
baseline: {{mem_fraction: "0.85"}}
repetitions: 1
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


@pytest.fixture
def checkout(tmp_path, monkeypatch) -> Path:
    """labwrap committed in a git checkout of its own, importable by the batch's commands (PYTHONPATH)."""
    root = tmp_path / "checkout"
    for name, text in WRAPPER.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "labwrap/templates").mkdir()
    shutil.copy(ROOT / "notebooks/run_variant.ipynb", root / "labwrap/templates/run_variant.ipynb")
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "labwrap"]):
        subprocess.run([*git, *args], check=True)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    return root


def batch_with_an_edit(tmp_path: Path, edit) -> dict:
    """The two-run batch, with edit() applied once the first run's server is being watched (its provenance is
    recorded by then, the second run's not yet); the verdict."""
    path = write_params(tmp_path, DESIGN.format(workdir=tmp_path / "hostwork"))
    out = tmp_path / "out"
    proc = subprocess.Popen([*LAUNCHLAB, "run", "--no-html", str(path), "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        status = next(out.glob("*/*/runs/01_*/status.json"), None)
        try:
            if status is not None and json.loads(status.read_text()).get("state") == "watching":
                edit()
                break
        except ValueError:
            pass  # being replaced
        time.sleep(0.05)
    else:
        proc.kill()
        raise AssertionError(f"the first run never reached its watch: {proc.communicate()[1][-2000:]}")
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr[-2000:]
    return json.loads((Path(stdout.strip()) / "verdict.json").read_text())


@pytest.mark.slow
def test_a_notebook_of_the_server_package_reformatted_during_a_batch_is_not_a_modified_file(tmp_path, sim_root,
                                                                                            checkout):
    notebook = checkout / "labwrap/templates/run_variant.ipynb"

    def reformat():  # another writer's JSON: two-space indent, unsorted keys, outputs, Lab's metadata
        nb = json.loads(notebook.read_text())
        nb["metadata"]["language_info"]["version"] = "3.11.9"
        for cell in nb["cells"]:
            cell["metadata"]["execution"] = {"iopub.status.idle": "2026-01-01T00:00:01.000Z"}
            cell["source"] = "".join(cell["source"])
            if cell["cell_type"] == "code":
                cell["execution_count"], cell["outputs"] = 7, [{"output_type": "stream", "name": "stdout", "text": "x"}]
        notebook.write_text(json.dumps(nb, indent=2))

    verdict = batch_with_an_edit(tmp_path, reformat)
    assert subprocess.run(["git", "-C", str(checkout), "diff", "--quiet"]).returncode == 1  # the file did change
    assert [c for c in verdict["confounds"] if c["kind"] == "modified files"] == [], verdict["confounds"]
    assert verdict["controlled"] is True


@pytest.mark.slow
def test_a_notebook_of_the_server_package_whose_code_changed_during_a_batch_is_a_modified_file_of_the_later_runs(
        tmp_path, sim_root, checkout):
    notebook = checkout / "labwrap/templates/run_variant.ipynb"

    def change_code():
        nb = json.loads(notebook.read_text())
        nb["cells"][1]["source"].append("\nprint('changed')")
        notebook.write_text(json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n")

    verdict = batch_with_an_edit(tmp_path, change_code)
    modified = [c for c in verdict["confounds"] if c["kind"] == "modified files"]
    assert modified and all(c["runs"] == ["02_mem_fraction-0.85_rep1"] for c in modified), verdict["confounds"]
    assert any("templates/run_variant.ipynb" in c["detail"] for c in modified), modified
    assert verdict["controlled"] is False
