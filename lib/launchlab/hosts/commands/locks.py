"""Commands of the host locks (locks.py): one file per GPU, created with `set -C` so that only one writer can
make it; taking over a stale one, refreshing, releasing and listing them."""

from __future__ import annotations

import shlex


def _lock_read(path: str) -> str:
    """The lock file, then its mtime and the host's clock (epoch seconds), each on its own line."""
    q = shlex.quote(path)
    return f"cat {q} 2>/dev/null; echo; stat -c %Y {q} 2>/dev/null || echo 0; date +%s"


def lock_take(path: str, owner_json: str, stale_s: int) -> str:
    """Create the lock file or, when it exists, print HELD and what `_lock_read` prints."""
    folder = shlex.quote(path.rsplit("/", 1)[0])
    return (f"mkdir -p {folder} 2>/dev/null; chmod 1777 {folder} 2>/dev/null; "
            f"if (set -C; printf '%s\\n' {shlex.quote(owner_json)} > {shlex.quote(path)}) 2>/dev/null; "
            f"then echo ACQUIRED; else echo HELD; {_lock_read(path)}; fi")


def lock_take_over(path: str, owner_json: str, stale_owner: str | None, stale_s: int) -> str:
    """Replace a stale lock: one taker at a time (a guard folder), and only if the file still names the stale
    owner (or is still older than stale_s seconds when it could not be read)."""
    q, guard = shlex.quote(path), shlex.quote(path + ".takeover")
    still = (f"grep -qF {shlex.quote(stale_owner)} {q}" if stale_owner else
             f"[ $(( $(date +%s) - $(stat -c %Y {q} 2>/dev/null || echo 0) )) -gt {int(stale_s)} ]")
    return (f"mkdir {guard} 2>/dev/null || {{ echo BUSY; exit 0; }}; "
            f"if {still}; then rm -f {q}; fi; "
            f"if (set -C; printf '%s\\n' {shlex.quote(owner_json)} > {q}) 2>/dev/null; then echo ACQUIRED; "
            f"else echo HELD; fi; rmdir {guard}")


def lock_touch(path: str, batch: str) -> str:
    q = shlex.quote(path)
    return f"grep -qF {shlex.quote(batch)} {q} 2>/dev/null && touch {q}; true"


def lock_release(path: str, batch: str) -> str:
    """Remove the lock file only if it is still this batch's."""
    q = shlex.quote(path)
    return f"grep -qF {shlex.quote(batch)} {q} 2>/dev/null && rm -f {q}; true"


def lock_list(folder: str) -> str:
    """For every lock file in the folder: its name, then `_lock_read`, then a record separator (\\x1e)."""
    q = shlex.quote(folder)
    return (f"for f in {q}/*.lock; do [ -f \"$f\" ] || continue; n=${{f##*/}}; echo \"${{n%.lock}}\"; "
            f"cat \"$f\" 2>/dev/null; echo; stat -c %Y \"$f\" 2>/dev/null || echo 0; date +%s; "
            "printf '\\036'; done")
