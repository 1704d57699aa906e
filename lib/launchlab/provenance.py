"""Provenance of a run: what the host and the server's interpreter were, collected before the launch.

A few commands per node, on the host itself (built in hosts/commands/provenance.py; `node_commands` names
them): one shell script that prints labelled sections (host name, kernel, OS, GPUs, driver and CUDA versions,
`nvidia-smi topo -m`), the server's own interpreter asked for its Python version and installed packages and for
its package's integrity, and the environment a process there inherits. A section that fails (no nvidia-smi, no
Python in argv[0]) is recorded as missing, never as an error: provenance must not stop a run. A scheduler's job
runs the same commands itself on the node it got (hosts/slurm.py), and `node_record` reads what they printed.
"""

from __future__ import annotations

import json
import posixpath
import re
from concurrent.futures import ThreadPoolExecutor

from launchlab import smitext, telemetry
from launchlab.hosts import CommandResult, Host, commands

TIMEOUTS_S = {"host_facts": 120, "interpreter": 120, "integrity": 300, "host_env": 60}


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
    res = host.run(commands.package_integrity(argv[0], package), timeout=TIMEOUTS_S["integrity"], check=False)
    return _integrity_of(res, package)


def _integrity_of(res: CommandResult, package: str | None) -> dict:
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"package": package, "error": (res.stderr or res.stdout).strip()[-500:]}


def host_env(host: Host, mask) -> dict[str, str]:
    """The environment a process started on the host inherits (before the run's env file), secrets masked."""
    return _env_of(host.run(commands.host_environment(), timeout=TIMEOUTS_S["host_env"], check=False), mask)


def _env_of(res: CommandResult, mask) -> dict[str, str]:
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
    return _facts_of(host.run(commands.host_facts(), timeout=TIMEOUTS_S["host_facts"], check=False).stdout)


def _facts_of(text: str) -> dict:
    sections = split_sections(text)
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
    return _interpreter_of(host.run(commands.interpreter_facts(argv[0]), timeout=TIMEOUTS_S["interpreter"],
                                    check=False))


def _interpreter_of(res: CommandResult) -> dict:
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": (res.stderr or res.stdout).strip()[-500:]}


def node_commands(argv: list[str] | tuple[str, ...]) -> dict[str, str]:
    """The commands of a node's provenance, by what they tell: host_facts and host_env always, interpreter when
    argv starts with a Python interpreter, integrity when it runs `PYTHON -m PACKAGE`."""
    found = {"host_facts": commands.host_facts(), "host_env": commands.host_environment()}
    if _is_python(argv):
        found["interpreter"] = commands.interpreter_facts(argv[0])
        if (package := server_package(argv)) is not None:
            found["integrity"] = commands.package_integrity(argv[0], package)
    return found


def node_record(host: Host, rank: int, launch, preflight: dict | None, masker, secret_names=(),
                recorded: dict[str, CommandResult] | None = None) -> dict:
    """What one node of a run was: the host and its facts, the server's interpreter and installed files, the
    environment a process inherits there, the launch — every secret masked (masking.Masker). The commands
    (node_commands) are independent and most of their time is spent starting an interpreter or nvidia-smi on the
    host, so they run at once where the host allows it: one after the other they were the largest part of a short
    run (bench/run_overhead.py). `recorded`: what the commands printed where they ran already (inside a
    scheduler's job, on its node), read instead of running them here; a command missing from it is unknown."""
    wanted = node_commands(launch.argv)
    if recorded is None:
        workers = 4 if getattr(host, "concurrent_commands", False) else 1
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="provenance") as pool:
            futures = {name: pool.submit(host.run, command, timeout=TIMEOUTS_S[name], check=False)
                       for name, command in wanted.items()}
        recorded = {name: future.result() for name, future in futures.items()}
    facts = _facts_of(recorded["host_facts"].stdout if "host_facts" in recorded else "")
    return {
        "node": rank,
        "host": host.name,
        "transport": host.transport,
        "simulated": host.simulated,
        "hostname": facts["hostname"],
        "host_facts": facts,
        "interpreter": _interpreter_of(recorded["interpreter"]) if "interpreter" in recorded else None,
        "integrity": _integrity_of(recorded["integrity"], server_package(launch.argv))
        if "integrity" in recorded else None,
        "host_env": _env_of(recorded["host_env"], lambda env: masker.env(env, secret_names))
        if "host_env" in recorded else {},
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
