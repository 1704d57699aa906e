"""The "Adding things" recipes of docs/contributing.md, followed in a copy of the project: a dummy server kind and a
dummy transport, added with exactly the steps the recipes write down; then the layering, params-reference and
kinds tests run on the copy, a params file of the new kind on the new transport validates, and the new kind is
detected in a log. A step the copy needs that the recipes do not say fails the first test (issue 26)."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

# each step this test takes, as the recipes must say it
STEPS = {
    "kind module": "its module in `logparse/` exporting `KIND = ServerKind(",
    "kind registry": "its import and entry in `logparse/kinds.py` (`KINDS`)",
    "schema": "launchlab schema > params/params.schema.json",
    "params reference": "`launchlab schema --markdown` in place of the block between the markers of "
                        "`docs/reference/params.md`",
    "transport modules": "`hosts/<name>.py` (a `Host`, usually a `ShellHost` implementing `execute`, plus `open_host`), "
                         "`hosts/<name>_spec.py` (its params entry, a `HostParams`)",
    "transport registry": "one line in `TRANSPORTS` (`hosts/__init__.py`, which imports the spec module)",
    "layering": "`hosts.<name>` (layer 3) and `hosts.<name>_spec` (layer 1) in `LAYERS` of `tests/test_layering.py`",
}

KIND_MODULE = '''"""A server kind added by the recipe (tests/test_recipes.py): ready when it says so."""

import re

from launchlab.logparse.generic import GenericParser
from launchlab.logparse.serverkind import ServerKind


class DummyParser(GenericParser):
    def __init__(self, rules):
        super().__init__(rules.ready_pattern, rules.fatal_patterns)
        self.log.server = "dummy"


KIND = ServerKind(name="dummy", evidence=re.compile(r"^DUMMY "), ready_pattern=r"^DUMMY ready",
                  fatal_patterns=(r"^DUMMY died",), parser=DummyParser)
'''

SPEC_MODULE = '''"""The params of a `dummy` host: the recipe's transport (tests/test_recipes.py)."""

from typing import Literal

from pydantic import Field

from launchlab.fields import MAX_GPUS, GpuIndex, PathStr
from launchlab.hosts.base import HostParams


class DummySpec(HostParams):
    """This machine under another transport's name."""

    transport: Literal["dummy"] = Field(description="`dummy`: the transport the recipe test adds")
    gpus: int | None = Field(None, ge=0, le=MAX_GPUS, description="how many GPUs the host has")
    workdir: PathStr | None = Field(None, description="where run files live on the host")
    gpu_slots: list[list[GpuIndex]] | None = Field(None, description="runs at once, each on its own GPUs")
'''

HOST_MODULE = '''"""The `dummy` transport: this machine, as `local` reaches it (tests/test_recipes.py)."""

from launchlab.hosts import dummy_spec
from launchlab.hosts.local import LocalHost


def open_host(name: str, spec: dummy_spec.DummySpec, *, sim_box=None) -> "DummyHost":
    return DummyHost(name, workdir=spec.workdir)


class DummyHost(LocalHost):
    transport = "dummy"
