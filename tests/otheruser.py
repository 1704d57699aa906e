"""Another user of the machine, played for real: uid 65534 (nobody) — through `setpriv` for what that user runs, and
`os.lchown` for the links and files that user made. Only root can play them (the tests run as root, in CI too); a
test that needs them is skipped elsewhere.

`shared` is a folder every user can reach and make names in, as /tmp is (1777: under /tmp, not under pytest's 0700
tmp_path)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

OTHER_UID = 65534


def needs_root() -> None:
    if os.getuid() != 0:
        pytest.skip("playing another user needs root (os.chown, setpriv); the tests run as root in CI")


@pytest.fixture
def shared() -> Path:
    """A folder every user can reach and make names in (1777, this user's), removed after the test."""
    needs_root()
    folder = Path(tempfile.mkdtemp(prefix="launchlab-shared-", dir="/tmp"))
    os.chmod(folder, 0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def as_other(script: str) -> subprocess.CompletedProcess:
    """`script` run by bash as the other user (no groups of root's); it must succeed."""
    needs_root()
    done = subprocess.run(["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", "bash", "-c",
                           script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"as uid {OTHER_UID}: {script}\n{done.stderr}"
    return done


def plant_link(link: Path, target: str | Path) -> Path:
    """A symbolic link at `link` to `target`, made by the other user (as they would make it where they can write)."""
    needs_root()
    link.symlink_to(target)
    os.lchown(link, OTHER_UID, OTHER_UID)
    return link


def private_file(path: Path, text: str) -> Path:
    """A file of this user's that only they may read (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    os.chmod(path, 0o600)
    return path
