"""The import graph of lib/launchlab follows the layering of docs/architecture.md: nothing imports upwards, and no
module imports itself back through others (no cycles). Read from the source with `ast`, so a lazy import inside
a function counts as much as one at the top."""

import ast
import sys
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib" / "launchlab"

# bottom to top; a module may import its own layer or any layer below it. A package is one module here unless
# some of its submodules sit lower (the transport registry and specs, which params validates against, sit
# below the transports that run commands).
LAYERS = [
    {"errors", "config", "escaping", "numtext", "safefiles", "masking", "nbcheck", "sim", "fields", "polling",
     "interrupts", "tags", "terminal"},
    {"hosts", "hosts.base", "hosts.commands", "hosts.ports", "hosts.local_spec", "hosts.sim_spec", "hosts.ssh_spec",
     "hosts.slurm_spec", "params", "store", "gpu", "logparse", "nvml_sampler", "search"},
    {"verdicts"},
    {"hosts.shell", "hosts.local", "hosts.sim", "hosts.ssh", "hosts.slurm", "hosts.httpask",
     "hosts.locks", "hosts.reaper", "hosts.provenance", "hosts.patching", "hosts.nodes"},
    {"run"},
    {"reporting", "runner", "cli", "__main__"},
]
SPLIT = {"hosts"}  # packages whose submodules are placed one by one
# Within one package the layers above see no import. These modules of one package stay apart all the same, each for
# its reason (importer → imported, in dotted names under launchlab):
APART = {
    ("runner.runview", "runner.plan"): "one run's notebook takes its run from the manifest (the store's record of the "
                                       "batch's plan) and never plans again",
}


def name_of(dotted: str) -> str:
    """launchlab.hosts.ssh → hosts.ssh (a split package), launchlab.logparse.vllm → logparse."""
    parts = dotted.split(".")
    if parts[0] in SPLIT and len(parts) > 1:
        return f"{parts[0]}.{parts[1]}"
    return parts[0]


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of import nodes inside `if TYPE_CHECKING:` blocks (annotations only: no import at run time)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            skip |= {id(n) for n in ast.walk(node)}
    return skip


def imports_of(path: Path, naming=name_of) -> set[str]:
    """The launchlab modules a file imports, as named in LAYERS (naming=str: by their whole dotted name)."""
    tree = ast.parse(path.read_text())
    skip = _type_checking_only(tree)
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            module = node.module.removeprefix("launchlab").removeprefix(".")
            if not node.module.startswith("launchlab"):
                continue
            for alias in node.names:
                if alias.name == "__version__":
                    continue
                candidate = f"{module}.{alias.name}" if module else alias.name
                is_module = (LIB / candidate.replace(".", "/")).with_suffix(".py").exists() or \
                    (LIB / candidate.replace(".", "/")).is_dir()
                found.add(naming(candidate if is_module else module))
        elif isinstance(node, ast.Import):
            found |= {naming(a.name.removeprefix("launchlab.")) for a in node.names if a.name.startswith("launchlab.")}
    return found


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in LIB.rglob("*.py"):
        parts = list(path.relative_to(LIB).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if not parts:
            continue
        name = name_of(".".join(parts))
        edges.setdefault(name, set()).update(imports_of(path) - {name})
    return edges


def layer_of(module: str) -> int:
    for i, layer in enumerate(LAYERS):
        if module in layer:
            return i
    raise AssertionError(f"module {module!r} is in no layer of this test: place it in LAYERS (and docs/architecture.md)")


def test_every_module_has_a_layer_and_imports_nothing_above_it():
    upward = []
    for module, targets in graph().items():
        for target in targets:
            if layer_of(target) > layer_of(module):
                upward.append(f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})")
    assert upward == []


def test_there_is_no_import_cycle_between_modules():
    edges = graph()
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(edges.get(node, ())):
            if nxt in path:
                cycles.append(" → ".join(path[path.index(nxt):] + [nxt]))
            elif nxt in edges and nxt not in done:
                visit(nxt, path + [nxt])
        done.add(node)

    done: set[str] = set()
    for start in sorted(edges):
        if start not in done:
            visit(start, [start])
    assert cycles == []


def dotted(path: Path) -> str:
    parts = list(path.relative_to(LIB).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def kept_apart(paths) -> list[str]:
    return [f"{dotted(p)} imports {target}: {APART[(dotted(p), target)]}" for p in paths
            for target in sorted(imports_of(p, naming=str)) if (dotted(p), target) in APART]


def test_modules_kept_apart_inside_their_package_import_nothing_of_each_other():
    assert all((LIB / a.replace(".", "/")).with_suffix(".py").exists() and
               (LIB / b.replace(".", "/")).with_suffix(".py").exists() for a, b in APART), "a module was renamed"
    assert kept_apart(LIB.rglob("*.py")) == []


def test_the_check_sees_an_import_between_two_modules_of_one_package(monkeypatch, tmp_path):
    lib = tmp_path / "launchlab"
    (lib / "runner").mkdir(parents=True)
    (lib / "runner" / "plan.py").write_text("")
    (lib / "runner" / "runview.py").write_text("def run_variant():\n    from launchlab.runner.plan import find_run\n")
    monkeypatch.setattr(sys.modules[__name__], "LIB", lib)
    assert kept_apart([lib / "runner" / "runview.py"]) == [
        f"runner.runview imports runner.plan: {APART[('runner.runview', 'runner.plan')]}"]
