"""launchlab: controlled experiments on LLM inference-server launches."""

import importlib

__version__ = "0.1.0"

# The run and summary notebooks that run directories keep import these by their names before the layers became
# packages (`from launchlab import runview`); such a notebook must run again as it was saved.
_SAVED_NOTEBOOK_IMPORTS = {"runview": "launchlab.runner.runview", "report": "launchlab.reporting.report",
                           "batch": "launchlab.runner.batch", "lifecycle": "launchlab.run.lifecycle"}


def __getattr__(name: str):
    if name in _SAVED_NOTEBOOK_IMPORTS:
        return importlib.import_module(_SAVED_NOTEBOOK_IMPORTS[name])
    raise AttributeError(f"module 'launchlab' has no attribute {name!r}")
