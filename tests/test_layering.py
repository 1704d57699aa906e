"""The import graph of lib/launchlab follows the layering of ARCHITECTURE.md: nothing imports upwards, and no
module imports itself back through others (no cycles). Read from the source with `ast`, so a lazy import inside
a function counts as much as one at the top."""

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib" / "launchlab"

# bottom to top; a module may import its own layer or any layer below it
LAYERS = [
    {"errors", "config", "escaping", "masking", "yamlfile", "smitext", "nbcheck", "sim"},
    {"params", "rundir", "telemetry", "logparse", "plan", "records", "nvml_sampler"},
    {"analysis", "confounds", "levelchecks", "verdict", "budget", "plots", "conclude", "frames"},
    {"hosts", "locks", "reaper", "provenance", "patching", "nodes"},
    {"watch", "cleanup", "lifecycle", "recovery"},
    {"report", "export", "runview", "notebooks", "batch", "cli", "__main__"},
]


def top(module: str) -> str:
    return module.split(".")[0]


def imports_of(path: Path) -> set[str]:
    """The launchlab modules a file imports (top-level names under launchlab)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "launchlab":
                found |= {a.name for a in node.names if a.name != "__version__"}
            elif node.module.startswith("launchlab."):
                found.add(top(node.module.removeprefix("launchlab.")))
        elif isinstance(node, ast.Import):
            found |= {top(a.name.removeprefix("launchlab.")) for a in node.names if a.name.startswith("launchlab.")}
    return found


def graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in LIB.rglob("*.py"):
        relative = path.relative_to(LIB)
        name = relative.parts[0].removesuffix(".py")
        if name == "__init__":
            continue
        edges.setdefault(name, set()).update(imports_of(path) - {name})
    return edges


def layer_of(module: str) -> int:
    for i, layer in enumerate(LAYERS):
        if module in layer:
            return i
    raise AssertionError(f"module {module!r} is in no layer of this test: place it in LAYERS (and ARCHITECTURE.md)")


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
