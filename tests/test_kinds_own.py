"""Server knowledge lives in each server kind's module (logparse/) and in the simulated server (sim/): the other
modules of the kit hold no server flag in their code — they ask the kinds registry (issue 24, point 9). A flag
the code compares with or puts on a command is a string of its own (`"--disable-custom-all-reduce"`); one cited
inside a sentence — an "e.g." in a help text, a workspace's sample question — is an example for the reader."""

import ast
import re
from pathlib import Path

LIB = Path(__file__).resolve().parents[1] / "lib" / "launchlab"
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)+")  # a long flag with a dash inside: --mem-fraction-static


def code_strings(path: Path) -> list[str]:
    """The string constants of a module's code: not its docstrings (those may cite a flag as an example)."""
    tree = ast.parse(path.read_text())
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs]


def flags_in(paths, whole: bool = False) -> dict[str, set[str]]:
    """Per module, the long flags its code strings hold; `whole`: only strings that are a flag and nothing else."""
    return {str(p.relative_to(LIB)): {f for s in code_strings(p) for f in FLAG.findall(s) if not whole or f == s}
            for p in paths}


def test_the_flags_the_server_kinds_know_appear_in_no_other_module():
    kinds = [*(LIB / "logparse").glob("*.py"), LIB / "sim" / "sglang_server.py"]  # not sim/nvidia_smi.py: no server
    known = set().union(*flags_in(kinds).values())
    assert {"--disable-custom-all-reduce", "--mem-fraction-static"} <= known
    others = [p for p in LIB.rglob("*.py") if p not in kinds and "__pycache__" not in p.parts]
    named = {path: found & known for path, found in flags_in(others, whole=True).items() if found & known}
    assert named == {}, named


def kind_arguments() -> set[str]:
    """The server arguments the kinds name (ServerKind: the names their flags are recorded under, the arguments their
    log facts read, their volatile arguments, their break-even's): the names with an underscore, which are the
    server's own (a plain word such as `port`, `host` or `model` names the kit's own things too)."""
    from launchlab.logparse.kinds import KINDS

    names: set[str] = set()
    for kind in KINDS.values():
        names |= set(kind.arg_aliases.values()) | set(kind.volatile_args)
        names |= {kind.log_facts.model, kind.log_facts.tp_size, kind.log_facts.dp_size} - {None}
        names |= {kind.break_even.arg} if kind.break_even else set()
    return {n for n in names if "_" in n}


def arguments_in(paths, names: set[str]) -> dict[str, set[str]]:
    """Per module, the kinds' argument names its code holds as strings of their own (not inside a sentence)."""
    return {str(p.relative_to(LIB) if LIB in p.parents else p.name): found for p in paths
            if (found := set(code_strings(p)) & names)}


def test_the_arguments_the_server_kinds_name_appear_in_no_other_module():
    """What a kind records its arguments under (SGLang's `tp_size`, vLLM's `tensor_parallel_size`, `nccl_port`, …)
    is the kind's to say (issue 26): the judging code asks the kind (volatile_args, log_facts, graph_capture) and
    names none of them itself."""
    names = kind_arguments()
    assert {"tp_size", "tensor_parallel_size", "nccl_port", "dist_init_addr", "mem_fraction_static"} <= names
    kinds = [*(LIB / "logparse").glob("*.py"), LIB / "sim" / "sglang_server.py"]
    others = [p for p in LIB.rglob("*.py") if p not in kinds and "__pycache__" not in p.parts]
    assert arguments_in(others, names) == {}


def test_the_check_finds_an_argument_of_a_kind_in_a_module_outside_the_kinds(tmp_path):
    module = tmp_path / "judge.py"
    module.write_text('"""Reads tp_size from the log."""\nVOLATILE = {"port", "nccl_port"}\n'
                      'def tp(args):\n    return args.get("tensor_parallel_size") or f"tp_size={args}"\n')
    assert arguments_in([module], kind_arguments()) == {"judge.py": {"nccl_port", "tensor_parallel_size"}}


def test_the_check_finds_a_server_flag_in_a_module_outside_the_kinds(tmp_path):
    module = tmp_path / "levels.py"
    module.write_text('"""Cites --disable-custom-all-reduce in its docstring."""\nFLAG = "--disable-custom-all-reduce"\n'
                      'HELP = "e.g. --mem-fraction-static"\n')
    assert {f for s in code_strings(module) for f in FLAG.findall(s) if f == s} == {"--disable-custom-all-reduce"}


def test_what_a_log_states_of_its_software_is_read_as_its_kind_says_not_from_patterns_of_all_kinds(tmp_path):
    """logfacts.py reads versions, install paths and the launch's shape through ServerKind.log_facts (issue 26):
    its code names no server, and a vLLM-only fact (the engine generation) comes from that kind's parser."""
    from launchlab.logparse import KINDS, logfacts, parse_file

    servers = re.compile(r"vllm|sglang|transformers", re.I)
    assert [s for s in code_strings(LIB / "logparse" / "logfacts.py") if servers.search(s)] == []
    assert logfacts.LABELS["engine"] == KINDS["vllm"].log_facts.labels["engine"]
    log = tmp_path / "server.log"
    log.write_text("(EngineCore pid=7) INFO 12-01 08:03:20 [core.py:94] Initializing a V1 LLM engine (v0.26.0) with "
                   "config: model='m'\n(APIServer pid=6) File \"/x/lib/python3.12/site-packages/vllm/cli.py\"\n")
    parsed = parse_file(log, server="vllm")
    assert parsed.facts == {"engine": "v1"}
    facts = logfacts.read(log, parsed)
    assert (facts["server_version"], facts["engine"], facts["python"]) == ("0.26.0", "v1", "3.12")
    log.write_text(log.read_text().replace("vllm/", "sglang/"))  # another kind's install path states nothing here
    assert "python" not in logfacts.read(log, parse_file(log, server="vllm"))
