"""Provenance of a run: what the host and the server's interpreter were, collected before the launch.

Two commands per run, both on the host itself (built in hosts/commands/provenance.py): one shell script that
prints labelled sections (host name, kernel, OS, GPUs, driver and CUDA versions, `nvidia-smi topo -m`), and the
server's own interpreter asked for its Python version and installed packages. A section that fails (no
nvidia-smi, no Python in argv[0]) is recorded as missing, never as an error: provenance must not stop a run.
"""

from __future__ import annotations

import json
import posixpath
import re

from launchlab import smitext, telemetry
from launchlab.hosts import Host, commands


def server_package(argv: list[str] | tuple[str, ...]) -> str | None:
    """The top-level package a `python -m pkg.module` command runs (None for other commands)."""
    argv = list(argv)
    if "-m" in argv and argv.index("-m") + 1 < len(argv):
        return argv[argv.index("-m") + 1].split(".")[0]
    return None


def integrity(host: Host, argv: list[str] | tuple[str, ...]) -> dict | None:
    """The server package's installed files against its wheel RECORD, files added, its git state; None when the
    command does not start as `PYTHON -m PACKAGE`."""
    package = server_package(argv)
    if package is None or not _is_python(argv):
        return None
    res = host.run(commands.package_integrity(argv[0], package), timeout=300, check=False)
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"package": package, "error": (res.stderr or res.stdout).strip()[-500:]}


def host_env(host: Host, mask) -> dict[str, str]:
    """The environment a process started on the host inherits (before the run's env file), secrets masked."""
    res = host.run(commands.host_environment(), timeout=60, check=False)
    try:
        return mask(json.loads(res.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return {}


def _is_python(argv) -> bool:
    return bool(argv) and re.match(r"python(\d+(\.\d+)*)?$", posixpath.basename(argv[0])) is not None


def split_sections(text: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(commands.SECTION_MARK):
            current = line[len(commands.SECTION_MARK):].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return {k: "\n".join(v).strip() for k, v in sections.items()}


def host_facts(host: Host) -> dict:
    sections = split_sections(host.run(commands.host_facts(), timeout=120, check=False).stdout)
    table = smitext.parse_table(sections.get("table", ""))
    gpus = []
    for line in sections.get("gpus", "").splitlines():
        cells = line.split(", ")
        if len(cells) == 5 and cells[0].strip().isdigit():
            gpus.append({"index": int(cells[0]), "name": cells[1], "uuid": cells[2], "bus_id": cells[3],
                         "mem_total_mib": telemetry.parse_number(cells[4])})
    topo = smitext.parse_topo(sections.get("topo", ""))
    return {
        "hostname": sections.get("hostname") or None,
        "kernel": sections.get("kernel") or None,
        "os": sections.get("os") or None,
        "driver": table["driver"],
        "cuda": table["cuda"],
        "gpus": gpus,
        "topology": topo,
        "nvlink_pairs": sum(1 for link in topo if link["nvlink"]) // 2,
        "topology_text": sections.get("topo") or None,
    }


def interpreter_facts(host: Host, argv: list[str] | tuple[str, ...]) -> dict | None:
    """The server interpreter's Python and packages, when the command starts with a Python interpreter."""
    if not _is_python(argv):
        return None
    res = host.run(commands.interpreter_facts(argv[0]), timeout=120, check=False)
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": (res.stderr or res.stdout).strip()[-500:]}
