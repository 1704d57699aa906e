"""Strict YAML loading for params files: YAML 1.1 surprises and duplicate keys are errors with a line number.

PyYAML follows YAML 1.1, where `on`, `off`, `yes` and `no` are booleans and `012` is the octal number 10.
In a params file those are almost always level names, flag values or GPU ids the user meant as text, so
the loader refuses them instead of silently changing them. Duplicate mapping keys (which PyYAML resolves
by keeping the last one) are refused too.

A params file is short, hand-written text, so the loader also bounds what a hostile or broken file can make
it do (each limit stops the load with the line where it was crossed):

    MAX_FILE_BYTES    256 KiB of text (checked by the caller before decoding)
    MAX_DEPTH         64 levels of nesting, counted after alias expansion (a 20,000-deep `[[[…]]]` would
                      overflow Python's stack in the composer, pydantic or json)
    MAX_NODES         50,000 nodes, counted after alias expansion: a "billion laughs" alias bomb is a few
                      hundred bytes that expand to 10**9 nodes; it is refused, not expanded
    MAX_TEXT_CHARS    1 MiB of scalar text after alias expansion (an alias repeats a long string for free)
    MAX_SCALAR_CHARS  64 KiB in any one scalar

A NUL character or a lone UTF-16 surrogate (`"\\0"`, `"\\ud800"`) in any scalar is a problem too: no process
can receive the first in argv or env, and the second cannot be written as UTF-8.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import yaml

MAX_FILE_BYTES = 256 * 1024
MAX_DEPTH = 64
MAX_NODES = 50_000
MAX_TEXT_CHARS = 1024 * 1024
MAX_SCALAR_CHARS = 64 * 1024

_PLAIN_BOOLS = {"true", "false"}
_SURROGATE = re.compile("[\ud800-\udfff]")
_OCTAL = re.compile(r"[-+]?0[0-7_]+")
_DECIMAL_INT = re.compile(r"[-+]?(?:0|[1-9][0-9]*)")
_YAML11_FLOAT = re.compile(r"[^:_]*[:_].*")  # base 60 (`1:30.5`) or underscores (`1_0.5`): YAML 1.1 only


@dataclass(frozen=True)
class YamlProblem:
    line: int
    message: str


# What PyYAML's constructors raise, instead of a YAMLError, on values they cannot build
_CONSTRUCTOR_BUGS = (ValueError, TypeError, AttributeError, OverflowError, IndexError, KeyError)


class YamlLimitError(yaml.MarkedYAMLError):
    """The text is YAML, but past one of the loader's limits; `problem` says which, `problem_mark` where."""

    def __init__(self, problem: str, mark: yaml.Mark | None):
        super().__init__(problem=problem, problem_mark=mark)


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that records YAML 1.1 surprises instead of converting them silently, and keeps to the limits."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.problems: list[YamlProblem] = []
        self._depth = 0
        self._composed = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        # The composer recurses once per level: stop before Python's stack does, and before a huge flat file
        # has been composed in full.
        self._composed += 1
        if self._depth >= MAX_DEPTH or self._composed > MAX_NODES:
            mark = self.peek_event().start_mark
            raise YamlLimitError(_too_deep() if self._depth >= MAX_DEPTH else _too_many(), mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        self.problems += _measure(node)
        try:
            return self.construct_document(node)
        except _CONSTRUCTOR_BUGS as exc:  # raised by a container's constructor, outside construct_object
            raise yaml.constructor.ConstructorError(None, None, f"cannot read this document: {exc}",
                                                    node.start_mark) from None

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        # PyYAML's scalar constructors raise plain ValueError & co. on e.g. `2001-13-45` or `!!float abc`.
        try:
            return super().construct_object(node, deep=deep)
        except _CONSTRUCTOR_BUGS as exc:
            raise yaml.constructor.ConstructorError(None, None, f"cannot read the value {_short(node)}: {exc}",
                                                    node.start_mark) from None

    def construct_yaml_bool(self, node: yaml.ScalarNode) -> Any:
        text = node.value
        if text.lower() not in _PLAIN_BOOLS:
            self.problems.append(
                YamlProblem(
                    node.start_mark.line + 1,
                    f"`{_clip(text)}` is read as a boolean by YAML 1.1; quote it (\"{_clip(text)}\") if you mean text, "
                    "or write true/false",
                )
            )
            return text
        return super().construct_yaml_bool(node)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> Any:
        if _OCTAL.fullmatch(node.value):
            self.problems.append(
                YamlProblem(
                    node.start_mark.line + 1,
                    f"`{node.value}` is read as an octal number by YAML 1.1; quote it (\"{node.value}\")",
                )
            )
            return node.value
        if not _DECIMAL_INT.fullmatch(node.value):  # 0x2, 0b10, 1:30 (base 60), 1_000: YAML 1.1 only
            return self._yaml11_number(node, super().construct_yaml_int(node), "hex, binary, base 60 or underscores")
        return super().construct_yaml_int(node)

    def construct_yaml_float(self, node: yaml.ScalarNode) -> Any:
        if _YAML11_FLOAT.fullmatch(node.value):
            return self._yaml11_number(node, super().construct_yaml_float(node), "base 60 or underscores")
        return super().construct_yaml_float(node)

    def _yaml11_number(self, node: yaml.ScalarNode, number: float, forms: str) -> str:
        """A number only YAML 1.1 reads as one: a problem saying how to write it, and the text kept meanwhile."""
        self.problems.append(YamlProblem(
            node.start_mark.line + 1,
            f"`{_clip(node.value)}` is read as the number {number} by YAML 1.1 ({forms}); write {number} in decimal, "
            f"or quote it (\"{_clip(node.value)}\") if you mean text"))
        return node.value

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        if not isinstance(node, yaml.MappingNode):  # `!!set a`: let PyYAML say "expected a mapping node"
            return super().construct_mapping(node, deep=deep)
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                self.problems.append(
                    YamlProblem(
                        key_node.start_mark.line + 1,
                        f"key `{_clip(str(key))}` appears twice (first on line {seen[key]}); YAML would keep only the "
                        "last one",
                    )
                )
            elif isinstance(key, (str, int, float, bool)):
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _too_deep() -> str:
    return (f"nested deeper than {MAX_DEPTH} levels (counting aliases); a params file needs a few levels — "
            "flatten the structure")


def _too_many() -> str:
    return (f"more than {MAX_NODES:,} values (counting each alias as the values it repeats); a params file "
            "needs far fewer — is an alias repeating a large structure (a \"billion laughs\" alias bomb)?")


def _short(node: yaml.Node) -> str:
    value = node.value if isinstance(node, yaml.ScalarNode) else ""
    return repr(value[:40] + ("…" if len(value) > 40 else ""))


def _clip(text: str) -> str:
    """User text for a message: at most 40 characters, and printable as UTF-8 (surrogates escaped)."""
    text = text[:40] + ("…" if len(text) > 40 else "")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _measure(root: yaml.Node) -> list[YamlProblem]:
    """Check the composed document against the limits as if every alias were expanded, without expanding it.

    Each distinct node is visited once and its expanded size memoized, so an alias bomb costs as much as its
    text; a path longer than MAX_DEPTH (which an alias inside its own anchor makes endless) stops the walk.
    Returns the problems of single scalars (NUL, surrogates, length); raises YamlLimitError for the rest.
    """
    sizes: dict[int, tuple[int, int, int]] = {}  # id(node) -> (nodes, scalar chars, height) once expanded
    on_path: set[int] = set()
    problems: list[YamlProblem] = []

    def visit(node: yaml.Node, depth: int) -> tuple[int, int, int]:
        key = id(node)
        if key in on_path:
            raise YamlLimitError("an alias refers to a node that contains it, which makes an endless structure; "
                                 "remove that alias", node.start_mark)
        if key not in sizes:
            if depth >= MAX_DEPTH:
                raise YamlLimitError(_too_deep(), node.start_mark)
            if isinstance(node, yaml.ScalarNode):
                problems.extend(_scalar_problems(node))
                # reported above; replaced so that no later step (pydantic's Rust core cannot take them) trips on it
                node.value = _SURROGATE.sub("\ufffd", node.value)
                sizes[key] = (1, len(node.value), 1)
            else:
                on_path.add(key)
                sizes[key] = _collection_size(node, depth, visit)
                on_path.discard(key)
        if depth + sizes[key][2] > MAX_DEPTH:
            raise YamlLimitError(_too_deep(), node.start_mark)
        return sizes[key]

    visit(root, 0)
    return problems


def _collection_size(node: yaml.Node, depth: int, visit) -> tuple[int, int, int]:
    """(nodes, scalar chars, height) of an expanded sequence or mapping; YamlLimitError past a limit."""
    children = node.value if isinstance(node, yaml.SequenceNode) else [n for kv in node.value for n in kv]
    nodes, chars, height = 1, 0, 0
    for child in children:
        n, c, h = visit(child, depth + 1)
        nodes, chars, height = nodes + n, chars + c, max(height, h)
        if nodes > MAX_NODES:
            raise YamlLimitError(_too_many(), node.start_mark)
        if chars > MAX_TEXT_CHARS:
            raise YamlLimitError(f"more than {MAX_TEXT_CHARS // 1024} KiB of text (counting each alias "
                                 "as the text it repeats); shorten the values", node.start_mark)
    return nodes, chars, height + 1


def _scalar_problems(node: yaml.ScalarNode) -> list[YamlProblem]:
    line, text, problems = node.start_mark.line + 1, node.value, []
    if "\x00" in text:
        problems.append(YamlProblem(line, f"{_short(node)} contains a NUL character (\\0), which no process can "
                                          "receive in argv or env; remove it"))
    if _SURROGATE.search(text):
        problems.append(YamlProblem(line, f"{_short(node)} contains a lone UTF-16 surrogate (\\ud800-\\udfff), "
                                          "which is not text; write the character itself"))
    if len(text) > MAX_SCALAR_CHARS:
        problems.append(YamlProblem(line, f"a value of {len(text):,} characters is longer than the limit of "
                                          f"{MAX_SCALAR_CHARS // 1024} KiB; shorten it"))
    return problems


_StrictLoader.add_constructor("tag:yaml.org,2002:bool", _StrictLoader.construct_yaml_bool)
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)
_StrictLoader.add_constructor("tag:yaml.org,2002:float", _StrictLoader.construct_yaml_float)


