"""Any params file is either an Experiment that plans, renders and survives its resolved dump, or a ParamsError —
never another exception. Files are generated over the schema, then mutated (wrong types, unknown keys, unicode,
huge numbers, deep nesting, alias bombs, odd YAML, bad placeholders, NUL, non-slug names, broken bytes)."""

import copy
import itertools
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from conftest import LAUNCHLAB
from launchlab import params
from launchlab.errors import ParamsError
from launchlab.runner.plan import make_plan

# Reproducible in CI: the same examples every run, nothing read from or written to a local example database.
FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

SLUG = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,12}", fullmatch=True)
IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True)
PLAIN = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="{}\x00"), max_size=16)
TEMPLATE = st.one_of(PLAIN, st.sampled_from(["{port}", "{run_id}-{host}", '{{"level": 3}}', "{{port}}", "a{{b}}c",
                                             "{master_addr}:{node_rank}/{nnodes}"]))
FLAG_VALUE = st.one_of(st.booleans(), TEMPLATE)

SIM = st.fixed_dictionaries({"transport": st.just("sim")}, optional={
    "gpus": st.integers(1, 8), "pace": st.floats(0.1, 3), "mem_total_mib": st.integers(1, 200_000),
    "gpu_name": PLAIN.filter(lambda s: "," not in s), "gpu_slots": st.just([[0], [1]])})
LOCAL = st.fixed_dictionaries({"transport": st.just("local")}, optional={"gpus": st.integers(0, 8),
                                                                          "workdir": st.just("/tmp/w d")})
SSH = st.fixed_dictionaries({"transport": st.just("ssh"), "address": SLUG}, optional={
    "port": st.integers(1, 65535), "user": IDENT, "reconnect_s": st.floats(0, 100)})
LEVEL = st.fixed_dictionaries({}, optional={
    "flags": st.dictionaries(SLUG.map(lambda s: "--" + s), FLAG_VALUE, max_size=3),
    "env": st.dictionaries(IDENT, TEMPLATE, max_size=2),
    "patches": st.lists(st.sampled_from(["/etc/hostname", "missing.diff", "x" * 300, "a/" * 3000, "/"]), max_size=2)})

WEIRD = st.one_of(
    st.integers(-(10**30), 10**30), st.floats(), st.booleans(), st.none(), st.text(max_size=30).filter(
        lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s)),
    st.sampled_from(["a\x00b", "{port:>2000000000}", "{port!r}", "{port[0]}", "{port.x}", "{}", "{", "}",
                     "../../x", "o\ud800", "on", "0.10", "012", "é€😀", "x" * 70_000, "-oProxyCommand=x", "http://x",
                     "2001-13-45"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.recursive(st.integers(), lambda inner: st.lists(inner, max_size=2), max_leaves=80))

BILLION_LAUGHS = "".join(f"{n}: &{n} [{', '.join([f'*{p}' if p else 'lol'] * 9)}]\n"
                         for p, n in zip(["", "a", "b", "c", "d", "e", "f", "g"], "abcdefghi", strict=False))
ODD_YAML = [
    "question: !!python/object/apply:os.getcwd []\n", "question: !!binary aGk=\n",
    "question: !!set {a, b}\n", "question: !!timestamp 2001-13-45\n", "question: !!float abc\n",
    "question: 2001-13-45\n", "repetitions: " + "9" * 5000 + "\n", "repetitions: 0x_\n", "x: &a [*a]\n",
    "question: \"\\ud800\"\n", "question: \"a\\0b\"\n", "base: &b {gpus: 2}\n", "\n---\nexperiment: two\n",
    "%YAML 1.1\n---\n", "question: " + "[" * 20_000 + "]" * 20_000 + "\n",
    "question: " + "{a: " * 20_000 + "1" + "}" * 20_000 + "\n", "x-lol:\n" + BILLION_LAUGHS.replace("\n", "\n  ")[:-2],
    "question: !!set a\n", "question: !!omap [a]\n", "question: !!map a\n", "\tquestion: tab\n",
    "question: |\n  a\n b\n", "? [a, b]\n: c\n", "<<: 1\n", "\ufeffquestion: bom\n",
]


# Short texts of YAML syntax and fragments of a params file: what a broken editor buffer looks like.
YAML_SOUP = st.lists(st.sampled_from([*"abc01:-[]{}&*!|>'\"%@`#,?\n\t .<", "{port}", "&a ", "*a", "!!set ", "!!binary ",
                                      "<<: ", "\\0", "experiment: x\n", "hosts:\n  b: {transport: sim}\n",
                                      "server: {kind: sglang, command: [a]}\n"]), max_size=60).map("".join)


@st.composite
def experiments(draw) -> dict:
    """A params document over the schema; most validate, some fail across fields (which is fine too)."""
    hosts = draw(st.dictionaries(SLUG, st.one_of(SIM, LOCAL, SSH), min_size=1, max_size=3))
    factors = draw(st.dictionaries(IDENT, st.dictionaries(SLUG, LEVEL, min_size=1, max_size=3), max_size=3))
    kind = draw(st.sampled_from(["sglang", "vllm", "transformers", "generic"]))
    server: dict = {"kind": kind, "command": ["python3", "-m", "srv", "--port", "{port}", *draw(st.lists(TEMPLATE, max_size=4))],
                    "env": draw(st.dictionaries(IDENT, TEMPLATE, max_size=2)),
                    "ready": {"timeout_s": draw(st.floats(1, 1000)), "health_url": "http://127.0.0.1:{port}/health"}}
    if kind == "generic" or draw(st.booleans()):
        server["ready"]["log_pattern"] = draw(st.sampled_from(["ready", "Uvicorn running on", "(a|b)+"]))
    if draw(st.booleans()):
        server["smoke"] = {"url": "http://127.0.0.1:{port}/v1", "body": draw(st.dictionaries(
            IDENT, st.one_of(PLAIN, st.integers(), st.none(), st.lists(PLAIN, max_size=3)), max_size=3))}
    doc: dict = {"experiment": draw(SLUG), "question": draw(PLAIN), "hosts": hosts, "server": server}
    if len(hosts) > 1:
        doc["host"] = draw(st.sampled_from([list(hosts)[0], list(hosts)]))
    if factors:
        doc["factors"] = factors
        doc["baseline"] = {f: next(iter(levels)) for f, levels in factors.items()}
        if draw(st.booleans()):
            combos = [dict(zip(factors, c, strict=True)) for c in itertools.product(*factors.values())]
            doc["variants"] = draw(st.lists(st.sampled_from(combos), min_size=1, max_size=4))
            doc["baseline"] = doc["variants"][0]
    if len(hosts) > 1 and draw(st.booleans()):
        doc.pop("host", None)
        doc["nodes"] = list(hosts)
        if draw(st.booleans()):
            doc["master_addr"] = draw(st.sampled_from(["10.0.0.1", "head", "fe80::1%eth0", "[::1]"]))
    optional = {"repetitions": st.integers(1, 3), "drain": st.just({"timeout_s": 5, "tolerance_mib": 64}),
                "sampler": st.sampled_from([{"kind": "nvml", "interval_ms": 5}, {}]),
                "secrets": st.lists(st.one_of(IDENT, SLUG.map(lambda s: "--" + s)), max_size=3)}
    for key, strategy in optional.items():
        if draw(st.booleans()):
            doc[key] = draw(strategy)
    return doc


def _paths(node, here=()) -> list[tuple]:
    found = [here]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, here + (key,))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _paths(value, here + (i,))
    return found


