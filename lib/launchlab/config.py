"""Configuration read from the environment: every variable the kit honours, read here and nowhere else.

    LAUNCHLAB_OUTPUTS      root of run directories (default: the workspace's or checkout's outputs/, else ./outputs)
    LAUNCHLAB_NOTEBOOKS    folder of run_variant.ipynb and summary.ipynb (default: the package's templates/notebooks)
    LAUNCHLAB_SIM_ROOT     where simulated boxes live (default: $TMPDIR/launchlab-sim-<uid>)
    LAUNCHLAB_LOCK_DIR     the host locks' folder on real hosts (default: /tmp/launchlab-locks)
    LAUNCHLAB_SSH_CONFIG   an ssh_config file to read instead of ~/.ssh/config
    LAUNCHLAB_KNOWN_HOSTS  known_hosts files (os.pathsep-separated) instead of ~/.ssh/known_hosts and the system's
    LAUNCHLAB_REQUIRE_SLURM  1: the tests that need a real Slurm fail (with how to install it) instead of skipping

docs/getting-started.md ("Configuration") lists the same variables; a test keeps the two in step.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

VARIABLES = ("LAUNCHLAB_OUTPUTS", "LAUNCHLAB_NOTEBOOKS", "LAUNCHLAB_SIM_ROOT", "LAUNCHLAB_LOCK_DIR",
             "LAUNCHLAB_SSH_CONFIG", "LAUNCHLAB_KNOWN_HOSTS", "LAUNCHLAB_REQUIRE_SLURM")
DEFAULT_LOCK_DIR = "/tmp/launchlab-locks"


def _get(name: str) -> str | None:
    return os.environ.get(name) or None


def outputs_root() -> Path | None:
    value = _get("LAUNCHLAB_OUTPUTS")
    return Path(value) if value else None


def notebooks_dir() -> Path | None:
    value = _get("LAUNCHLAB_NOTEBOOKS")
    return Path(value) if value else None


def sim_root() -> Path:
    value = _get("LAUNCHLAB_SIM_ROOT")
    return Path(value) if value else Path(tempfile.gettempdir()) / f"launchlab-sim-{os.getuid()}"


def lock_dir() -> str:
    return _get("LAUNCHLAB_LOCK_DIR") or DEFAULT_LOCK_DIR


def ssh_config() -> str | None:
    return _get("LAUNCHLAB_SSH_CONFIG")


def known_hosts() -> list[Path] | None:
    value = _get("LAUNCHLAB_KNOWN_HOSTS")
    return [Path(p) for p in value.split(os.pathsep)] if value else None


def require_slurm() -> bool:
    """Whether the Slurm tests must run (CI): a missing slurmctld/slurmd/munge is then a failure, not a skip."""
    return _get("LAUNCHLAB_REQUIRE_SLURM") == "1"
