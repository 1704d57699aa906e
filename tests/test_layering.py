"""The import graph of lib/launchlab follows the layering of ARCHITECTURE.md: nothing imports upwards, and no
module imports itself back through others (no cycles). Read from the source with `ast`, so a lazy import inside
a function counts as much as one at the top."""

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib" / "launchlab"

# bottom to top; a module may import its own layer or any layer below it. A package is one module here unless
# some of its submodules sit lower (the transport registry and specs, which params validates against, sit
# below the transports that run commands).
LAYERS = [
    {"errors", "config", "escaping", "masking", "nbcheck", "sim", "fields", "polling", "interrupts", "tags"},
    {"hosts", "hosts.base", "hosts.commands", "hosts.local_spec", "hosts.sim_spec", "hosts.ssh_spec",
     "hosts.slurm_spec", "params", "store", "gpu", "logparse", "nvml_sampler", "search"},
    {"verdicts"},
    {"hosts.shell", "hosts.local", "hosts.sim", "hosts.ssh", "hosts.slurm",
     "hosts.locks", "hosts.reaper", "hosts.provenance", "hosts.patching", "hosts.nodes"},
    {"run"},
    {"reporting", "runner", "cli", "__main__"},
]
SPLIT = {"hosts"}  # packages whose submodules are placed one by one


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


def imports_of(path: Path) -> set[str]:
    """The launchlab modules a file imports, as named in LAYERS."""
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
                found.add(name_of(candidate if is_module else module))
        elif isinstance(node, ast.Import):
            found |= {name_of(a.name.removeprefix("launchlab.")) for a in node.names if a.name.startswith("launchlab.")}
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
