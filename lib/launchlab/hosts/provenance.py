"""Provenance of a run: what the host and the server's interpreter were, collected before the launch.

A few commands per node, on the host itself (built in hosts/commands/provenance.py; `node_commands` names
them): one shell script that prints labelled sections (host name, kernel, OS, GPUs, driver and CUDA versions,
`nvidia-smi topo -m`), the server's own interpreter asked for its Python version and installed packages and for
its package's integrity, and the environment a process there inherits. A section that fails (no nvidia-smi, no
Python in argv[0]) is recorded as missing, never as an error: provenance must not stop a run. A scheduler's job
runs the same commands itself on the node it got (hosts/slurm.py), and `node_record` reads what they printed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import posixpath
import re
from concurrent.futures import ThreadPoolExecutor

from launchlab.errors import LaunchlabError
from launchlab.fields import MAX_GPUS
from launchlab.gpu import smitext, telemetry
from launchlab.hosts import CommandResult, Host, commands
from launchlab.logparse.kinds import model_flags
from launchlab.masking import Masker
from launchlab.store import rundir

TIMEOUTS_S = {"host_facts": 120, "python": 300, "host_env": 60}  # by node_commands' names


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
    return _integrity_of(res, package)


def _integrity_of(res: CommandResult, package: str | None) -> dict:
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"package": package, "error": (res.stderr or res.stdout).strip()[-500:]}


def model_path(argv: list[str] | tuple[str, ...]) -> str | None:
    """The model the launch names (a folder, a file, or a hub id) with a kind's model flag (ServerKind.model_flags),
    or as the word after `serve` (vLLM, `transformers serve`); None when it names none."""
    for i, token in enumerate(argv):
        for flag in model_flags():
            if token == flag and i + 1 < len(argv):
                return argv[i + 1]
            if token.startswith(flag + "="):
                return token.split("=", 1)[1]
    return next((argv[i + 1] for i, t in enumerate(argv[:-1]) if t == "serve" and not argv[i + 1].startswith("-")),
                None)


def model_facts(host: Host, argv: list[str] | tuple[str, ...]) -> dict | None:
    """What the model path holds on the host (commands.model_facts: config.json's sha256, each weight file's name,
    size and modification time; no weight is read), or None when the launch names no model. Two runs that name one
    path but found other weights there (a rebuilt checkpoint) are not the same experiment."""
    path = model_path(argv)
    if path is None:
        return None
    return parse_model(path, host.run(commands.model_facts(path), timeout=TIMEOUTS_S["host_env"], check=False).stdout)


def parse_model(path: str, text: str) -> dict:
    found: dict = {"path": path, "kind": None, "config_sha256": None, "files": []}
    for line in text.splitlines():
        if line.startswith("kind "):
            found["kind"] = line[5:].strip()
        elif line.startswith("config "):
            found["config_sha256"] = line[7:].strip()
        elif len(parts := line.rsplit(" ", 2)) == 3 and parts[1].isdigit():
            with contextlib.suppress(ValueError):
                found["files"].append([parts[0], int(parts[1]), int(float(parts[2]))])
    return found


def host_env(host: Host) -> dict[str, str]:
    """The environment a process started on the host inherits (before the run's env file), as it is: node_record
    masks it, and learns its secret values from it."""
    return _env_of(host.run(commands.host_environment(), timeout=TIMEOUTS_S["host_env"], check=False))


def _env_of(res: CommandResult) -> dict[str, str]:
    try:
        env = json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, dict) else {}


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


def steady_key(sections: dict[str, str]) -> str | None:
    """What the facts of nvidia-smi's table (driver, CUDA) and `topo -m` depend on, read afresh for every run:
    the boot (a new kernel, GPUs moved between slots) and the GPU list with the driver version (a GPU fallen off
    the bus, a driver swapped without a reboot). While it is the same, those two cannot print anything
    different. None when the host has no boot id to tell (then nothing is taken over)."""
    if not _BOOT_ID.fullmatch(sections.get("boot_id", "")):
        return None
    return hashlib.sha256(f"{sections['boot_id']}\n{sections.get('gpus', '')}".encode()).hexdigest()


_BOOT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
STEADY_FACTS = ("driver", "cuda", "topology", "nvlink_pairs", "topology_text")  # from commands.STEADY_SECTIONS


def host_facts(host: Host, earlier: tuple[str, dict] | None = None) -> dict:
    """The host's facts. earlier: (run id, host facts) that an earlier run of the same run directory recorded on
    this host; when its steady_key is this run's, its table and topology facts are taken over (`steady_from`
    names that run) instead of starting nvidia-smi twice more (two of the half-dozen starts of a run, and the
    slowest on a real host). Everything else is read again for every run."""
    known = earlier[1] if earlier is not None and earlier[1].get("steady_key") else None
    sections = split_sections(host.run(commands.host_facts(skip=commands.STEADY_SECTIONS if known else ()),
                                       timeout=120, check=False).stdout)
    key = steady_key(sections)
    if known is not None and key is not None and known["steady_key"] == key:
        facts = _facts(sections, "", "")
        return {**facts, **{k: known.get(k) for k in STEADY_FACTS}, "steady_key": key,
                "steady_from": known.get("steady_from") or earlier[0]}
    if known is not None:  # the boot, driver or GPUs changed since the earlier run: read what depends on them too
        sections |= split_sections(host.run(commands.host_facts(only=commands.STEADY_SECTIONS), timeout=120,
                                            check=False).stdout)
    return {**_facts(sections, sections.get("table", ""), sections.get("topo", "")), "steady_key": key,
            "steady_from": None}


def _facts(sections: dict[str, str], table_text: str, topo_text: str) -> dict:
    table = smitext.parse_table(table_text)
    gpus = []
    for line in sections.get("gpus", "").splitlines():
        cells = line.split(", ")
        if len(cells) == 6 and cells[0].strip().isdigit():
            gpus.append({"index": int(cells[0]), "name": cells[1], "uuid": cells[2], "bus_id": cells[3],
                         "mem_total_mib": telemetry.parse_number(cells[4])})
        if len(gpus) == MAX_GPUS:  # no host has more: what a listing says past it is not kept
            break
    topo = smitext.parse_topo(topo_text)
    return {
        "hostname": sections.get("hostname") or None,
        "kernel": sections.get("kernel") or None,
        "os": sections.get("os") or None,
        "driver": table["driver"],
        "cuda": table["cuda"],
        "gpus": gpus,
        "topology": topo,
        "nvlink_pairs": sum(1 for link in topo if link["nvlink"]) // 2,
        "topology_text": topo_text or None,
    }


def interpreter_facts(host: Host, argv: list[str] | tuple[str, ...]) -> dict | None:
    """The server interpreter's Python and packages, when the command starts with a Python interpreter."""
    if not _is_python(argv):
        return None
    return _interpreter_of(host.run(commands.interpreter_facts(argv[0]), timeout=120,
                                    check=False))