def load_strict(text: str) -> tuple[Any, list[YamlProblem]]:
    """Parse YAML text; return the data and the list of surprises found. Raises yaml.YAMLError on bad syntax."""
    loader = _StrictLoader(text)
    try:
        data = loader.get_single_data()
    finally:
        loader.dispose()
    return data, loader.problems


def line_of(text: str, path: tuple[str | int, ...]) -> int | None:
    """The 1-based line of the node at a field path (mapping keys and list indexes), or None if absent.

    Used to point an error at a line. When the path runs past the document (a missing field), the line of
    the deepest node that exists is returned.
    """
    index = _line_index(text)
    if index is None:
        return None
    here: tuple = ()
    line, inner = index[here]
    for part in path:
        step = next((here + (p,) for p in ([part, str(part)] if isinstance(part, int) else [str(part)])
                     if here + (p,) in index), None)
        if step is None:
            return inner
        here = step
        line, inner = index[here]
    return line


@functools.lru_cache(maxsize=8)
def _line_index(text: str) -> dict[tuple, tuple[int, int]] | None:
    """Every field path of the document -> (line of its key or item, line where its value starts).

    Built once per text (an error message per field would otherwise compose the document each time); a node
    reached again through an alias is not walked again, so its inner paths point at the alias.
    """
    loader = _StrictLoader(text)
    try:
        root = loader.get_single_node()
    except yaml.YAMLError:
        return None
    finally:
        loader.dispose()
    if root is None:
        return None
    index = {(): (root.start_mark.line + 1, root.start_mark.line + 1)}
    seen: set[int] = set()
    todo = [((), root)]
    while todo:
        path, node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and path + (key.value,) not in index:
                    index[path + (key.value,)] = (key.start_mark.line + 1, value.start_mark.line + 1)
                    todo.append((path + (key.value,), value))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                index[path + (i,)] = (item.start_mark.line + 1, item.start_mark.line + 1)
                todo.append((path + (i,), item))
    return index
