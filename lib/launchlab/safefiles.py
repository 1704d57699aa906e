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
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

from launchlab.errors import NotYours


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


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def own_folder(path: Path, what: str) -> Path:
    """`path`, a folder of this user's alone: made (0700) when missing, else used only when it is a folder, not a
    link, owned by this user and writable by no one else — NotYours naming it and its owner otherwise. For the
    kit's folders under a shared temp directory: another user who made the name first would see, and could
    plant, what the kit puts there (a Python package in a server's working folder, a link where a secret goes)."""
    path = Path(path)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700, parents=True)
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise NotYours(f"{what} {path} cannot be used: {exc.strerror}") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a folder"
        raise NotYours(f"{what} {path} is {kind} (owned by {_user(st.st_uid)}): the kit uses only a folder of "
                       "your own there; remove it if it is yours, or point the kit elsewhere")
    if st.st_uid != os.getuid():
        raise NotYours(f"{what} {path} belongs to {_user(st.st_uid)}, not to you ({_user(os.getuid())}): another "
                       "user made it first and could plant files in it; the kit will not use it. Point the kit to "
                       "a folder of your own")
    if st.st_mode & 0o022:
        raise NotYours(f"{what} {path} is writable by other users (mode {stat.filemode(st.st_mode)}): "
                       f"`chmod go-w {path}` or point the kit to a folder of your own")
    return path
