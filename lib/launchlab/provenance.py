"""Provenance of a run: what the host and the server's interpreter were, collected before the launch.

Two commands per run, both on the host itself: one shell script that prints labelled sections (host name,
kernel, OS, GPUs, driver and CUDA versions, `nvidia-smi topo -m`), and the server's own interpreter asked for
its Python version and installed packages. A section that fails (no nvidia-smi, no Python in argv[0]) is
recorded as missing, never as an error: provenance must not stop a run.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex

from launchlab import smitext, telemetry
from launchlab.hosts import Host

_SECTIONS = {
    "hostname": "hostname",
    "kernel": "uname -srm",
    "os": ". /etc/os-release 2>/dev/null && echo \"$PRETTY_NAME\"",
    "gpus": "nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total --format=csv,noheader,nounits",
    "table": "nvidia-smi",
    "topo": "nvidia-smi topo -m",
}
_MARK = "@@launchlab-section "
# Printed by the server's interpreter: its version and every installed distribution.
_PYTHON = """\
import json, platform, sys
from importlib import metadata
packages = {}
for dist in metadata.distributions():
    name = dist.metadata["Name"]
    if name:
        packages[name.lower()] = dist.version
print(json.dumps({"python": platform.python_version(), "executable": sys.executable, "prefix": sys.prefix,
                  "packages": dict(sorted(packages.items()))}))
"""


# Run by the server's interpreter: the server package's installed files against the sha256 in its wheel
# RECORD (a debug print left in site-packages shows up here), files added next to them, and the git
# commit and dirty state when the package lives in a checkout (an editable install).
_INTEGRITY = """\
import base64, hashlib, importlib.util, json, os, subprocess, sys
from importlib import metadata
top = sys.argv[1]
names = metadata.packages_distributions().get(top) or [top]
dist = metadata.distribution(names[0])
root = str(dist.locate_file(""))
modified, listed, checked = [], set(), 0
for f in dist.files or []:
    path = os.path.normpath(str(f.locate()))
    listed.add(path)
    if f.hash is None or f.hash.mode != "sha256":
        continue
    checked += 1
    try:
        data = open(path, "rb").read()
    except OSError:
        modified.append(str(f) + " (missing)")
        continue
    if base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode() != f.hash.value:
        modified.append(str(f))
added = []
tops = {str(f).split("/")[0] for f in dist.files or [] if "/" in str(f)}
for t in sorted(x for x in tops if not x.endswith((".dist-info", ".data")) and x != ".."):
    for here, dirs, files in os.walk(os.path.join(root, t)):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        added += [os.path.relpath(os.path.join(here, n), root) for n in files
                  if os.path.normpath(os.path.join(here, n)) not in listed and not n.endswith(".pyc")]
spec = importlib.util.find_spec(top)
location = os.path.dirname(spec.origin) if spec and spec.origin else root
def git(*args):
    try:
        out = subprocess.run(["git", "-C", location, *args], capture_output=True, text=True, timeout=20)
        return out.stdout.strip() if out.returncode == 0 else None
    except OSError:
        return None
commit = git("rev-parse", "HEAD")
dirty = bool(git("status", "--porcelain", "--untracked-files=no")) if commit else None
print(json.dumps({"package": dist.metadata["Name"], "version": dist.version, "files_checked": checked,
                  "modified": sorted(modified), "added": sorted(added)[:200], "location": location, "root": root,
                  "git_commit": commit, "git_dirty": dirty}))
"""
_ENV = "import json, os; print(json.dumps(dict(os.environ)))"


def server_package(argv: list[str] | tuple[str, ...]) -> str | None:
    """The top-level package a `python -m pkg.module` command runs (None for other commands)."""
    argv = list(argv)
    if "-m" in argv and argv.index("-m") + 1 < len(argv):
        return argv[argv.index("-m") + 1].split(".")[0]
    return None


def integrity(host: Host, argv: list[str] | tuple[str, ...]) -> dict | None:
    package = server_package(argv)
    if package is None or not _is_python(argv):
        return None
    res = host.run(f"{shlex.quote(argv[0])} -c {shlex.quote(_INTEGRITY)} {shlex.quote(package)}", timeout=300, check=False)
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"package": package, "error": (res.stderr or res.stdout).strip()[-500:]}


def host_env(host: Host, mask) -> dict[str, str]:
    """The environment a process started on the host inherits (before the run's env file), secrets masked."""
    res = host.run(f"python3 -c {shlex.quote(_ENV)}", timeout=60, check=False)
    try:
        return mask(json.loads(res.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return {}


def _is_python(argv) -> bool:
    return bool(argv) and re.match(r"python(\d+(\.\d+)*)?$", posixpath.basename(argv[0])) is not None


def host_script() -> str:
    return "; ".join(f"echo '{_MARK}{name}'; {cmd} 2>&1" for name, cmd in _SECTIONS.items())


def split_sections(text: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(_MARK):
            current = line[len(_MARK):].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return {k: "\n".join(v).strip() for k, v in sections.items()}


def host_facts(host: Host) -> dict:
    sections = split_sections(host.run(host_script(), timeout=120, check=False).stdout)
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
    res = host.run(f"{shlex.quote(argv[0])} -c {shlex.quote(_PYTHON)}", timeout=120, check=False)
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": (res.stderr or res.stdout).strip()[-500:]}


def node_record(host: Host, rank: int, launch, preflight: dict | None, masker, secret_names=()) -> dict:
    """What one node of a run was: the host and its facts, the server's interpreter and installed files, the
    environment a process inherits there, the launch — every secret masked (masking.Masker)."""
    facts = host_facts(host)
    return {
        "node": rank,
        "host": host.name,
        "transport": host.transport,
        "simulated": host.simulated,
        "hostname": facts["hostname"],
        "host_facts": facts,
        "interpreter": interpreter_facts(host, launch.argv),
        "integrity": integrity(host, launch.argv),
        "host_env": host_env(host, lambda env: masker.env(env, secret_names)),
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
