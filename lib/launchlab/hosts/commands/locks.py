"""Commands of the host locks (locks.py): one file per GPU in a folder every user of the host can write (a shared
/tmp), so every name in it may have been planted by someone else; taking a lock, taking over a stale one,
refreshing, releasing and listing them.

The rule of safefiles.py holds here too, in the shell: no link is followed and nothing is read whole.
- The folder is used only when it is a real folder (not a link) that others cannot write unless it has the sticky
  bit; the kit sets a mode (1777) only on a folder it has just made, never on one it found.
- A lock is taken by hard-linking a complete file of the kit's own (made under a fresh name) to the lock's name:
  link(2) fails on any name that exists — a link to /dev/null, a folder, a FIFO — and never follows it (`set -C`
  did: it writes through a link to a device, so two batches both "took" one GPU).
- A lock is read as at most LOCK_BYTES of a regular file opened without following a link (dd iflag=nofollow),
  after what the name is (`stat -c %F:%U`), so a planted name is said as what it is.
"""

from __future__ import annotations

import shlex

LOCK_BYTES = 4096  # an owner record is ~300 bytes; what is past this is not read
UNUSABLE = "UNUSABLE"


def _folder_check(folder: str) -> str:
    """Make the folder (1777) when it is missing; print UNUSABLE and why, and end, when it cannot be trusted."""
    q = shlex.quote(folder)
    parent = shlex.quote(folder.rsplit("/", 1)[0] or "/")
    return (f"d={q}; if [ ! -e \"$d\" ] && [ ! -L \"$d\" ]; then mkdir -p {parent} 2>/dev/null; "
            "mkdir -m 1777 \"$d\" 2>/dev/null; fi; "
            f"if [ -L \"$d\" ]; then echo \"{UNUSABLE} is a symbolic link (made by $(stat -c %U -- \"$d\"))\"; exit 0; "
            f"elif [ ! -d \"$d\" ]; then echo \"{UNUSABLE} is not a folder ($(stat -c %F -- \"$d\" 2>/dev/null))\"; "
            "exit 0; fi; "
            "case $(stat -c %A -- \"$d\") in ?????w*|????????w*) [ -k \"$d\" ] || { "
            f"echo \"{UNUSABLE} is writable by other users without the sticky bit ($(stat -c %A -- \"$d\"))\"; "
            "exit 0; };; esac")


def _read(q: str) -> str:
    """What the name (`q`, a shell word) is (`%F:%U`: regular file, symbolic link, …, and its owner), its mtime,
    the host's clock (epoch seconds), each on its own line, then at most LOCK_BYTES of it when it is a regular file
    (no link followed; record separators and NULs dropped: a crafted file cannot forge another entry of a listing)."""
    return (f"stat -c %F:%U -- {q} 2>/dev/null || echo missing:; stat -c %Y -- {q} 2>/dev/null || echo 0; date +%s; "
            f"if [ -f {q} ] && [ ! -L {q} ]; then dd if={q} bs={LOCK_BYTES} count=1 iflag=nofollow status=none "
            "2>/dev/null | tr -d '\\036\\000'; fi")


def _is_ours(path: str, batch: str) -> str:
    """True (status 0) when the name is a regular file, not a link, whose first LOCK_BYTES name the batch."""
    q = shlex.quote(path)
    return (f"[ -f {q} ] && [ ! -L {q} ] && dd if={q} bs={LOCK_BYTES} count=1 iflag=nofollow status=none 2>/dev/null "
            f"| grep -qF {shlex.quote(batch)}")


def _link_new(path: str, owner_json: str) -> str:
    """Put a complete lock file at `path` unless some name is there: ACQUIRED or HELD. The file is written first
    under a fresh name (noclobber: O_EXCL, so never through a name someone made first; 0644, for other users to
    read who holds the GPU), then hard-linked to `path`."""
    q = shlex.quote(path)
    t = shlex.quote(path.rsplit("/", 1)[0] + "/.take.") + "$$.$(date +%s%N)"
    return (f"t={t}; (umask 022; set -C; printf '%s\\n' {shlex.quote(owner_json)} > \"$t\") 2>/dev/null || "
            f"{{ echo \"{UNUSABLE} cannot make a file in it\"; exit 0; }}; "
            f"if ln -T \"$t\" {q} 2>/dev/null; then rm -f -- \"$t\"; echo ACQUIRED; else rm -f -- \"$t\"; echo HELD; fi")


def lock_take(path: str, owner_json: str, stale_s: int) -> str:
    """Create the lock file or, when a name is there, print HELD and what `_read` prints; UNUSABLE and why when
    the folder cannot be trusted."""
    return (f"{_folder_check(path.rsplit('/', 1)[0])}; out=$({_link_new(path, owner_json)}); echo \"$out\"; "
            f"case $out in HELD) {_read(shlex.quote(path))};; esac")


def lock_take_over(path: str, owner_json: str, stale_owner: str | None, stale_s: int) -> str:
    """Replace a stale lock: one taker at a time (a guard folder), and only if the name still holds the stale
    owner's file (or is still older than stale_s seconds when it could not be read)."""
    q, guard = shlex.quote(path), shlex.quote(path + ".takeover")
    still = (_is_ours(path, stale_owner) if stale_owner else
             f"[ $(( $(date +%s) - $(stat -c %Y -- {q} 2>/dev/null || echo 0) )) -gt {int(stale_s)} ]")
    return (f"{_folder_check(path.rsplit('/', 1)[0])}; mkdir {guard} 2>/dev/null || {{ echo BUSY; exit 0; }}; "
            f"if {still}; then rm -f -- {q} 2>/dev/null; fi; {_link_new(path, owner_json)}; rmdir {guard}")


def lock_touch(path: str, batch: str) -> str:
    q = shlex.quote(path)
    return f"{_is_ours(path, batch)} && touch -h -- {q}; true"


def lock_release(path: str, batch: str) -> str:
    """Remove the lock file only if it is still this batch's."""
    q = shlex.quote(path)
    return f"{_is_ours(path, batch)} && rm -f -- {q}; true"


def lock_list(folder: str) -> str:
    """For every name ending in .lock in the folder (a planted link or FIFO too, said as what it is): its name, then
    `_read`, then a record separator (\\x1e). Nothing when the folder is a link or no folder."""
    q, each = shlex.quote(folder), _read('"$f"')
    return (f"[ -L {q} ] || [ ! -d {q} ] && exit 0; for f in {q}/*.lock; do [ -e \"$f\" ] || [ -L \"$f\" ] || continue; "
            f"n=${{f##*/}}; echo \"${{n%.lock}}\"; {each}; echo; printf '\\036'; done")
