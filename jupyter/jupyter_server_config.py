# The Jupyter server config `make lab` passes: the kit's notebooks are templates committed without outputs
# (`make test` checks it), so saving one from JupyterLab strips its outputs instead of dirtying the checkout.
# Notebooks in sub-folders (your own copies) keep theirs.
from launchlab import nbcheck

c = get_config()  # noqa: F821 (the config loader provides it)
c.FileContentsManager.pre_save_hook = nbcheck.pre_save_hook
