"""Files written where others can write too: a run directory may be shared (outputs/ on a team's disk), and whoever
else can write there is untrusted, so no write follows a name someone could have planted.

Every file is written in a fresh folder of this process's own (mkdtemp: a unique name, mode 0700, so no other user
can put a link in it) beside its target, then renamed onto the target — a rename replaces a symlink there, never
follows it — and two writers of one file (two `launchlab report`s of one run directory) each rename a whole file
of their own, never one half-written by the other.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

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


def size_text(n: int) -> str:
    """A size as people write it: 300 bytes, 256 KiB, 1.5 GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} bytes"


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def open_regular(path: str | Path, *, follow_symlinks: bool = True, max_bytes: int | None = None) -> BinaryIO:
    """`path` opened for reading when it is a regular file, else OSError whose strerror says what it is: a FIFO,
    device or socket is refused at once (opened without waiting for a writer, then looked at), a symbolic link
    when not follow_symlinks, a file larger than max_bytes. What is checked is what was opened: a name swapped
    after a check cannot slip another file in."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise OSError(errno.ELOOP, "it is a symbolic link", str(path)) from None
        raise
    try:
        st = os.fstat(fd)
        what = next((name for test, name in _KINDS if test(st.st_mode)), None)
        if what or not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"it is {what or 'not a regular file'}, not a regular file", str(path))
        if max_bytes is not None and st.st_size > max_bytes:
            raise OSError(errno.EFBIG, f"it is {size_text(st.st_size)}, larger than the limit of "
                                       f"{size_text(max_bytes)}", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
