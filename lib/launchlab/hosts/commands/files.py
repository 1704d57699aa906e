"""Commands that make and remove folders on a host (files themselves travel through the transport: sftp, a copy)."""

from __future__ import annotations

import shlex

NOT_YOURS = 3  # own_folder's exit status when the folder is not the user's alone


def own_folder(path: str, what: str) -> str:
    """The host side of safefiles.own_folder: make the folder (0700) when missing, then exit NOT_YOURS with a line
    on stderr when it is a link, not a folder, another user's, or writable by group or others."""
    q = shlex.quote(path.rstrip("/") or "/")
    w = shlex.quote(what)
    return (f"(umask 077 && mkdir -p -- {q}) 2>/dev/null; "
            f"if [ -L {q} ] || [ ! -d {q} ]; then echo {w} {q} 'is a symbolic link or not a folder: the kit uses "
            f"only a folder of your own there' >&2; exit {NOT_YOURS}; fi; "
            f"if [ ! -O {q} ]; then echo {w} {q} \"belongs to $(stat -c %U -- {q}), not to you ($(id -un)): another "
            f"user made it first and could plant files in it; the kit will not use it\" >&2; exit {NOT_YOURS}; fi; "
            f"case $(stat -c %A -- {q}) in ?????w????|????????w?) echo {w} {q} \"is writable by other users "
            f"($(stat -c %A -- {q})): chmod go-w it\" >&2; exit {NOT_YOURS};; esac")


def make_private_dir(path: str, inside: str | None = None) -> str:
    """mkdir -p with every folder it creates (and the last one in any case) readable by its owner only; with
    `inside` (the host's work folder), only once that folder is found to be the user's alone (own_folder)."""
    q = shlex.quote(path)
    made = f"(umask 077 && mkdir -p -- {q} && chmod 700 -- {q})"
    return f"{{ {own_folder(inside, 'the work folder')}; }} && {made}" if inside else made


def remove_tree(path: str) -> str:
    """Remove a folder and everything in it; `--` so that a path starting with '-' is never read as an option."""
    return f"rm -rf -- {shlex.quote(path)}"
