"""Strict YAML loading for params files: YAML 1.1 surprises and duplicate keys are errors with a line number.

PyYAML follows YAML 1.1, where `on`, `off`, `yes` and `no` are booleans and `012` is the octal number 10.
In a params file those are almost always level names, flag values or GPU ids the user meant as text, so
the loader refuses them instead of silently changing them. Duplicate mapping keys (which PyYAML resolves
by keeping the last one) are refused too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

_PLAIN_BOOLS = {"true", "false"}
_OCTAL = re.compile(r"^[-+]?0[0-7_]+$")


@dataclass(frozen=True)
class YamlProblem:
    line: int
    message: str


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that records YAML 1.1 surprises instead of converting them silently."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self.problems: list[YamlProblem] = []

    def construct_yaml_bool(self, node: yaml.ScalarNode) -> Any:
        text = node.value
        if text.lower() not in _PLAIN_BOOLS:
            self.problems.append(
                YamlProblem(
                    node.start_mark.line + 1,
                    f"`{text}` is read as a boolean by YAML 1.1; quote it (\"{text}\") if you mean text, "
                    "or write true/false",
                )
            )
            return text
        return super().construct_yaml_bool(node)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> Any:
        if _OCTAL.match(node.value):
            self.problems.append(
                YamlProblem(
                    node.start_mark.line + 1,
                    f"`{node.value}` is read as an octal number by YAML 1.1; quote it (\"{node.value}\")",
                )
            )
            return node.value
        return super().construct_yaml_int(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                self.problems.append(
                    YamlProblem(
                        key_node.start_mark.line + 1,
                        f"key `{key}` appears twice (first on line {seen[key]}); YAML would keep only the last one",
                    )
                )
            elif isinstance(key, (str, int, float, bool)):
                seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


_StrictLoader.add_constructor("tag:yaml.org,2002:bool", _StrictLoader.construct_yaml_bool)
_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)


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
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    line = None
    for part in path:
        if node is None:
            break
        line = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            match = [(k, v) for k, v in node.value if k.value == str(part)]
            if not match:
                return line
            line = match[0][0].start_mark.line + 1
            node = match[0][1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            return line
    if node is not None and line is None:
        line = node.start_mark.line + 1
    return line
