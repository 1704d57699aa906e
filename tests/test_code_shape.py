"""The run path and the analysis read as named steps (issue 26): no function there longer than 40 lines (its
docstring apart), and a function of more than four parameters takes the rest by keyword, so a call says what
each value is. Read from the source with `ast`."""

import ast
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib" / "launchlab"
RUN_PATH = ("run/lifecycle", "run/watch", "run/cleanup", "run/recovery", "hosts/nodes", "runner/batch",
            "runner/searchbatch", "runner/notebooks", "runner/runview", "verdicts/runstatus")
ANALYSIS = tuple(f"verdicts/{m}" for m in ("analysis", "confounds", "derivedargs", "levelchecks", "verdict", "thresholds",
                                           "ordereffects", "question", "budget", "frames", "compare"))
MAX_LINES = 40
# run_variant.ipynb — and every run notebook a run directory keeps — calls run_variant with five positional
# arguments; a saved notebook must run again as it was
POSITIONAL_API = {("runner/runview", "run_variant")}


def functions():
    for module in RUN_PATH + ANALYSIS:
        tree = ast.parse((LIB / f"{module}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield module, node


def body_lines(node: ast.FunctionDef) -> int:
    body = node.body
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring says why; it is not the function's length
    return node.end_lineno - body[0].lineno + 1


def test_no_function_of_the_run_path_or_the_analysis_is_longer_than_40_lines():
    long = [f"{module}.{node.name}: {body_lines(node)} lines" for module, node in functions()
            if body_lines(node) > MAX_LINES]
    assert long == [], "split these into named steps"


def test_a_function_of_more_than_four_parameters_takes_the_rest_by_keyword():
    positional = []
    for module, node in functions():
        params = [a.arg for a in node.args.posonlyargs + node.args.args if a.arg not in ("self", "cls")]
        if len(params) > 4 and (module, node.name) not in POSITIONAL_API:
            positional.append(f"{module}.{node.name}({', '.join(params)})")
    assert positional == []
