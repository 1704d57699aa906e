"""Every name-like field of a params file accepts exactly its documented alphabet: the whole value (a final
newline is not "the end"), no control character, nothing more. The oracle of each field is written here as plain
character sets, apart from the patterns the kit uses, and checked against the kit's real validation of a whole
params file; an accepted name never puts a line break into an env file, a run id or a run folder's name."""

import copy
import string
import subprocess
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from conftest import LAUNCHLAB, write_params
from launchlab import params
from launchlab.hosts import commands
from launchlab.runner.plan import make_plan

NAMES = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow])

LETTERS, DIGITS = string.ascii_letters, string.digits


def is_control(c: str) -> bool:
    return unicodedata.category(c) == "Cc"


def only(value: str, chars: str) -> bool:
    return all(c in chars for c in value)


def slug(limit: int):
    return lambda v: 0 < len(v) <= limit and v[0] in LETTERS + DIGITS and only(v, LETTERS + DIGITS + "._-")


def identifier(limit: int):
    return lambda v: 0 < len(v) <= limit and v[0] in LETTERS + "_" and only(v, LETTERS + DIGITS + "_")


def flag(v: str) -> bool:
    return v.startswith("-") and len(v) <= 1000 and not any(c.isspace() or c in "{}" or is_control(c) for c in v)


def secret(v: str) -> bool:
    as_flag = v.startswith("-") and 1 < len(v) <= 1000 and not any(c.isspace() or is_control(c) for c in v)
    return identifier(255)(v) or as_flag


def search_flag(v: str) -> bool:
    return v.startswith("--") and slug(64)(v[2:])


def address(v: str) -> bool:
    return 0 < len(v) <= 253 and not v.startswith("-") and only(v, LETTERS + DIGITS + "._-:%[]")


def user(v: str) -> bool:
    core = v[:-1] if v.endswith("$") else v
    return 0 < len(v) <= 64 and core != "" and core[0] in LETTERS + DIGITS + "_" and only(core, LETTERS + DIGITS + "._-")


def slurm_name(v: str) -> bool:
    return 0 < len(v) <= 200 and v[0] in LETTERS + DIGITS + "_" and only(v, LETTERS + DIGITS + "_.+-")


def gres(v: str) -> bool:
    def item(text: str) -> bool:
        kind, *parts = text.split(":")
        return (kind != "" and only(kind, LETTERS + DIGITS + "_")
                and all(p != "" and only(p, LETTERS + DIGITS + "_.-") for p in parts))
    return 0 < len(v) <= 200 and all(item(i) for i in v.split(","))


def slurm_time(v: str) -> bool:
    days, _, clock = v.rpartition("-") if "-" in v else ("", "", v)
    if "-" in v and (days == "" or not only(days, DIGITS)):
        return False
    parts = clock.split(":")
    return (len(v) <= 200 and len(parts) <= 3 and parts[0] != "" and only(parts[0], DIGITS)
            and all(1 <= len(p) <= 2 and only(p, DIGITS) for p in parts[1:]))


SIM = {"transport": "sim", "gpus": 2, "pace": 0.1}
BASE = {
    "experiment": "names",
    "hosts": {"box": SIM},
    "server": {"kind": "sglang", "command": ["python3", "-m", "launchlab.sim.sglang_server", "--port", "{port}"]},
    "factors": {"f": {"a": {}, "b": {}}},
    "baseline": {"f": "a"},
}


def at(path: tuple, value):
    """The base params with `value` put at `path` (a function of the name, for names that are keys)."""
    def make(name: str) -> dict:
        doc = copy.deepcopy(BASE)
        node = doc
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value(name)
        return doc
    return make


def level_named(name: str) -> dict:
    doc = copy.deepcopy(BASE)
    doc["factors"] = {"f": {name: {}, "zz": {}}}
    doc["baseline"] = {"f": "zz"}
    return doc


def factor_named(name: str) -> dict:
    doc = copy.deepcopy(BASE)
    doc["factors"] = {name: {"a": {}}}
    doc["baseline"] = {name: "a"}
    return doc


def host_referenced(field: str):
    """`host:` or `nodes:` naming a host that hosts: defines under that very name: the reference is checked as a
    name of its own, before it is looked up."""
    def make(name: str) -> dict:
        doc = copy.deepcopy(BASE)
        doc["hosts"] = {"box": SIM, name: SIM}
        doc[field] = name if field == "host" else [name, "box"]
        return doc
    return make


