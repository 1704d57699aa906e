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
    if not argv or not re.match(r"python(\d+(\.\d+)*)?$", posixpath.basename(argv[0])):
        return None
    res = host.run(f"{shlex.quote(argv[0])} -c {shlex.quote(_PYTHON)}", timeout=120, check=False)
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": (res.stderr or res.stdout).strip()[-500:]}