def _set(doc: dict, path: tuple, value) -> None:
    for part in path[:-1]:
        doc = doc[part]
    doc[path[-1]] = value


@st.composite
def mutated_text(draw) -> str:
    """A generated document, maybe changed in its tree, then in its text."""
    doc = copy.deepcopy(draw(experiments()))  # st.just() values are shared between examples: never edit them
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(_paths(doc)[1:]))
        action = draw(st.sampled_from(["replace", "delete", "unknown key", "non-slug key"]))
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        if action == "replace":
            _set(doc, path, draw(WEIRD))
        elif action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "unknown key" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["flagz", "gpuz", "extra", "transport", "é"]))] = draw(WEIRD)
        elif action == "non-slug key" and isinstance(parent, dict):
            parent[draw(st.sampled_from(["../../x", "a b", "-x", "", "x" * 80]))] = parent.pop(path[-1])
        if not _paths(doc)[1:]:
            break
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=draw(st.booleans()))
    for _ in range(draw(st.integers(0, 2))):
        edit = draw(st.sampled_from(["append", "splice", "truncate"]))
        if edit == "append":
            text += draw(st.sampled_from(ODD_YAML))
        elif edit == "splice" and text:
            at = draw(st.integers(0, len(text) - 1))
            text = text[:at] + draw(st.sampled_from(list("{}[]:&*!|>'\"%@`#,\t\n-?") + ["\\0", "\x85", "é"])) + text[at:]
        elif text:
            text = text[:draw(st.integers(0, len(text)))]
    return text


def check(exp: params.Experiment) -> None:
    """What a valid experiment must support: its plan, every variant's launch, and its resolved dump."""
    plan = make_plan(exp)
    assert len(plan) == params.plan_size(exp).runs
    for run in plan[:6]:
        spec = params.render(exp, run.variant, port=4321, run_id=run.run_id, host=run.host, gpus=[0])
        assert all(isinstance(t, str) and "\x00" not in t for t in spec.argv)
        assert "\x00" not in "".join(spec.env.values())
    assert params.loads(params.dump_resolved(exp)) == exp


def outcome(text: str) -> str:
    try:
        exp = params.loads(text, "fuzz.yaml")
    except ParamsError as exc:
        assert exc.problems and all(isinstance(p, str) and p for p in exc.problems)
        str(exc).encode("utf-8")  # the CLI prints it
        event("rejected")
        return "rejected"
    check(exp)
    event("valid")
    return "valid"


@settings(FUZZ, max_examples=100)
@given(doc=experiments())
def test_generated_params_are_valid_or_a_params_error(doc):
    outcome(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))


@FUZZ
@given(text=mutated_text())
def test_mutated_params_are_valid_or_a_params_error_never_another_exception(text):
    outcome(text)


@FUZZ
@given(text=YAML_SOUP)
def test_yaml_soup_is_valid_or_a_params_error(text):
    outcome(text)


@settings(FUZZ, max_examples=50)
@given(text=mutated_text(), junk=st.binary(min_size=1, max_size=4), at=st.integers(0, 10_000))
def test_mutated_bytes_read_from_a_file_are_valid_or_a_params_error(text, junk, at):
    raw = text.encode("utf-8", "surrogatepass")
    at %= len(raw) + 1
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "exp.yaml"
        path.write_bytes(raw[:at] + junk + raw[at:])
        try:
            exp = params.load(path)
        except ParamsError as exc:
            assert exc.path == str(path)
            return
        check(exp)


@pytest.mark.slow
@settings(FUZZ, max_examples=6)
@given(text=mutated_text())
def test_the_cli_validates_fuzzed_files_with_exit_0_or_2_and_no_traceback(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "exp.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        res = subprocess.run([*LAUNCHLAB, "validate", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode in (0, 2), res.stderr
    assert "Traceback" not in res.stderr
    assert (res.returncode == 0) == (outcome(text) == "valid")