def slurm(key: str):
    return at(("hosts", "box"), lambda v: {"transport": "slurm", "partition": "gpu", key: v})


# field → (params file with the name in it, the documented alphabet, its seeds: valid names that mutations start from)
FIELDS = {
    "experiment": (at(("experiment",), lambda v: v), slug(100), ["audit", "a.b_c-1"]),
    "host name": (at(("hosts",), lambda v: {v: SIM}), slug(64), ["box", "gpu-01"]),
    "host reference": (host_referenced("host"), slug(64), ["gpu-01"]),
    "nodes reference": (host_referenced("nodes"), slug(64), ["node-1"]),
    "level name": (level_named, slug(64), ["esc", "0.85", "on"]),
    "factor name": (factor_named, identifier(64), ["mem_fraction", "_x"]),
    "server env name": (at(("server", "env"), lambda v: {v: "1"}), identifier(255), ["AUDITX", "_A1"]),
    "level env name": (at(("factors", "f", "a"), lambda v: {"env": {v: "1"}}), identifier(255), ["NCCL_DEBUG"]),
    "level flag": (at(("factors", "f", "a"), lambda v: {"flags": {v: "1"}}), flag, ["--mem-fraction-static", "-x"]),
    "secret": (at(("secrets",), lambda v: [v]), secret, ["DB_URL", "--api-key"]),
    "search flag": (at(("search",), lambda v: {"flag": v, "low": "0.5", "high": "0.9", "resolution": "0.1"}),
                    search_flag, ["--mem-fraction-static", "--x.y_z"]),
    "ssh address": (at(("hosts", "box"), lambda v: {"transport": "ssh", "address": v}), address,
                    ["gpu-box", "10.0.0.2", "[fe80::1%eth0]"]),
    "ssh user": (at(("hosts", "box"), lambda v: {"transport": "ssh", "address": "gpu-box", "user": v}), user,
                 ["alice", "svc.1", "host$"]),
    "master_addr": (at(("master_addr",), lambda v: v), address, ["10.0.0.1", "node-0"]),
    "slurm login": (slurm("login"), address, ["login-1", "local"]),
    "slurm partition": (slurm("partition"), slurm_name, ["gpu", "a100+x"]),
    "slurm account": (slurm("account"), slurm_name, ["myproj"]),
    "slurm gres": (slurm("gres"), gres, ["gpu:8", "gpu:h100:4,nic:1"]),
    "slurm time": (slurm("time"), slurm_time, ["00:30:00", "1-00:00:00", "30"]),
}

# characters a hostile name is built from: the alphabets' own, their neighbours, shell and ssh specials, every kind
# of line break, control characters (C0, DEL, C1), unicode letters and digits, spaces
HOSTILE = list(LETTERS[:6] + DIGITS[:4] + "._-:%[]$+,={}/\\'\"`;|&*?~! \t\n\r\x00\x01\x07\x0b\x0c\x1b\x7f"
               "\x85\x9b\x9d\u2028\u2029\u00a0éß٣\u202e")
CHAR = st.one_of(st.sampled_from(HOSTILE), st.characters(blacklist_categories=("Cs",)))


LINE_BREAKS = ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u2028"]


def edges(seeds: list[str]) -> list[str]:
    """The names every field is checked on before the generated ones: each seed with a line break after it,
    an escape or a NUL inside it, a '-' or a space before it, a unicode digit or letter, and empty."""
    found = [""]
    for seed in seeds:
        found += [seed + b for b in LINE_BREAKS]
        found += ["-" + seed, " " + seed, seed + " ", seed[:1] + "\x1b]0;x\x07" + seed[1:], seed + "\x00", seed + "\x9b",
                  seed + "٣", "é" + seed, seed + "\u202e", seed * 300]
    return found