def _interpreter_of(res: CommandResult) -> dict:
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": (res.stderr or res.stdout).strip()[-500:]}


def earlier_facts(run_dir: rundir.RunDir, run_id: str, host: str) -> tuple[str, dict] | None:
    """(run id, host facts) of the newest other run of the run directory on this host, for host_facts to take its
    steady facts over; None when there is none (or its record cannot be read: then they are read again)."""
    newest: list[tuple[float, rundir.RunFolder]] = []
    for folder in run_dir.run_folders():
        with contextlib.suppress(OSError):
            if folder.run_id != run_id:
                newest.append((folder.provenance.stat().st_mtime, folder))
    for _, folder in sorted(newest, key=lambda pair: pair[0], reverse=True):
        try:
            record = rundir.read_json(folder.provenance)
        except (LaunchlabError, ValueError):
            continue
        for node in [record, *(record.get("nodes") or [])]:
            if node.get("host") == host and isinstance(node.get("host_facts"), dict):
                return folder.run_id, node["host_facts"]
    return None


def python_facts(host: Host, argv: list[str] | tuple[str, ...]) -> tuple[dict | None, dict | None]:
    """interpreter_facts and integrity from one start of the server's interpreter (commands.server_python): the
    same two records, each with its own error when its part failed."""
    if not _is_python(argv):
        return None, None
    return _python_of(host.run(commands.server_python(argv[0], server_package(argv)), timeout=TIMEOUTS_S["python"],
                               check=False), argv)


