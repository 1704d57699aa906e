"""Located loading of params files: read, parse strictly, validate, and report every problem with the file,
line and field path the user wrote."""

from __future__ import annotations

import difflib
import hashlib
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from launchlab import masking, safefiles
from launchlab.errors import ParamsError
from launchlab.hosts import TRANSPORTS
from launchlab.params import yamlfile
from launchlab.params.design import DesignError, dotted
from launchlab.params.schema import (
    DrainSpec,
    Experiment,
    Level,
    ReadySpec,
    SamplerSpec,
    ServerSpec,
    SmokeSpec,
)


def load(path: str | Path) -> Experiment:
    """Read and validate a params file; raise ParamsError listing every problem."""
    path = Path(path)
    try:
        with safefiles.open_regular(path) as f:  # a FIFO or device is refused at once, never waited on
            raw = f.read(yamlfile.MAX_FILE_BYTES + 1)  # bounded: the path may be a huge file
    except FileNotFoundError:
        near = [p.name for p in path.parent.glob("*.y*ml")] if path.parent.is_dir() else []
        close = difflib.get_close_matches(path.name, near, n=1)
        hint = f"; did you mean {path.parent / close[0]}?" if close else ""
        raise ParamsError(str(path), [f"cannot read the file: no such file{hint}"]) from None
    except OSError as exc:
        raise ParamsError(str(path), [f"cannot read the file: {exc.strerror or exc}"]) from None
    return loads(_decode(raw, str(path)), str(path))


# what the kit writes where the user must fill something in: `launchlab diagnose`'s TODO-… words and `# TODO` comments,
# `launchlab init`'s model placeholder — a file holding one is a draft, not yet an experiment
_PLACEHOLDER = re.compile(r"\bTODO-[\w-]*|#\s*TODO\b|/models/your-model\b")


def unfilled(path: str | Path) -> list[str]:
    """The placeholders the kit wrote that a params file still holds, each as a problem naming its line (validate and
    run refuse such a file before anything is launched); the file's own problems are load's."""
    with safefiles.open_regular(Path(path)) as f:
        text = _decode(f.read(yamlfile.MAX_FILE_BYTES + 1), str(path))
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        if (m := _PLACEHOLDER.search(line)) is not None:
            what = m.group()
            hint = ("the server's own command" if what.startswith("TODO-the-server") else
                    "your model's path" if "your-model" in what else "what the TODO names, then delete the marker")
            found.append(f"line {number}: `{what.strip()}` is a placeholder the kit wrote: fill in {hint}")
    return found


def load_filled(path: str | Path) -> Experiment:
    """load, and ParamsError where the file still holds a placeholder the kit wrote (unfilled)."""
    exp = load(path)
    if problems := unfilled(path):
        raise ParamsError(str(path), problems)
    return exp


def _decode(raw: bytes, source: str) -> str:
    """The file's text, or a ParamsError saying why it is not a UTF-8 text file."""
    _check_size(len(raw), source)
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ParamsError(source, ["line 1: the file is UTF-16 text; save it as UTF-8"])
    if b"\x00" in raw:
        line = raw.count(b"\n", 0, raw.index(b"\x00")) + 1
        raise ParamsError(source, [f"line {line}: the file contains NUL bytes, so it is binary, not YAML text; "
                                   "give the path of a params .yaml file"])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ParamsError(source, [f"line {line}: byte 0x{raw[exc.start]:02x} (at offset {exc.start}) is not UTF-8; "
                                   "save the file as UTF-8"]) from None


def _check_size(size: int, source: str) -> None:
    if size > yamlfile.MAX_FILE_BYTES:
        raise ParamsError(source, [f"the file is larger than {yamlfile.MAX_FILE_BYTES // 1024} KiB, the limit for a "
                                   "params file (short hand-written YAML); is this the right file?"])


def loads(text: str, source: str = "<params>") -> Experiment:
    """Validate params text; `source` names it in messages and anchors relative patch paths."""
    _check_size(len(text.encode("utf-8", "surrogatepass")), source)
    try:
        data, surprises = yamlfile.load_strict(text)
    except yaml.YAMLError as exc:
        raise ParamsError(source, [_yaml_error(exc, text)]) from None
    problems = [f"line {p.line}: {p.message}" for p in surprises]
    if not isinstance(data, dict):
        raise ParamsError(source, problems + ["the file must be a YAML mapping (experiment:, hosts:, server:, …)"])
    problems += _resolve_patches(data, Path(source).parent if source != "<params>" else Path.cwd(), text)
    try:
        experiment = Experiment.model_validate(data)
    except ValidationError as exc:
        problems += [line for err in exc.errors() for line in _describe(err, data, text)]
    if problems:
        # messages quote the user's values, which may hold lone surrogates (already a problem themselves)
        raise ParamsError(source, [p.encode("utf-8", "backslashreplace").decode("utf-8") for p in problems])
    return experiment


def _yaml_error(exc: yaml.YAMLError, text: str) -> str:
    """One line for a YAML error: where, and what (a limit, a character YAML refuses, or a syntax error)."""
    if isinstance(exc, yaml.reader.ReaderError):  # e.g. a control character; PyYAML gives its code point
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        message = f"line {text.count(chr(10), 0, exc.position) + 1}: character {code:#06x} is not allowed in YAML; remove it"
    else:
        mark = getattr(exc, "problem_mark", None)
        what = "" if isinstance(exc, yamlfile.YamlLimitError) else "not valid YAML: "
        message = f"{f'line {mark.line + 1}: ' if mark else ''}{what}{getattr(exc, 'problem', None) or exc}"
    return message.encode("utf-8", "backslashreplace").decode("utf-8")


