"""The benchmarks and scripts are not run by the suite (they take minutes, or a GPU), so a name the kit moves must not
leave them calling what is gone (issue 68: `batch.planned` moved to runner/plan.py and bench/report_scale.py broke
unnoticed): every name they import from the kit, and every attribute they read of a kit module, exists."""

from __future__ import annotations

import ast
import importlib

from conftest import ROOT

FILES = sorted([*(ROOT / "bench").glob("*.py"), *(ROOT / "scripts").glob("*.py")])


def _kit_names(tree: ast.Module) -> tuple[dict[str, object], list[str]]:
    """What each name a file imports from launchlab stands for, and the imports that do not resolve."""
    names, missing = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "launchlab":
            module = importlib.import_module(node.module)
            for alias in node.names:
                found = getattr(module, alias.name, None)
                if found is None:
                    try:
                        found = importlib.import_module(f"{node.module}.{alias.name}")
                    except ImportError:
                        missing.append(f"{node.module}.{alias.name}")
                        continue
                names[alias.asname or alias.name] = found
    return names, missing


def unresolved(source: str) -> list[str]:
    tree = ast.parse(source)
    names, missing = _kit_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in names:
            if type(names[node.value.id]).__name__ == "module" and not hasattr(names[node.value.id], node.attr):
                missing.append(f"{node.value.id}.{node.attr} (line {node.lineno})")
    return missing


def test_every_kit_name_the_benchmarks_and_scripts_use_exists():
    assert len(FILES) >= 10
    gone = {path.name: found for path in FILES if (found := unresolved(path.read_text()))}
    assert gone == {}


def test_the_check_sees_a_moved_function():
    assert unresolved("from launchlab.runner import batch\nbatch.planned(1)\n") == ["batch.planned (line 2)"]
    assert unresolved("from launchlab.runner import plan as plans\nplans.planned(1)\n") == []
