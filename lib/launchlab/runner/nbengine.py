"""papermill's own engine (nbclient), writing the executed notebook when it starts and when it ends — not at the
start and the end of every cell.

papermill saves the whole notebook twice per cell, each time serialized and validated by nbformat again: for the
summary (41 cells, its outputs growing to a few hundred kB) that was 84 writes of up to the whole report, the
largest share of what rendering a report cost, and the run notebook wrote 26 times. Nobody reads those
intermediate saves: the kit has papermill write into an unnamed private file that becomes the notebook only when
execution ends, however it ends (notebooks.execute, safefiles.replacing). What is kept is what papermill keeps:
a save when execution starts (so a notebook exists whatever happens next), papermill's autosave during a long cell,
and the save when execution ends — in papermill's `finally`, so a dead kernel's or an interrupted notebook is
written with every output received, as before.
"""

from __future__ import annotations

from papermill.engines import NBClientEngine, NotebookExecutionManager, papermill_engines

NAME = "launchlab"


class _EndsSaved(NotebookExecutionManager):
    """A manager whose per-cell bookkeeping (start and end times, status) happens without a write."""

    def _unsaved(self, step, *args, **kwargs):
        path, self.output_path = self.output_path, None
        try:
            return step(*args, **kwargs)
        finally:
            self.output_path = path

    def cell_start(self, cell, cell_index=None, **kwargs):
        return self._unsaved(super().cell_start, cell, cell_index, **kwargs)

    def cell_complete(self, cell, cell_index=None, **kwargs):
        return self._unsaved(super().cell_complete, cell, cell_index, **kwargs)


class Engine(NBClientEngine):
    """NBClientEngine with `_EndsSaved` as its manager (papermill's Engine.execute_notebook, the manager swapped)."""

    @classmethod
    def execute_notebook(cls, nb, kernel_name, *, output_path=None, progress_bar=True, log_output=False,
                         autosave_cell_every=30, **kwargs):  # papermill passes all but the first two by name
        manager = _EndsSaved(nb, output_path=output_path, progress_bar=progress_bar, log_output=log_output,
                             autosave_cell_every=autosave_cell_every)
        manager.notebook_start()
        try:
            cls.execute_managed_notebook(manager, kernel_name, log_output=log_output, **kwargs)
        finally:
            manager.cleanup_pbar()
            manager.notebook_complete()
        return manager.nb


papermill_engines.register(NAME, Engine)