def _resolve_patches(data: dict, base: Path, text: str) -> list[str]:
    """Patch paths are relative to the params file: make them absolute (the resolved experiment.yaml in a run
    directory must still find them) and check that each one is there."""
    problems = []
    factors = data.get("factors")
    if not isinstance(factors, dict):
        return problems
    for factor, levels in factors.items():
        for level, spec in (levels or {}).items() if isinstance(levels, dict) else []:
            patches = spec.get("patches") if isinstance(spec, dict) else None
            if not isinstance(patches, list):
                continue
            for i, patch in enumerate(patches):
                if not isinstance(patch, str):
                    continue
                line = yamlfile.line_of(text, ("factors", factor, level, "patches", i))
                where = f"line {line}: factors.{factor}.{level}.patches[{i}]"
                try:
                    path = (base / patch).resolve()
                    found = path.is_file()
                except (OSError, ValueError) as exc:  # a name too long, a NUL (reported by the loader), …
                    problems.append(f"{where}: cannot use this path ({exc.__class__.__name__}: {str(exc)[:80]})")
                    continue
                patches[i] = str(path)
                if not found:
                    problems.append(f"{where}: no such file {path}; "
                                    "give the path of a unified diff relative to this params file")
    return problems


def _all_field_names() -> set[str]:
    names: set[str] = set()
    hosts = [t.spec for t in TRANSPORTS.values()]
    for model in (Level, *hosts, SmokeSpec, ReadySpec, ServerSpec, DrainSpec, SamplerSpec, Experiment):
        names |= set(model.model_fields)
    return names


def _user_path(loc: tuple, data: Any) -> tuple:
    """The error location as the user wrote it: drop pydantic's union tags and validator names."""
    path: list = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            path.append(part)
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            path.append(part)
            node = node[part]
        elif (isinstance(node, dict) and not isinstance(part, int) and part not in TRANSPORTS
              and "[" not in str(part)):
            path.append(part)  # a missing or unknown key: keep it, it is what the message is about
            node = None
    return tuple(path)


def _describe(err: dict, data: Any, text: str) -> list[str]:
    """The messages of one pydantic error: one, or one per problem of a DesignError, each with its line."""
    cause = err.get("ctx", {}).get("error")
    if isinstance(cause, DesignError):
        return [_located(path, message, text) for path, message in cause.problems]
    path = _user_path(tuple(err["loc"]), data)
    kind = err["type"]
    value = err.get("input")
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(str(path[-1]), _all_field_names(), n=1)
        if close and close[0] == str(path[-1]):
            msg = "is not a field here (it belongs to another transport or section); remove it"
        else:
            hint = f" (did you mean `{close[0]}`?)" if close else ""
            msg = f"unknown field{hint}; remove it or fix its spelling"
    elif kind == "missing":
        msg = "required field is missing"
    elif kind in ("string_type", "bool_type") and isinstance(value, (int, float)) and not isinstance(value, bool):
        msg = (f"must be a quoted string, got the number {value!r}: YAML reads unquoted numbers as numbers "
               f"(0.10 becomes 0.1); write it in quotes")
    elif kind == "union_tag_invalid":
        tag = str(err.get("ctx", {}).get("tag"))[:40]
        msg = f"unknown transport {tag!r}{_did_you_mean(tag, TRANSPORTS)}; use one of: {', '.join(TRANSPORTS)}"
    elif kind == "literal_error" and isinstance(value, str):  # an enum: a server kind, a sampler, …
        options = re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", "")))
        msg = f"{_shown(value)} is not one of: {', '.join(options)}{_did_you_mean(value, options)}"
    elif kind == "union_tag_not_found":
        *first, last = TRANSPORTS
        msg = f"needs `transport:` ({', '.join(first)} or {last})"
    elif kind == "string_pattern_mismatch":
        msg = f"{_shown(value)} does not have the expected form ({err['ctx']['pattern']})"
    else:
        msg = err["msg"].removeprefix("Value error, ")
    return [_located(path, msg, text)]


def _did_you_mean(word: str, options) -> str:
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _located(path: tuple, message: str, text: str) -> str:
    line = yamlfile.line_of(text, path)
    return f"{f'line {line}: ' if line else ''}{dotted(path)}: {message}"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:60] + "…"


def dump_resolved(exp: Experiment, masked: bool = False) -> str:
    """The experiment with every default filled in, as YAML; it loads back to the same experiment. `masked`
    (the record written to a run directory): every secret value replaced (masking.py) — runs read the
    user's own params file, never this record."""
    data = exp.model_dump(mode="json")
    if masked:
        data = masking.resolved_params(data, masking.for_run(exp), exp.secrets)
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
    if yaml.safe_load(text) != data:
        # PyYAML writes a few characters (NEL, U+2028, …) raw that it then reads as line breaks; escaped
        # as \N, \L or \u and four hex digits in double quotes, every string reads back as written
        text = yaml.safe_dump(data, sort_keys=False, allow_unicode=False)
    return text


def digest(path: str | Path) -> str:
    """sha256 of a params file: a run checks that the file it reads is the one its batch validated."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
