"""Commands that collect a run's provenance (provenance.py parses what they print): the host's facts in labelled
sections, and the server's own interpreter asked for its Python and packages, for the integrity of the server's
installed files against its wheel RECORD, and for the environment a process started on the host inherits.
Each Python script prints one JSON line; its values (the package name) arrive in argv."""

from __future__ import annotations

import shlex

from launchlab.hosts.commands.gpus import bounded

_SECTIONS = {
    "hostname": "hostname",
    "kernel": "uname -srm",
    "os": ". /etc/os-release 2>/dev/null && echo \"$PRETTY_NAME\"",
    "gpus": "nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,driver_version --format=csv,noheader,nounits",
    "table": "nvidia-smi",
    "topo": "nvidia-smi topo -m",
}
# With the GPU list and their driver version, what identifies the facts of STEADY_SECTIONS: the boot (provenance.host_facts)
_KEY_SECTIONS = {"boot_id": "cat /proc/sys/kernel/random/boot_id"}
STEADY_SECTIONS = ("table", "topo")  # what nvidia-smi cannot print differently while the key sections stay the same
SECTION_MARK = "@@launchlab-section "  # starts the line that names each section
# Printed by the server's interpreter: its version and every installed distribution. Name and Version are read
# from the head of each METADATA (core metadata: headers first, then a blank line, then the description):
# `dist.metadata` ran the email parser over every whole file, half the time of this script on each run.
_PYTHON = """\
import json, platform, sys
from importlib import metadata
packages = {}
for dist in metadata.distributions():
    head = {}
    for line in (dist.read_text("METADATA") or dist.read_text("PKG-INFO") or "").splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        head.setdefault(key, value.strip())
    if head.get("Name"):
        packages[head["Name"].lower()] = head.get("Version")
print(json.dumps({"python": platform.python_version(), "executable": sys.executable, "prefix": sys.prefix,
                  "packages": dict(sorted(packages.items()))}))
"""


# Run by the server's interpreter: the server package's installed files against the sha256 in its wheel
# RECORD (a debug print left in site-packages shows up here), files added next to them, and the git
# commit and dirty state when the package lives in a checkout (an editable install). The distribution is the
# one named like the package where there is one, else the one that installs it. Notebooks are compared by their
# code (each cell's type and source, and which cell takes papermill's parameters), not their bytes: JupyterLab's
# save rewrites a notebook's JSON (indentation, metadata, outputs) without changing what it runs. So each notebook
# of the package has its code's digest (notebook_code; confounds compares them between runs, in place of
# `modified`), and a checked-out notebook whose code is HEAD's is reformatted (git_reformatted), not dirty.
_INTEGRITY = """\
import base64, hashlib, importlib.util, json, os, subprocess, sys
from importlib import metadata
top = sys.argv[1]
try:  # the distribution named like its package (sglang, vllm): packages_distributions reads every installed
    dist = metadata.distribution(top)  # distribution's files, most of this script's time
except metadata.PackageNotFoundError:
    dist = metadata.distribution((metadata.packages_distributions().get(top) or [top])[0])
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
def git(*args, strip=True):
    try:
        out = subprocess.run(["git", "-C", location, *args], capture_output=True, text=True, timeout=20)
        return (out.stdout.strip() if strip else out.stdout) if out.returncode == 0 else None
    except OSError:
        return None
def code(data):
    try:
        nb = json.loads(data)
        cells = [[c.get("cell_type"), "".join(c.get("source") or ""),
                  "parameters" in ((c.get("metadata") or {}).get("tags") or [])] for c in nb.get("cells") or []]
    except (ValueError, AttributeError, TypeError):
        return None
    return hashlib.sha256(json.dumps(cells).encode()).hexdigest()
notebooks, walked = {}, set()
for here, dirs, files in os.walk(location, followlinks=True):  # the kit's templates are links: followed, once
    if os.path.realpath(here) in walked:
        dirs[:] = []
        continue
    walked.add(os.path.realpath(here))
    dirs[:] = [d for d in dirs if d not in ("__pycache__", ".ipynb_checkpoints")]
    for n in files:
        if n.endswith(".ipynb") and len(notebooks) < 200:
            try:
                notebooks[os.path.relpath(os.path.join(here, n), location)] = code(open(os.path.join(here, n), "rb").read())
            except OSError:
                pass
commit = git("rev-parse", "HEAD")
dirty, reformatted = None, []
if commit:
    top = git("rev-parse", "--show-toplevel")
    status = git("status", "--porcelain", "--untracked-files=no", strip=False) or ""
    changed = [line[3:] for line in status.splitlines() if line.strip()]  # "XY path", from the checkout's top
    for path in changed:
        if path.endswith(".ipynb") and top and "->" not in path:
            try:
                now = code(open(os.path.join(top, path), "rb").read())
            except OSError:
                continue
            if now is not None and now == code(git("show", "HEAD:" + path.strip('"')) or ""):
                reformatted.append(path)
    dirty = len(changed) > len(reformatted)
print(json.dumps({"package": dist.metadata["Name"], "version": dist.version, "files_checked": checked,
                  "modified": sorted(modified), "added": sorted(added)[:200], "location": location, "root": root,
                  "git_commit": commit, "git_dirty": dirty, "git_reformatted": sorted(reformatted),
                  "notebook_code": notebooks}))
"""
_ENV = "import json, os; print(json.dumps(dict(os.environ)))"


