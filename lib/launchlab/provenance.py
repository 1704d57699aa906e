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
from concurrent.futures import ThreadPoolExecutor

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


def node_record(host: Host, rank: int, launch, preflight: dict | None, masker, secret_names=()) -> dict:
    """What one node of a run was: the host and its facts, the server's interpreter and installed files, the
    environment a process inherits there, the launch — every secret masked (masking.Masker). The four
    commands are independent and most of their time is spent starting an interpreter or nvidia-smi on the host,
    so they run at once where the host allows it: one after the other they were the largest part of a short run
    (bench/run_overhead.py)."""
    workers = 4 if getattr(host, "concurrent_commands", False) else 1
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="provenance") as pool:
        facts_f = pool.submit(host_facts, host)
        interpreter_f = pool.submit(interpreter_facts, host, launch.argv)
        integrity_f = pool.submit(integrity, host, launch.argv)
        env_f = pool.submit(host_env, host, lambda env: masker.env(env, secret_names))
    facts = facts_f.result()
    return {
        "node": rank,
        "host": host.name,
        "transport": host.transport,
        "simulated": host.simulated,
        "hostname": facts["hostname"],
        "host_facts": facts,
        "interpreter": interpreter_f.result(),
        "integrity": integrity_f.result(),
        "host_env": env_f.result(),
        "argv": masker.argv(launch.argv, secret_names),
        "env": masker.env(launch.env, secret_names),
        "health_url": masker.text(launch.health_url) if launch.health_url else None,
        "preflight": preflight,
    }


def run_record(kit_version: str, server_kind: str, per_node: list[dict], masker) -> dict:
    """provenance.json: node 0 at the top level (the whole story for single-host runs), every node under
    "nodes" for a multi-node server; masked once more as a whole (a secret can hide in any fact)."""
    record = {"kit_version": kit_version, "server_kind": server_kind, **per_node[0],
              "nodes": per_node if len(per_node) > 1 else None}
    return masker.record(record)
