"""Issue 68: docs/architecture.md named functions in the wrong modules, and its test checked only that modules are
named. Every `module.name` (and `module.Class.attribute`) the page names, where `module` is one of the kit's
modules, exists there."""

from __future__ import annotations

import importlib
import re

from conftest import ROOT

LIB = ROOT / "lib" / "launchlab"
# the kit's modules by their last name (params/, hosts/, … are packages: their own name too)
MODULES = {p.stem if p.stem != "__init__" else p.parent.name: ".".join(p.relative_to(LIB.parent).with_suffix("").parts)
           .removesuffix(".__init__") for p in LIB.rglob("*.py")}
# a name two modules share is named by its package in the page (`hosts/` …): left out of the lookup
SHARED = {stem for stem in MODULES if sum(p.stem == stem for p in LIB.rglob("*.py")) > 1}
# a name as the page writes code: `module.name`, `module.Class.name`, with or without `(…)`, at a code span's start
NAMED = re.compile(r"(?<![\w./-])([a-z_]+)\.([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)(?=\(|`|\s|[,;:)]|$)", re.M)
FILES = {"py", "md", "yaml", "json", "ipynb", "parquet", "html", "gz", "csv", "j2", "log", "txt", "toml", "sh", "diff"}


def named(text: str) -> list[tuple[str, str]]:
    """The `module.name` the page names in its code spans and its module map."""
    code = " ".join(re.findall(r"`([^`]+)`", text)) + " " + " ".join(
        re.findall(r"```(?:text)?\n(.*?)```", text, flags=re.S))
    return [(m, a) for m, a in NAMED.findall(code) if m in MODULES and m not in SHARED and a not in FILES]


def resolves(module: str, attribute: str) -> bool:
    found = importlib.import_module(MODULES[module])
    for part in attribute.split("."):
        if part in getattr(found, "__dataclass_fields__", {}) or part in getattr(found, "model_fields", {}):
            return True  # a record's field: not an attribute of its class
        if not hasattr(found, part):
            return False
        found = getattr(found, part)
    return True


def test_every_function_the_architecture_page_names_is_in_the_module_it_names():
    text = (ROOT / "docs" / "architecture.md").read_text()
    found = named(text)
    assert len(found) > 40, found
    wrong = sorted({f"{m}.{a}" for m, a in found if not resolves(m, a)})
    assert wrong == []


def test_the_check_catches_a_function_named_in_the_wrong_module():
    assert resolves("verdict", "build") and not resolves("analysis", "factor_effects")
    assert named("`analysis.factor_effects` and `report.Report.evidence`") == [
        ("analysis", "factor_effects"), ("report", "Report.evidence")]
