"""Files read and written where others can write too (a shared outputs/, a colleague's run directory, a shared temp
directory): no path the kit opens follows a link another user made, and no write goes through a name someone could
have planted.

One resolver (`_locate`) opens every folder of a path by descriptor, each relative to the one before (openat with
O_NOFOLLOW): a symbolic link on the way is followed only when this user or root made it (the user's own
`outputs -> /data/outputs`), never when another user did (`runs -> /home/victim`, `server.log -> ~/.ssh/id_rsa`),
and a name swapped between two steps is refused, not followed. Reads (`open_regular`) open what it finds without
following a link there either, check it is a regular file within a size limit, and say what it is otherwise.

Writes (`replacing`, `create`) happen only in a folder of this user's own (`folder(..., mine=True)`): a run
directory someone swapped for one of their own, mid-batch, is refused, never written into. A whole file is written
as an unnamed file in its folder (O_TMPFILE: it has no name until it is complete, so a process killed with -9 leaves
nothing behind) and then named and renamed onto its target — a rename replaces a link there, never follows it — so
two writers of one file (two `launchlab report`s of one run directory) each put a whole file of their own. Where the
filesystem has no O_TMPFILE, a fresh private folder beside the target (mkdtemp, 0700) serves instead.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from launchlab.errors import NotYours

_DIR_FLAGS = os.O_DIRECTORY | os.O_CLOEXEC | getattr(os, "O_PATH", os.O_RDONLY)
_MAX_LINKS = 40  # as the kernel's own resolver: more hops than that is a loop
_TMPFILE = getattr(os, "O_TMPFILE", 0)
_UNNAMED: set[str] = set()  # the paths `replacing` handed out for unnamed files (/proc/self/fd/N): opened as they are
# folders the kit writes no link into (run directories, run folders: `seal`): below them no link is followed, whoever
# made it — a run directory unpacked from someone's tarball holds links of the reader's own making
_SEALED: set[tuple[str, ...]] = set()


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def _trusted(uid: int) -> bool:
    """Whose links the kit follows: this user's own, and root's (the system's: /var/run -> /run)."""
    return uid in (0, os.getuid())


def _parts(path: str | Path) -> list[str]:
    return [p for p in os.path.abspath(os.fspath(path)).split("/") if p and p != "."]


def seal(path: str | Path) -> None:
    """From now on, follow no link below `path` (as this process resolves it): a folder the kit never writes a link
    into — a run directory, a run's folder — holds none it made, so one there leads who knows where (a tarball's link
    to the reader's private key, a run folder that is a link out of the run directory), whoever made it."""
    _SEALED.add(tuple(_parts(os.path.realpath(os.fspath(path)))))


def _sealed(seen: list[str]) -> str | None:
    """The sealed folder `seen` (a resolved path, as parts) lies in or below, or None."""
    for base in _SEALED:
        if tuple(seen[:len(base)]) == base:
            return "/" + "/".join(base)
    return None


def _locate(path: str | Path, *, follow: bool = True) -> tuple[int, str]:
    """(a descriptor of the folder that holds `path`'s last name, that name): every folder on the way opened
    relative to the one before, never through a link another user made (nor through any link when not follow);
    the last name itself is resolved the same way where it is a link. OSError naming the link or what is not a
    folder otherwise. The caller closes the descriptor."""
    todo = _parts(path)
    if not todo:
        raise OSError(errno.EISDIR, "it is the root folder", os.fspath(path))
    fd, hops, seen = os.open("/", _DIR_FLAGS), 0, []
    try:
        while True:
            part = todo.pop(0)
            if part == "..":
                fd = _step(fd, "..")
                seen = seen[:-1]
                continue
            try:
                st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not todo:
                    return fd, part
                raise
            if stat.S_ISLNK(st.st_mode):
                _refuse_link(path, seen, part, st.st_uid, follow=follow)
                hops += 1
                if hops > _MAX_LINKS:
                    raise OSError(errno.ELOOP, "too many symbolic links", os.fspath(path))
                target = os.readlink(part, dir_fd=fd)
                if target.startswith("/"):
                    fd, seen = _step(fd, "/"), []
                todo[:0] = [p for p in target.split("/") if p and p != "."]
                continue
            if not todo:
                return fd, part
            fd = _step(fd, part)
            seen.append(part)
    except BaseException:
        os.close(fd)
        raise


def _refuse_link(path: str | Path, seen: list[str], part: str, uid: int, *, follow: bool) -> None:
    """OSError where the link `part` in `seen`, made by `uid`, is not to be followed (see _locate)."""
    where = "/" + "/".join([*seen, part])
    if (base := _sealed(seen)) is not None:
        raise OSError(errno.ELOOP, f"{where} is a symbolic link (made by {_user(uid)}) inside "
                                   f"{base}, where the kit writes none and follows none (it may lead "
                                   "anywhere, to a file of yours too): put the file or folder itself "
                                   "there", os.fspath(path))
    if not follow or not _trusted(uid):
        raise OSError(errno.ELOOP, f"{where} is a symbolic link (made by {_user(uid)}), which the "
                                   "kit does not follow (another user's link may lead anywhere): put "
                                   "the file or folder itself there", os.fspath(path))


def _step(fd: int, name: str) -> int:
    """The folder `name` in the folder `fd`, never through a link; `fd` is closed once the step is made (left open
    when it fails: the caller closes it)."""
    nfd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=None if name == "/" else fd)
    os.close(fd)
    return nfd


