"""Located loading of params files: read, parse strictly, validate, and report every problem with the file,
line and field path the user wrote."""

from __future__ import annotations

import difflib
import hashlib
import logging
import re
import shlex
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from launchlab import masking, safefiles
from launchlab.errors import ParamsError
from launchlab.hosts import TRANSPORTS
from launchlab.params import serverflags, yamlfile
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

# named as the CLI names itself: it prints a record as `launchlab: <message>`, like its other lines (cli.main)
log = logging.getLogger("launchlab")


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
    return _unfilled_in(_text_of(path))


def _text_of(path: str | Path) -> str:
    with safefiles.open_regular(Path(path)) as f:
        return _decode(f.read(yamlfile.MAX_FILE_BYTES + 1), str(path))


def _unfilled_in(text: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        if (m := _PLACEHOLDER.search(line)) is not None:
            what = m.group()
            hint = ("the server's own command" if what.startswith("TODO-the-server") else
                    "your model's path" if "your-model" in what else "what the TODO names, then delete the marker")
            found.append(f"line {number}: `{what.strip()}` is a placeholder the kit wrote: fill in {hint}")
    return found


def load_filled(path: str | Path) -> Experiment:
    """load, and ParamsError where the file still holds a placeholder the kit wrote (unfilled). What validate and run
    read before anything is launched, so it also warns (a logged warning, never an error) of each flag the server is not
    known to take that is close to one it is (serverflags.py)."""
    exp = load(path)
    text = _text_of(path)
    if problems := _unfilled_in(text):
        raise ParamsError(str(path), problems)
    for warning in serverflags.warnings(exp, text):
        log.warning("warning: %s: %s", path, warning)
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
        raise ParamsError(source, [_yaml_error(exc, text, source)]) from None
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


def _yaml_error(exc: yaml.YAMLError, text: str, source: str) -> str:
    """The problem of a YAML error: where, and what (a limit, a character YAML refuses, or a syntax error). A syntax
    error says file:line:column and shows the line with a caret under the column; where PyYAML names the structure
    it was reading (a `{` never closed is noticed only on a later line), that structure's start is shown too."""
    mark = getattr(exc, "problem_mark", None)
    if isinstance(exc, yaml.reader.ReaderError):  # e.g. a control character; PyYAML gives its code point
        code = exc.character if isinstance(exc.character, int) else ord(exc.character)
        message = f"line {text.count(chr(10), 0, exc.position) + 1}: character {code:#06x} is not allowed in YAML; remove it"
    elif isinstance(exc, yamlfile.YamlLimitError) or mark is None:
        message = f"{f'line {mark.line + 1}: ' if mark else ''}{getattr(exc, 'problem', None) or exc}"
    else:
        # `line N:` first, as every problem of the loader; then the place as editors and terminals link it
        lines = [f"line {mark.line + 1}: not valid YAML: {exc.problem or exc} ({source}:{mark.line + 1}:{mark.column + 1})",
                 *_pointed(text, mark)]
        start = exc.context_mark
        if exc.context and start is not None and (start.line, start.column) != (mark.line, mark.column):
            closer = {"flow mapping": "}", "flow sequence": "]"}.get(exc.context.removeprefix("while parsing a "))
            hint = f": is its closing `{closer}` missing, or a `,` between two entries?" if closer else ""
            lines += [f"{exc.context}, which starts at {source}:{start.line + 1}:{start.column + 1}{hint}",
                      *_pointed(text, start)]
        message = "\n    ".join(lines)  # under the first line, which ParamsError indents by two
    return message.encode("utf-8", "backslashreplace").decode("utf-8")


def _pointed(text: str, mark: yaml.Mark) -> list[str]:
    """The line of a YAML mark, numbered, and a caret under its column (`  12 | key: {a: 1` / `     |      ^`); a
    long line is cut to the part around the column."""
    lines = text.splitlines()
    line = lines[mark.line] if mark.line < len(lines) else ""  # the end of the file: a mark past its last line
    start = max(0, mark.column - 60)
    cut = ("…" if start else "") + line[start:start + 100].replace("\t", " ")  # a tab would shift the caret
    number = str(mark.line + 1)
    return [f"  {number} | {cut}", f"  {' ' * len(number)} | {' ' * (mark.column - start + (1 if start else 0))}^"]


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
    elif kind in _EXPECTED:
        msg = _wrong_type(kind, err["msg"], value, path)
    else:
        msg = err["msg"].removeprefix("Value error, ")
    return [_located(path, msg, text)]


# pydantic's type errors: what the field takes, in words, and a value that shows how it is written
_EXPECTED = {
    "int_type": ("a whole number", "4"), "int_parsing": ("a whole number", "4"),
    "int_from_float": ("a whole number", "4"),
    "float_type": ("a number", "30"), "float_parsing": ("a number", "30"),
    "bool_type": ("true or false", "true"), "bool_parsing": ("true or false", "true"),
    "string_type": ("text", '"text"'),
    "list_type": ("a YAML list", "[a, b]"),
    "dict_type": ("a YAML mapping", "{key: value}"), "model_type": ("a YAML mapping of its fields", "{key: value}"),
}


def _wrong_type(kind: str, said: str, value: Any, path: tuple) -> str:
    """A type error in the user's terms: pydantic's words, the value the file holds, and what to write instead. A
    string where a list belongs is shown as that list (a command: its words, as a shell would split them)."""
    what, example = _EXPECTED[kind]
    said = "Input should be a valid dictionary" if kind == "model_type" else said  # not "or instance of ReadySpec"
    field = path[-1] if path and isinstance(path[-1], str) else None
    if kind == "list_type" and isinstance(value, str) and field is not None:  # the hint shows the value
        words = [_clip(w) for w in (_words(value) if field == "command" else [value])]
        listed = yaml.safe_dump(words[:5], default_flow_style=True, allow_unicode=True, width=10**6).strip()
        listed = listed[:-1] + ", …]" if len(words) > 5 else listed  # the start is enough to show the form
        return (f"{said}, but the file holds one string; write it as a YAML list"
                f"{' of its words' if field == 'command' else ''}: `{field}: {listed}`")
    advice = f"write {what}, e.g. `{field}: {example}`" if field is not None else f"write {what}"
    return f"{said}, but the file holds {_held(value)}; {advice}"


def _words(command: str) -> list[str]:
    """A command line's words as a shell splits them (quotes kept together); on a quote left open, at the spaces."""
    try:
        return shlex.split(command) or [command]
    except ValueError:
        return command.split() or [command]


def _held(value: Any) -> str:
    """A value as the file holds it, for a message: text in quotes, anything else as YAML writes it."""
    if value is None:
        return "an empty value"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        written = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10**6).strip()
        return f"{'a mapping' if isinstance(value, dict) else 'a list'} {_clip(written)}"
    return _shown(value)


def _clip(text: str) -> str:
    return text if len(text) <= 60 else text[:60] + "…"


def _did_you_mean(word: str, options) -> str:
    close = difflib.get_close_matches(word, list(options), n=1)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _located(path: tuple, message: str, text: str) -> str:
    line = yamlfile.line_of(text, path)
    return f"{f'line {line}: ' if line else ''}{dotted(path)}: {message}"


def _shown(value: Any) -> str:
    return _clip(repr(value))


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
