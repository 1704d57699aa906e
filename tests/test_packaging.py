"""The project's own files: dependencies listed alike, notebooks committed clean and thin."""

import json
import re
import tomllib

import yaml

from conftest import ROOT
from launchlab import nbcheck

DESIGN_CARD = {"jupyterlab", "papermill", "nbconvert", "ipykernel", "pandas", "pyarrow", "matplotlib", "fabric",
               "pydantic", "pyyaml", "regex",  # regex: params patterns searched with a timeout (logparse/patterns.py)
               "ahocorasick-rs",  # the log parsers' anchors searched at grep's speed (logparse/common.py, issue 12)
               "jsonschema",  # held below 4.25: its rfc3987-syntax costs ~3 s at every nbformat import (issue 22)
               "scipy"}  # the verdict's exact tests and intervals (issue 24)


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ \[]", requirement.strip(), maxsplit=1)[0].lower()


def test_environment_yml_and_pyproject_list_the_same_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip_names = {_name(r) for r in project["dependencies"]}
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda_names = {_name(d) for d in env["dependencies"] if isinstance(d, str)} - {"python", "pip"}
    assert pip_names == conda_names == DESIGN_CARD
    assert "conda-forge" in env["channels"]
    assert any(isinstance(d, dict) and "-e ." in d["pip"] for d in env["dependencies"])
    assert re.fullmatch(r"python=3\.\d+", next(d for d in env["dependencies"] if str(d).startswith("python")))


def test_committed_notebooks_carry_no_outputs():
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        assert nbcheck.dirty_cells(nb) == [], nb


def test_the_notebook_check_finds_outputs(tmp_path):
    nb = json.loads((ROOT / "notebooks/summary.ipynb").read_text())
    nb["cells"][1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "x"}]
    (tmp_path / "dirty.ipynb").write_text(json.dumps(nb))
    assert nbcheck.main([str(tmp_path)]) == 1


def test_notebooks_are_thin_a_parameters_cell_then_calls():
    for path in (ROOT / "notebooks").glob("*.ipynb"):
        cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        assert "parameters" in cells[0]["metadata"].get("tags", []), path
        for line in "".join(cells[0]["source"]).splitlines():
            # one typed parameter per line, with a plain default and what it means (papermill --help-notebook)
            assert re.fullmatch(r'\w+: (str = "[^"]*"|bool = (True|False)|int = \d+)  # .+', line), \
                f"{path}: parameters cell line {line!r}"
        for cell in cells:
            source = "".join(cell["source"])
            assert not re.search(r"^\s*(def |class |for |while )|import re\b", source, re.M), f"{path}: {source}"
            if cell is not cells[0]:  # the parameters cell is one declaration per line, however many
                assert len(source.splitlines()) <= 5, f"{path}: a cell longer than 5 lines"