@st.composite
def name_for(draw, seeds: list[str]) -> str:
    """A name near the alphabet's edge: a valid seed, then up to three mutations (a character appended,
    prepended or inserted, a '-' before it, a line break after it, the name repeated past its limit, or the
    whole name replaced by hostile text)."""
    name = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(0, 3))):
        c = draw(CHAR)
        how = draw(st.sampled_from(["append", "prepend", "insert", "dash", "newline", "replace", "long"]))
        if how == "append":
            name += c
        elif how == "prepend":
            name = c + name
        elif how == "insert":
            i = draw(st.integers(0, len(name)))
            name = name[:i] + c + name[i:]
        elif how == "dash":
            name = "-" + name
        elif how == "newline":
            name += draw(st.sampled_from(LINE_BREAKS))
        elif how == "replace":
            name = draw(st.text(CHAR, max_size=12))
        else:
            name = name * draw(st.integers(10, 80))
    return name


def accepted(doc: dict) -> params.Experiment | None:
    try:
        return params.Experiment.model_validate(doc)
    except ValidationError:
        return None


def check_name(field: str, name: str) -> None:
    """Accepted ⇔ in the field's documented alphabet; once accepted, it cannot break a line where it lands."""
    make, alphabet, _ = FIELDS[field]
    exp = accepted(make(name))
    assert (exp is not None) == alphabet(name), (field, name)
    if exp is None:
        return
    assert not any(is_control(c) for c in name)
    if field.endswith("env name"):  # one line of its own in the env file a shell sources
        text = commands.env_file_text({name: "1"})
        assert text.splitlines()[1:] == [f"{name}=1"] and text.count("\n") == 2
    if field in ("experiment", "host name", "level name", "factor name", "search flag"):
        # run ids name folders (a searched flag is part of each probe's); the experiment names the folder of
        # its run directories
        ids = [r.run_id for r in make_plan(exp)] if exp.search is None else [exp.search.factor]
        for text in [exp.experiment, *ids]:
            assert len(text.splitlines()) == 1 and "/" not in text and not any(is_control(c) for c in text)


@pytest.mark.parametrize("field", list(FIELDS))
def test_each_seed_name_is_accepted_so_the_property_tests_both_sides(field):
    make, alphabet, seeds = FIELDS[field]
    for seed in seeds:
        assert alphabet(seed), seed
        assert accepted(make(seed)) is not None, seed


@pytest.mark.parametrize("field", list(FIELDS))
def test_a_name_is_accepted_exactly_when_it_is_in_its_documented_alphabet(field):
    for name in edges(FIELDS[field][2]):
        check_name(field, name)

    @NAMES
    @given(name_for(FIELDS[field][2]))
    def generated(name: str) -> None:
        check_name(field, name)

    generated()


VALID_PARTS = {
    "experiment": "experiment: audit\n",
    "hosts": "hosts:\n  box: {transport: sim, gpus: 2}\n",
    "server": "server:\n  kind: sglang\n  command: [python3, -m, launchlab.sim.sglang_server, --port, \"{port}\"]\n",
    "factors": "factors:\n  f:\n    a: {}\n    ok: {}\nbaseline: {f: ok}\n",
}
# the issue's four: (the part of the file replaced, how the message shows the name, the field it names)
HOSTILE_PARTS = {
    "level": ("factors", 'factors:\n  f:\n    "esc\\n": {}\n    ok: {}\nbaseline: {f: ok}\n',
              "level name of factor `f` `esc\\x0a`", "factors"),
    "host": ("hosts", 'hosts:\n  "box\\n": {transport: sim, gpus: 2}\nhost: box\n', "host name `box\\x0a`", "hosts"),
    "experiment": ("experiment", 'experiment: "audit\\n"\n', "experiment name `audit\\x0a`", "experiment"),
    "env": ("server", VALID_PARTS["server"] + '  env: {"AUDITX\\n": "1"}\n', "environment variable name `AUDITX\\x0a`",
            "server.env"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(HOSTILE_PARTS))
def test_validate_refuses_a_name_ending_in_a_newline_naming_the_file_and_field(tmp_path, name):
    part, text, shown, field = HOSTILE_PARTS[name]
    path = write_params(tmp_path, "".join({**VALID_PARTS, part: text}.values()), "hostile.yaml")
    proc = subprocess.run([*LAUNCHLAB, "validate", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert str(path) in proc.stderr and f": {field}: " in proc.stderr and shown in proc.stderr, proc.stderr


@pytest.mark.slow
def test_the_same_files_with_plain_names_validate(tmp_path):
    path = write_params(tmp_path, "".join(VALID_PARTS.values()), "plain.yaml")
    proc = subprocess.run([*LAUNCHLAB, "validate", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
