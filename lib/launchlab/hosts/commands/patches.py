"""`patch` commands of patching.py: check, apply and revert one unified diff against the server's installed
package (`-p1` from the package root, i.e. site-packages). Forward and reverse are built each on its own:
`--forward` (skip what looks applied already) contradicts `--reverse`, so the revert never carries it."""

from __future__ import annotations

import shlex

# --batch: never ask; -r -: no .rej files; --no-backup-if-mismatch: no .orig files (an added file would show
# in the integrity check as a change the patch did not make)
_QUIET = ("--batch", "--no-backup-if-mismatch", "-r", "-")


def _patch(root: str, diff: str, *direction: str) -> str:
    return shlex.join(["patch", "-p1", *direction, *_QUIET, "-d", root, "-i", diff])


def patch_check(root: str, diff: str) -> str:
    """Exit 0 when the diff applies to the package under root; changes nothing."""
    return _patch(root, diff, "--forward", "--dry-run")


def patch_apply(root: str, diff: str) -> str:
    return _patch(root, diff, "--forward")


def patch_revert(root: str, diff: str) -> str:
    """Undo an applied diff."""
    return _patch(root, diff, "--reverse")
