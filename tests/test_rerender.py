"""Re-rendering a run directory with the same kit changes no byte (issue 49, point 5): a committed example copied
elsewhere renders exactly the files committed, and rendering it again changes none of the files it wrote."""

import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest

from conftest import LAUNCHLAB, ROOT
from launchlab.runner import reproducible

EXAMPLE = next((ROOT / "examples" / "h200-transformers-kv").glob("2*"))


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _committed(folder: Path) -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z", "."], cwd=folder, capture_output=True, check=True).stdout
    return [name for name in listed.decode().split("\0") if name]


def _report(folder: Path) -> None:
    subprocess.run([*LAUNCHLAB, "report", str(folder)], check=True, capture_output=True, timeout=300)


@pytest.mark.slow
def test_a_committed_example_re_rendered_elsewhere_twice_is_byte_identical(tmp_path):
    copy = tmp_path / EXAMPLE.name  # the same folder name: the report names its run directory
    shutil.copytree(EXAMPLE, copy)
    _report(copy)
    first = _files(copy)
    changed = [name for name in _committed(EXAMPLE) if first.get(name) != (EXAMPLE / name).read_bytes()]
    assert not changed, f"re-rendering the committed example changed {changed} (run `make examples` and commit)"
    _report(copy)
    second = _files(copy)
    assert second.keys() == first.keys()
    assert [name for name in first if first[name] != second[name]] == []


def test_a_settled_notebook_has_no_clock_no_random_id_and_no_address():
    nb = nbformat.v4.new_notebook()
    nb.metadata["papermill"] = {"start_time": "2026-12-05T07:42:25", "end_time": "x", "duration": 1.0,
                                "parameters": {"run_dir": "d"}}
    cell = nbformat.v4.new_code_cell("x", metadata={"papermill": {"duration": 0.02, "status": "completed"},
                                                    "execution": {"iopub.status.busy": "2026-12-05T07:42:27Z"},
                                                    "tags": ["injected-parameters"]})
    cell.outputs = [nbformat.v4.new_output("display_data", data={"text/plain": "<Styler at 0x7ffb4e6e8e10>"})]
    nb.cells = [cell]
    settled = reproducible.settle(nb)
    assert settled.metadata["papermill"] == {"parameters": {"run_dir": "d"}}
    assert settled.cells[0].metadata == {"papermill": {"status": "completed"}, "tags": ["injected-parameters"]}
    assert settled.cells[0].outputs[0]["data"]["text/plain"] == "<Styler>"
    again = nbformat.v4.new_code_cell("y", metadata={"tags": ["injected-parameters"]})
    assert reproducible.cell_id(0, again) == settled.cells[0].id  # the place and kind, not the path it injects
    nbformat.validate(settled)
