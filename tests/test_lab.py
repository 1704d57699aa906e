"""`make lab`: JupyterLab on the notebooks, started the right way, and templates saved from it without outputs
(the real jupyter_server contents manager with the config `make lab` passes)."""

import json
import os
import subprocess

import nbformat
import pytest
from jupyter_server.services.contents.filemanager import FileContentsManager
from traitlets.config.loader import PyFileConfigLoader

from conftest import ROOT
from launchlab import nbcheck


def executed(source: str) -> dict:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(source, execution_count=3)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="run directory: /tmp/x\n")]
    nb.cells = [cell]
    return json.loads(nbformat.writes(nb))


@pytest.mark.filterwarnings("error::UserWarning")  # `make lab` printed "Overriding existing pre_save_hook" (issue 28)
def test_a_template_saved_from_lab_loses_its_outputs_and_a_copy_in_a_subfolder_keeps_them(tmp_path):
    """`make lab` serves the repository root: the templates are notebooks/*.ipynb; a copy in a sub-folder and an
    executed notebook under outputs/ are the user's own."""
    config = PyFileConfigLoader("jupyter_server_config.py", path=str(ROOT / "jupyter")).load_config()
    manager = FileContentsManager(root_dir=str(tmp_path), config=config)
    for folder in ("notebooks/mine", "outputs/demo"):
        (tmp_path / folder).mkdir(parents=True)
    for path in ("notebooks/run_variant.ipynb", "notebooks/mine/copy.ipynb", "outputs/demo/summary.ipynb"):
        manager.save({"type": "notebook", "format": "json", "content": executed("print(1)")}, path)
    assert nbcheck.dirty_cells(tmp_path / "notebooks" / "run_variant.ipynb") == []
    assert nbcheck.dirty_cells(tmp_path / "notebooks" / "mine" / "copy.ipynb") == [0]
    assert nbcheck.dirty_cells(tmp_path / "outputs" / "demo" / "summary.ipynb") == [0]


def test_make_lab_serves_the_repository_root_with_that_config_and_allows_root_only_for_root():
    """At the root, params/ and outputs/ are in the file browser next to notebooks/."""
    plan = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    line = plan.stdout.replace("\\\n", " ")
    assert "jupyter lab --notebook-dir=. --config=jupyter/jupyter_server_config.py" in line
    assert ("--allow-root" in line) == (os.geteuid() == 0)


def test_make_setup_says_what_it_is_doing_before_each_step_in_one_line_each_and_keeps_the_package_list_in_a_log():
    # the plan of the real recipe (-B: as on a fresh clone, whatever .venv holds here); running it for real needs
    # the package index, which tests do not reach (the newcomer check runs it)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}  # under `make test`
    plan = subprocess.run(["make", "--no-print-directory", "-n", "-B", "setup"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=env)
    assert plan.returncode == 0, plan.stderr
    lines = [line for line in plan.stdout.splitlines() if line.strip()]
    commands = [i for i, line in enumerate(lines) if not line.startswith("echo")]
    assert commands, plan.stdout
    for i in commands[:-1]:  # every step but the final `touch` is announced by the line before it
        if lines[i].startswith("touch"):
            continue
        assert lines[i - 1].startswith('echo "== '), f"step without a progress line before it: {lines[i]}"
    [install] = [line for line in lines if "pip install" in line and "-e" in line]
    # issue 67, 9: 144 installer lines before the demo's first; the list goes to a log, its tail where it fails
    assert install.startswith(".venv/bin/uv pip install") and "|| .venv/bin/pip install" in install, "pip where uv fails"
    assert " > .venv/install.log 2>&1 || " in install and " >> .venv/install.log 2>&1 || " in install
    assert "tail -n 30 .venv/install.log" in install and install.rstrip().endswith("exit 1; }")
    assert any("half a minute" in line for line in lines), "the long step says how long it takes"
    assert lines[-1].startswith('echo "== ') and "ready" in lines[-1] and ".venv/install.log" in lines[-1]
