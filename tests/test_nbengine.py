"""The kit's papermill engine (runner/nbengine.py) writes an executed notebook when it starts and when it ends, not
at each cell — and still writes it, with every output received, however it ends: a cell's error, a kernel that
dies mid-notebook."""

from __future__ import annotations

import nbformat
import papermill
import pytest
from papermill import engines

from launchlab.runner import nbengine

pytestmark = pytest.mark.slow  # real kernels


def _notebook(path, *cells: str):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.fixture
def writes(monkeypatch):
    counted = []
    real = engines.write_ipynb
    monkeypatch.setattr(engines, "write_ipynb", lambda nb, path: (counted.append(path), real(nb, path)))
    return counted


def test_a_notebook_is_written_at_its_start_and_end_with_every_cells_outputs_and_times(tmp_path, writes):
    source = _notebook(tmp_path / "in.ipynb", *[f"print({i})" for i in range(6)])
    out = tmp_path / "out.ipynb"
    papermill.execute_notebook(str(source), str(out), engine_name=nbengine.NAME, progress_bar=False)
    assert len(writes) == 2  # papermill's own engine: 2 per cell more (14 here)
    nb = nbformat.read(out, as_version=4)
    assert [c.outputs[0]["text"] for c in nb.cells] == [f"{i}\n" for i in range(6)]
    assert all(c.metadata.papermill["status"] == "completed" and c.metadata.papermill["duration"] is not None
               for c in nb.cells)


def test_a_failing_cell_leaves_the_notebook_written_up_to_the_error(tmp_path, writes):
    source = _notebook(tmp_path / "in.ipynb", "print('before')", "raise ValueError('the evidence')", "print('after')")
    out = tmp_path / "out.ipynb"
    with pytest.raises(papermill.PapermillExecutionError):
        papermill.execute_notebook(str(source), str(out), engine_name=nbengine.NAME, progress_bar=False)
    code = [c for c in nbformat.read(out, as_version=4).cells if c.cell_type == "code"]  # papermill adds a note
    assert code[0].outputs[0]["text"] == "before\n"
    assert code[1].metadata.papermill["status"] == "failed"
    assert "the evidence" in code[1].outputs[0]["evalue"]


def test_a_kernel_that_dies_mid_notebook_leaves_the_cells_before_it_written(tmp_path, writes):
    source = _notebook(tmp_path / "in.ipynb", "print('before')", "import os; os._exit(9)", "print('after')")
    out = tmp_path / "out.ipynb"
    with pytest.raises(Exception, match="(?i)dead|died"):
        papermill.execute_notebook(str(source), str(out), engine_name=nbengine.NAME, progress_bar=False)
    assert writes, "nothing written"
    nb = nbformat.read(out, as_version=4)
    assert nb.cells[0].outputs[0]["text"] == "before\n" and nb.cells[0].metadata.papermill["status"] == "completed"
