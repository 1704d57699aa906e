"""The kit reads as named steps: no function of the run path and the analysis longer than 40 lines (issue 26; its
docstring apart), nor of the whole kit but the simulator, and no module of it longer than 500 lines (issue 68); a
function of the run path and the analysis of more than four parameters takes the rest by keyword, and no call anywhere
in the kit passes more than four values by position into them, so a call says what each value is. Read from the
source with `ast`; the packages are read whole, so a module added to them is held to the same shape."""

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib" / "launchlab"
# the run path: one run (run/), what plans, starts and drives runs (runner/), what it asks of a host and runs there
# (hosts/: the transports, nodes, provenance, patching, locks) and what it writes (store/)
RUN_PATH = ("run", "runner", "hosts", "store")
# the analysis: every module of verdicts/, and the search it re-runs over the finished runs (thresholds.table)
ANALYSIS = ("verdicts", "search")
MAX_LINES = 40
MAX_POSITIONAL = 4
# run_variant.ipynb — and every run notebook a run directory keeps — calls run_variant with five positional
# arguments; a saved notebook must run again as it was
POSITIONAL_API = {("runner.runview", "run_variant")}


def dotted(path: Path) -> str:
    parts = list(path.relative_to(LIB).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of the run path and the analysis, by dotted name under launchlab."""
    found = {}
    for part in RUN_PATH + ANALYSIS:
        paths = sorted((LIB / part).rglob("*.py")) if (LIB / part).is_dir() else [LIB / f"{part}.py"]
        found |= {dotted(p): p for p in paths}
    return found


def functions():
    for module, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield module, node


def body_lines(node: ast.FunctionDef) -> int:
    body = node.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring says why; it is not the function's length
    return node.end_lineno - body[0].lineno + 1


def imported_names(tree: ast.Module) -> dict[str, str]:
    """What each name a module imports from launchlab stands for: `provenance` → hosts.provenance,
    `write_progress` → store.records.write_progress."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "launchlab":
            base = node.module.removeprefix("launchlab").lstrip(".")
            names |= {a.asname or a.name: f"{base}.{a.name}" if base else a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.asname or a.name.split(".")[-1]: a.name.removeprefix("launchlab.") for a in node.names
                      if a.name.startswith("launchlab.")}
    return names


def callee(node: ast.Call, here: str, names: dict[str, str]) -> tuple[str, str] | None:
    """(module, function) a call names: `module.f(…)` through an imported module, an imported `f(…)`, or a
    function of the calling module itself."""
    f = node.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in names:
        return names[f.value.id], f.attr
    if isinstance(f, ast.Name):
        if f.id in names:
            module, _, name = names[f.id].rpartition(".")
            return module, name
        return here, f.id
    return None


def positional_calls(paths: list[Path], covered: dict[str, Path]) -> list[str]:
    """Calls, in the given files, of a top-level function of a covered module with more than four values by
    position (a starred argument counts as none: its length is not known here)."""
    defined = {(module, node.name) for module, path in covered.items()
               for node in ast.parse(path.read_text()).body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found = []
    for path in paths:
        tree = ast.parse(path.read_text())
        here, names = dotted(path) if LIB in path.parents else path.stem, imported_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and (target := callee(node, here, names)) in defined:
                values = [a for a in node.args if not isinstance(a, ast.Starred)]
                if len(values) > MAX_POSITIONAL and target not in POSITIONAL_API:
                    found.append(f"{here}:{node.lineno} {'.'.join(target)} with {len(values)} positional values")
    return found


def test_the_run_path_and_the_analysis_are_read_whole():
    names = set(modules())
    assert {"run.lifecycle", "hosts.provenance", "hosts.nodes", "store.records", "runner.runview", "runner.plan",
            "verdicts.gpustate", "verdicts.analysis", "search"} <= names


def test_no_function_of_the_run_path_or_the_analysis_is_longer_than_40_lines():
    long = [f"{module}.{node.name}: {body_lines(node)} lines" for module, node in functions()
            if body_lines(node) > MAX_LINES]
    assert long == [], "split these into named steps"


def test_a_function_of_more_than_four_parameters_takes_the_rest_by_keyword():
    positional = []
    for module, node in functions():
        params = [a.arg for a in node.args.posonlyargs + node.args.args if a.arg not in ("self", "cls")]
        if len(params) > MAX_POSITIONAL and (module, node.name) not in POSITIONAL_API:
            positional.append(f"{module}.{node.name}({', '.join(params)})")
    assert positional == []


def test_no_call_in_the_kit_passes_more_than_four_values_by_position_into_the_run_path_or_the_analysis():
    assert positional_calls(sorted(LIB.rglob("*.py")), modules()) == []


def test_the_call_check_resolves_a_module_an_imported_function_and_a_local_one(tmp_path):
    caller = tmp_path / "steps.py"
    caller.write_text("from launchlab.hosts import provenance\nfrom launchlab.store.records import write_progress\n"
                      "def local(a, b, c, d, e):\n    pass\n"
                      "def run(x):\n    provenance.node_record(x, 0, x, None, x, ())\n"
                      "    write_progress(x, 'r', 'preflight', 0.0, None)\n    local(1, 2, 3, 4, 5)\n"
                      "    provenance.node_record(x, 0, x, preflight=None)\n    local(*x)\n")
    covered = {**modules(), "steps": caller}
    assert positional_calls([caller], covered) == [
        "steps:6 hosts.provenance.node_record with 6 positional values",
        "steps:7 store.records.write_progress with 5 positional values", "steps:8 steps.local with 5 positional values"]


def defined_twice(source: str) -> list[str]:
    """Names a module, or a class body, defines twice with def or class: the later one replaces the earlier at import,
    so the earlier is dead code that reads as live (ruff's F811 passes it when a function body names it)."""
    found = []

    def scan(body: list[ast.stmt], where: str) -> None:
        seen: set[str] = set()
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                decorated = any(isinstance(d, ast.Attribute) for d in getattr(node, "decorator_list", []))
                if node.name in seen and not decorated:  # `@x.setter` redefines a property on purpose
                    found.append(f"{where}{node.name}")
                seen.add(node.name)
                if isinstance(node, ast.ClassDef):
                    scan(node.body, f"{where}{node.name}.")

    scan(ast.parse(source).body, "")
    return found


def test_no_module_of_the_kit_or_the_tests_defines_a_name_twice():
    # lifecycle.py held two _batch_of (the earlier, dead, returned None where the later returned "-"); in a test file
    # the earlier of two tests of one name is never collected
    paths = sorted(LIB.rglob("*.py")) + sorted((LIB.parents[1] / "tests").glob("*.py"))
    twice = {str(p.relative_to(LIB.parents[1])): names for p in paths if (names := defined_twice(p.read_text()))}
    assert twice == {}


def test_the_definition_check_sees_a_function_defined_again_but_not_a_property_setter():
    source = ("def f():\n    return g()\n\ndef g():\n    return 1\n\ndef g():\n    return 2\n\n"
              "class C:\n    @property\n    def x(self):\n        return 1\n\n"
              "    @x.setter\n    def x(self, v):\n        pass\n\n"
              "    def y(self):\n        pass\n\n    def y(self):\n        pass\n")
    assert defined_twice(source) == ["g", "C.y"]


# issue 68: the whole kit, the simulator apart (a stand-in for a real server, one scripted process per file)
MAX_MODULE_LINES = 500


def kit_modules() -> dict[str, Path]:
    return {dotted(p): p for p in sorted(LIB.rglob("*.py")) if "sim" not in p.relative_to(LIB).parts}


def test_no_function_of_the_kit_outside_the_simulator_is_longer_than_40_lines():
    long = [f"{module}.{node.name}: {body_lines(node)} lines" for module, path in kit_modules().items()
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and body_lines(node) > MAX_LINES]
    assert long == [], "split these into named steps"


def test_no_module_of_the_kit_outside_the_simulator_is_longer_than_500_lines():
    long = {module: n for module, path in kit_modules().items()
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}, "split these by concern"
    assert "logparse.vllm" in kit_modules() and not any(m.startswith("sim.") for m in kit_modules())