def host_facts(skip: tuple[str, ...] = (), only: tuple[str, ...] | None = None) -> str:
    """Print each of _SECTIONS and the key sections under a SECTION_MARK line (a section that fails prints its
    error instead); skip: sections left out (STEADY_SECTIONS known from an earlier run), only: just those."""
    sections = {**_SECTIONS, **_KEY_SECTIONS}
    names = [n for n in (only if only is not None else sections) if n not in skip]
    return "; ".join(f"echo {shlex.quote(SECTION_MARK + name)}; {bounded(sections[name] + ' 2>&1')}" for name in names)


def interpreter_facts(python: str) -> str:
    """The interpreter's Python version and installed distributions, as one JSON line."""
    return f"{shlex.quote(python)} -c {shlex.quote(_PYTHON)}"


def server_python(python: str, package: str | None) -> str:
    """interpreter_facts' JSON line, then (for a package) package_integrity's, from one start of the interpreter:
    both import importlib.metadata, most of their time, and a run asked for both every time."""
    script = _PYTHON + (f"exec({_INTEGRITY!r})\n" if package is not None else "")
    return f"{shlex.quote(python)} -c {shlex.quote(script)}" + (f" {shlex.quote(package)}" if package is not None else "")


def package_integrity(python: str, package: str) -> str:
    """The package's installed files against its RECORD, files added, and its git state, as one JSON line."""
    return f"{shlex.quote(python)} -c {shlex.quote(_INTEGRITY)} {shlex.quote(package)}"


def host_environment() -> str:
    """The environment of a process the host's shell starts, as one JSON line."""
    return f"python3 -c {shlex.quote(_ENV)}"


MODEL_FILES = 2000  # the weight files listed of a model folder, at most (names sorted)


def model_facts(path: str) -> str:
    """What a model path holds, without reading the weights: `kind dir|file|none`, then for a folder the sha256 of
    its config.json (`config HEX`) and one `NAME SIZE MTIME` line per weight file (up to two folders down, sorted,
    at most MODEL_FILES), for a single file (a GGUF) its own line."""
    q = shlex.quote(path)
    return bounded(
        f"if [ -d {q} ]; then echo 'kind dir'; "
        f"[ -f {q}/config.json ] && echo \"config $(sha256sum {q}/config.json | cut -c1-64)\"; "
        f"find {q} -maxdepth 2 -type f \\( -name '*.safetensors' -o -name '*.bin' -o -name '*.pt' -o -name '*.pth' "
        f"-o -name '*.gguf' \\) -printf '%P %s %T@\\n' 2>/dev/null | LC_ALL=C sort | head -n {MODEL_FILES}; "
        f"elif [ -f {q} ]; then echo 'kind file'; stat -c '%n %s %Y' -- {q}; else echo 'kind none'; fi")