@contextlib.contextmanager
def folder(path: str | Path, *, create: bool = False, mine: bool = False, mode: int = 0o777) -> Iterator[int]:
    """A descriptor of the folder `path` (closed when the block ends), reached as `_locate` reaches names. create:
    missing folders are made (`mode`, less the umask). mine: it must be this user's, and a folder is made only
    where no one else can move it — in one of this user's or root's that others cannot write, or that has the
    sticky bit (/tmp) — NotYours naming the owner otherwise: the kit writes only into folders of its own, so a run
    directory someone swapped for theirs mid-batch is refused, never written into (nor is a folder made in it)."""
    try:
        fd, name = _locate(path)
    except FileNotFoundError:
        if not create:
            raise
        with folder(os.path.dirname(os.path.abspath(os.fspath(path))), create=True, mine=mine, mode=mode):
            pass
        fd, name = _locate(path)
    try:
        try:
            fd = _step(fd, name)
        except FileNotFoundError:
            if not create:
                raise
            if mine:
                _check_parent(fd, os.path.dirname(os.path.abspath(os.fspath(path))))
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, mode, dir_fd=fd)
            fd = _step(fd, name)
        if mine:
            _check_mine(fd, path, "the folder the kit writes in")
        yield fd
    finally:
        os.close(fd)


def _check_mine(fd: int, path: str | Path, what: str) -> None:
    st = os.fstat(fd)
    if st.st_uid != os.getuid():
        raise NotYours(f"{what}, {path}, belongs to {_user(st.st_uid)}, not to you ({_user(os.getuid())}): the kit "
                       "writes only into folders of your own (someone else may have made or swapped it). Use a "
                       "folder of your own (--out DIR), or copy the run directory and use the copy")


def _check_parent(fd: int, path: str) -> None:
    st = os.fstat(fd)
    if not _trusted(st.st_uid) or st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise NotYours(f"{path} belongs to {_user(st.st_uid)} (mode {stat.filemode(st.st_mode)}): a folder the kit "
                       "made in it could be moved or swapped by another user, so the kit makes none there. Use a "
                       "folder of your own (--out DIR), or copy the run directory and use the copy")


def make_folders(path: str | Path, mode: int = 0o777) -> Path:
    """`path` and any missing folder above it, made as `folder(create=True, mine=True)` does; the path."""
    with folder(path, create=True, mine=True, mode=mode):
        return Path(path)


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"))


def size_text(n: int) -> str:
    """A size as people write it: 300 bytes, 256 KiB, 1.5 GiB."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} bytes"


def open_regular(path: str | Path, *, follow_symlinks: bool = True, max_bytes: int | None = None) -> BinaryIO:
    """`path` opened for reading when it is a regular file, else OSError whose strerror says what it is: a FIFO,
    device or socket is refused at once (opened without waiting for a writer, then looked at), a folder, a
    symbolic link another user made anywhere on the way (any link when not follow_symlinks), a file larger than
    max_bytes. What is checked is what was opened: a name swapped after a check cannot slip another file in."""
    if os.fspath(path) in _UNNAMED:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    else:
        dfd, name = _locate(path, follow=follow_symlinks)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OSError(errno.ELOOP, "it is a symbolic link", os.fspath(path)) from None
            raise
        finally:
            os.close(dfd)
    try:
        st = os.fstat(fd)
        what = next((name for test, name in _KINDS if test(st.st_mode)), None)
        if what or not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, f"it is {what or 'not a regular file'}, not a regular file", os.fspath(path))
        if max_bytes is not None and st.st_size > max_bytes:
            raise OSError(errno.EFBIG, f"it is {size_text(st.st_size)}, larger than the limit of "
                                       f"{size_text(max_bytes)}", os.fspath(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | Path, *, max_bytes: int, follow_symlinks: bool = True) -> bytes:
    """A regular file's bytes, opened as open_regular does; OSError past max_bytes (also if it grew meanwhile)."""
    with open_regular(path, follow_symlinks=follow_symlinks, max_bytes=max_bytes) as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise OSError(errno.EFBIG, f"it is larger than the limit of {size_text(max_bytes)}", os.fspath(path))
    return data


