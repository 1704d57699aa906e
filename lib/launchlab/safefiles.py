"""Files written where others can write too: a run directory may be shared (outputs/ on a team's disk), and whoever
else can write there is untrusted, so no write follows a name someone could have planted.

Every file is written in a fresh folder of this process's own (mkdtemp: a unique name, mode 0700, so no other user
can put a link in it) beside its target, then renamed onto the target — a rename replaces a symlink there, never
follows it — and two writers of one file (two `launchlab report`s of one run directory) each rename a whole file
of their own, never one half-written by the other.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def replacing(path: Path, *, mode: int = 0o644, keep_on_error: bool = False) -> Iterator[Path]:
    """A path to write `path`'s new content at, in a private folder beside it; renamed onto `path` when the block
    ends (with `mode`), removed if it raises — unless keep_on_error, for what is worth keeping however it ends (an
    executed notebook whose cell failed). OSError from making the folder or the rename propagates."""
    path = Path(path)
    folder = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    tmp = folder / path.name
    try:
        try:
            yield tmp
        except BaseException:
            if keep_on_error and tmp.is_file() and not tmp.is_symlink():
                os.chmod(tmp, mode)
                os.replace(tmp, path)
            raise
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