'''

PARAMS = """experiment: recipe
hosts:
  box: {transport: dummy, gpus: 1}
server:
  kind: dummy
  command: [python3, -c, "print('DUMMY ready')"]
factors:
  a:
    "1": {flags: {--x: "1"}}
    "2": {flags: {--x: "2"}}
baseline: {a: "1"}
"""


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path.name} no longer holds {old!r}: update this test with the recipe"
    path.write_text(text.replace(old, new, 1))


def recipes() -> str:
    text = (ROOT / "docs" / "contributing.md").read_text()
    start = text.index("## Adding things")
    end = text.find("\n## ", start + 3)
    return text[start:] if end < 0 else text[start:end]


def test_the_recipes_write_down_every_step_the_copy_needs():
    text = " ".join(recipes().split())  # as read, not as wrapped
    missing = [name for name, words in STEPS.items() if words not in text]
    assert missing == [], f"docs/contributing.md's recipes no longer say: {missing}"


@pytest.mark.slow  # a copy of the project, three CLI calls and a pytest of three modules: about 20 s
def test_a_dummy_kind_and_a_dummy_transport_added_by_the_recipes_pass_the_projects_own_checks(tmp_path):
    copy = tmp_path / "project"
    shutil.copytree(ROOT / "lib", copy / "lib", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(ROOT / "params", copy / "params")
    shutil.copytree(ROOT / "docs", copy / "docs")
    (copy / "tests").mkdir()
    for name in ("test_layering.py", "test_params_reference.py", "test_kinds_own.py"):
        shutil.copy(ROOT / "tests" / name, copy / "tests" / name)
    (copy / "tests" / "conftest.py").write_text("from pathlib import Path\n\nROOT = Path(__file__).resolve().parents[1]\n")
    lib = copy / "lib" / "launchlab"

    # a server kind: its module, then its import and entry in KINDS
    (lib / "logparse" / "dummy.py").write_text(KIND_MODULE)
    kinds = lib / "logparse" / "kinds.py"
    imports = re.search(r"^from launchlab\.logparse import (.+)$", kinds.read_text(), re.M)
    edit(kinds, imports.group(0), f"from launchlab.logparse import dummy, {imports.group(1)}")
    edit(kinds, ", generic)}", ", dummy, generic)}")  # the fallback kind stays last
    # a transport: its two modules, its line in TRANSPORTS (and the spec's import), its places in LAYERS
    (lib / "hosts" / "dummy_spec.py").write_text(SPEC_MODULE)
    (lib / "hosts" / "dummy.py").write_text(HOST_MODULE)
    registry = lib / "hosts" / "__init__.py"
    edit(registry, "from launchlab.hosts import local_spec,", "from launchlab.hosts import dummy_spec, local_spec,")
    edit(registry, '    "slurm": Transport(slurm_spec.SlurmSpec, "launchlab.hosts.slurm"),\n',
         '    "slurm": Transport(slurm_spec.SlurmSpec, "launchlab.hosts.slurm"),\n'
         '    "dummy": Transport(dummy_spec.DummySpec, "launchlab.hosts.dummy"),\n')
    layering = copy / "tests" / "test_layering.py"
    edit(layering, '"hosts.slurm_spec",', '"hosts.slurm_spec", "hosts.dummy_spec",')
    edit(layering, '"hosts.slurm",', '"hosts.slurm", "hosts.dummy",')

    env = {**os.environ, "PYTHONPATH": str(copy / "lib")}  # the copy's launchlab before the checkout's

    def launchlab(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "launchlab", *args], cwd=copy, env=env, capture_output=True,
                              text=True, timeout=120)

    # then the generated schema and params reference
    (copy / "params" / "params.schema.json").write_text(launchlab("schema").stdout)
    from launchlab.params import reference

    page = copy / "docs" / "reference" / "params.md"
    text = page.read_text()
    block = text[text.index(reference.START): text.index(reference.END) + len(reference.END)]
    page.write_text(text.replace(block, launchlab("schema", "--markdown").stdout.rstrip("\n")))

    assert "dummy" in json.loads((copy / "params" / "params.schema.json").read_text())["$defs"]["DummySpec"][
        "properties"]["transport"]["const"]
    checks = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                             "-m", "", str(copy / "tests")], cwd=copy, env=env, capture_output=True, text=True,
                            timeout=300)
    assert checks.returncode == 0, checks.stdout[-4000:] + checks.stderr[-2000:]
    assert re.search(r"\b\d+ passed", checks.stdout), checks.stdout[-2000:]

    (copy / "recipe.yaml").write_text(PARAMS)
    validated = launchlab("validate", "recipe.yaml")
    assert validated.returncode == 0 and "valid" in validated.stdout, validated.stdout + validated.stderr
    (copy / "server.log").write_text("DUMMY starting\nDUMMY ready\n")
    parsed = json.loads(launchlab("parse", "server.log", "--json").stdout)
    assert (parsed["server"], parsed["ready"]) == ("dummy", True)
