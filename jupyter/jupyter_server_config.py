# The Jupyter server config `make lab` passes: the kit's notebooks are templates committed without outputs
# (`make test` checks it), so saving one from JupyterLab strips its outputs instead of dirtying the checkout.
# Notebooks in sub-folders (your own copies) keep theirs.
import warnings

from launchlab import nbcheck

c = get_config()  # noqa: F821 (the config loader provides it)
c.FileContentsManager.pre_save_hook = nbcheck.pre_save_hook
# traitlets validates a configured trait twice (at construction, then as the config is applied), and jupyter_server
# warns on the second that the hook "overrides" itself: it is the same hook, so that warning only is silenced
warnings.filterwarnings("ignore", message=r"Overriding existing pre_save_hook \(pre_save_hook\) with a new one "
                                          r"\(pre_save_hook\)")
