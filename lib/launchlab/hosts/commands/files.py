"""Commands that make and remove folders on a host (files themselves travel through the transport: sftp, a copy)."""

from __future__ import annotations

import shlex


def make_private_dir(path: str) -> str:
    """mkdir -p with every folder it creates (and the last one in any case) readable by its owner only."""
    q = shlex.quote(path)
    return f"(umask 077 && mkdir -p -- {q} && chmod 700 -- {q})"


def remove_tree(path: str) -> str:
    """Remove a folder and everything in it; `--` so that a path starting with '-' is never read as an option."""
    return f"rm -rf -- {shlex.quote(path)}"