def lstat(path: str | Path) -> os.stat_result | None:
    """What `path` is, not following a link at its end (and through no other user's link on the way); None when it
    is not there or cannot be reached so."""
    try:
        with folder(os.path.dirname(os.path.abspath(os.fspath(path)))) as fd:
            return os.stat(os.path.basename(os.fspath(path)), dir_fd=fd, follow_symlinks=False)
    except OSError:
        return None


def is_link(path: str | Path) -> bool:
    """Whether `path`'s own name is a symbolic link (the folders on the way reached as `_locate` reaches them; False
    where it cannot be reached so): what a reader that follows no link out of a folder refuses."""
    try:
        with folder(os.path.dirname(os.path.abspath(os.fspath(path)))) as fd:
            return stat.S_ISLNK(os.stat(os.path.basename(os.fspath(path)), dir_fd=fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def entries(path: str | Path) -> list[tuple[str, os.stat_result]]:
    """The names in a folder and what each is (links not followed), reached as `_locate` reaches names; [] when it
    is not a folder there."""
    try:
        with folder(path) as fd:
            listing = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
            with os.scandir(listing) as it:
                found = [(e.name, e.stat(follow_symlinks=False)) for e in it]
            os.close(listing)
            return found
    except OSError:
        return []


def create(path: str | Path, *, append: bool = False, mode: int = 0o644) -> BinaryIO:
    """`path` opened for writing (truncated, or appended to), in a folder of this user's own and never through a
    link at its name (a raw file the kit writes as it goes: a mirrored log). A path `replacing` handed out is
    opened as it is."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
    if os.fspath(path) in _UNNAMED:
        return os.fdopen(os.open(path, flags), "ab" if append else "wb")
    with folder(Path(path).parent, mine=True) as dfd:
        fd = os.open(Path(path).name, flags | os.O_NOFOLLOW, mode, dir_fd=dfd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "it is not a regular file", os.fspath(path))
    return os.fdopen(fd, "ab" if append else "wb")


@contextlib.contextmanager
def replacing(path: Path, *, mode: int = 0o644, keep_on_error: bool = False) -> Iterator[Path]:
    """A path to write `path`'s new content at: an unnamed file in `path`'s folder (which must be this user's),
    named and renamed onto `path` when the block ends (with `mode`), gone if it raises — unless keep_on_error, for
    what is worth keeping however it ends (an executed notebook whose cell failed). A process killed meanwhile
    leaves nothing. OSError from the folder or the rename propagates (NotYours: the folder is not this user's)."""
    path = Path(path)
    with folder(path.parent, mine=True) as dfd:
        try:
            fd = os.open(".", _TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=dfd) if _TMPFILE else -1
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT):
                raise
            fd = -1
        if fd < 0 or not os.path.isdir("/proc/self/fd"):
            if fd >= 0:
                os.close(fd)
            with _in_private_folder(path, dfd, mode=mode, keep_on_error=keep_on_error) as tmp:
                yield tmp
            return
        unnamed = f"/proc/self/fd/{fd}"
        _UNNAMED.add(unnamed)
        try:
            try:
                yield Path(unnamed)
            except BaseException:
                if keep_on_error and os.fstat(fd).st_size:
                    _publish(fd, dfd, path.name, mode)
                raise
            _publish(fd, dfd, path.name, mode)
        finally:
            _UNNAMED.discard(unnamed)
            os.close(fd)


def _publish(fd: int, dfd: int, name: str, mode: int) -> None:
    """The unnamed file `fd` given a temporary name in its folder, then renamed onto `name`."""
    os.fchmod(fd, mode)
    temporary = f".{name}.{secrets.token_hex(4)}.part"
    os.link(f"/proc/self/fd/{fd}", temporary, dst_dir_fd=dfd, follow_symlinks=True)
    try:
        os.replace(temporary, name, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dfd)
        raise


@contextlib.contextmanager
def _in_private_folder(path: Path, dfd: int, *, mode: int, keep_on_error: bool) -> Iterator[Path]:
    """replacing() where the filesystem has no unnamed files: a fresh private folder (0700) in the checked folder."""
    name = f".{path.name}.{secrets.token_hex(4)}"
    os.mkdir(name, 0o700, dir_fd=dfd)
    tmp = path.parent / name / path.name
    try:
        try:
            yield tmp
        except BaseException:
            if keep_on_error and (st := lstat(tmp)) is not None and stat.S_ISREG(st.st_mode):
                os.chmod(tmp, mode)
                os.replace(f"{name}/{path.name}", path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
            raise
        os.chmod(tmp, mode)
        os.replace(f"{name}/{path.name}", path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
    finally:
        shutil.rmtree(path.parent / name, ignore_errors=True)


def private_mode(*modes: int, mode: int = 0o644) -> int:
    """`mode` made no more readable than the most private of the inputs whose modes are given: what the kit writes
    from a file only its owner may read (an imported 0600 log) is for its owner alone too."""
    for m in modes:
        if not m & 0o040:
            mode &= ~0o040
        if not m & 0o004:
            mode &= ~0o004
    return mode


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