def _python_of(res: CommandResult, argv: list[str] | tuple[str, ...]) -> tuple[dict | None, dict | None]:
    package = server_package(argv)
    found: dict[str, dict] = {}
    for line in res.stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # whatever else the interpreter printed (a sitecustomize, a warning)
        if isinstance(record, dict):
            found["integrity" if "files_checked" in record else "interpreter"] = record
    why = (res.stderr or res.stdout).strip()[-500:]
    interpreter = found.get("interpreter") or {"error": why}
    if package is None:
        return interpreter, None
    return interpreter, found.get("integrity") or {"package": package, "error": why}


def node_commands(argv: list[str] | tuple[str, ...]) -> dict[str, str]:
    """The commands of a node's provenance, by what they tell: host_facts and host_env always, python (the
    interpreter's packages, and its package's integrity when argv runs `PYTHON -m PACKAGE`) when argv starts with
    a Python interpreter. A scheduler's job runs these on its node (hosts/slurm.py)."""
    found = {"host_facts": commands.host_facts(), "host_env": commands.host_environment()}
    if _is_python(argv):
        found["python"] = commands.server_python(argv[0], server_package(argv))
    return found


def _ask_node(host: Host, launch, earlier: tuple[str, dict] | None) -> tuple:
    """node_record's facts, asked of the host: at once where it allows it."""
    workers = 4 if host.concurrent_commands else 1
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="provenance") as pool:
        facts_f = pool.submit(host_facts, host, earlier)
        python_f = pool.submit(python_facts, host, launch.argv)
        env_f = pool.submit(host_env, host)
        model_f = pool.submit(model_facts, host, launch.argv)
    return facts_f.result(), python_f.result(), env_f.result(), model_f.result()


def node_record(host: Host, rank: int, launch, *, preflight: dict | None, masker: Masker, secret_names=(),
                earlier: tuple[str, dict] | None = None, recorded: dict[str, CommandResult] | None = None
                ) -> tuple[dict, Masker]:
    """What one node of a run was — the host and its facts, the server's interpreter and installed files, the
    environment a process inherits there, the launch — every secret masked; and `masker` grown by the secret
    values of that inherited environment (Masker.inherited: the server inherits them too, and may print them).
    The three commands are independent and most of their time is spent starting an interpreter or nvidia-smi on
    the host, so they run at once where the host allows it: one after the other they were the largest part of a
    short run (bench/run_overhead.py). earlier: see host_facts. `recorded`: what node_commands printed where they
    ran already (inside a scheduler's job, on its node), read instead of running them here; one missing is
    unknown."""
    if recorded is None:
        facts, (interpreter, installed), inherited, model = _ask_node(host, launch, earlier)
    else:
        sections = split_sections(recorded["host_facts"].stdout if "host_facts" in recorded else "")
        facts = {**_facts(sections, sections.get("table", ""), sections.get("topo", "")), "steady_from": None}
        interpreter, installed = _python_of(recorded["python"], launch.argv) if "python" in recorded else (None, None)
        inherited = _env_of(recorded["host_env"]) if "host_env" in recorded else {}
        model = None  # not read inside a scheduler's job
    masker = masker.merge(Masker.inherited(inherited, secret_names))
    env = masker.env(inherited, secret_names)
    return masker.record({
        "node": rank,
        "host": host.name,
        "transport": host.transport,
        "simulated": host.simulated,
        "hostname": facts["hostname"],
        "host_facts": facts,
        "interpreter": interpreter,
        "integrity": installed,
        "host_env": env,
        # the part of host_env the kit itself set (hosts.base.Host.kit_env): never compared between runs
        "kit_env": dict(host.kit_env),
        "argv": masker.argv(launch.argv, secret_names),
        "env": masker.env(launch.env, secret_names),
        "health_url": masker.text(launch.health_url) if launch.health_url else None,
        "preflight": preflight,
        "model": model,
    }), masker


def run_record(kit_version: str, server_kind: str, per_node: list[dict], masker) -> dict:
    """provenance.json: node 0 at the top level (the whole story for single-host runs), every node under
    "nodes" for a multi-node server; masked once more as a whole (a secret can hide in any fact)."""
    record = {"kit_version": kit_version, "server_kind": server_kind, **per_node[0],
              "nodes": per_node if len(per_node) > 1 else None}
    return masker.record(record)
