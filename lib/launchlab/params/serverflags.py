"""The server flags a params file sets, checked against the flags its kind's server is known to take: a near miss of a
known flag (`--mem-fraction-statc`) is a warning naming the flag meant, never an error — the kit's list is read off
one release (logparse/kindflags.py) and may be out of date for the release on the host."""

from __future__ import annotations

import difflib
from collections.abc import Iterator

from launchlab.logparse.kinds import KINDS
from launchlab.params import yamlfile
from launchlab.params.design import FieldPath, dotted
from launchlab.params.schema import Experiment

# how alike a flag and a known one must be to call the first a misspelling of the second (difflib's ratio): a letter
# missing, doubled or swapped stays above it (`--tp-szie` 0.89, `--enforce-eagr` 0.97); at difflib's default 0.6, real
# flags the list lacks read as typos of others (vLLM's --enable-lora as --enable-sleep-mode)
CLOSE = 0.8


def warnings(exp: Experiment, text: str) -> list[str]:
    """One line per flag of the command, of a factor level or of the search that the kind's server is not known to
    take while a known flag is close to it, located as the loader locates a problem (`line 12: factors.….flags: …`).
    A flag close to none, and every flag of a kind that keeps no list, passes without a word."""
    kind = KINDS[exp.server.kind]
    if kind.known_flags is None:
        return []
    known = kind.flag_names()
    found = []
    for path, flag in _flags_set(exp):
        name = flag.split("=", 1)[0]  # `--tp=2` sets --tp
        # a boolean flag turned off where the server takes that form (vLLM's `--no-enable-prefix-caching`)
        negated = kind.known_flags.negatable and name.startswith("--no-") and f"--{name[5:]}" in known
        if name in known or negated:
            continue
        if close := difflib.get_close_matches(name, known, n=1, cutoff=CLOSE):
            line = yamlfile.line_of(text, path)
            shown = path[:-1] if path[-2:-1] == ("flags",) else path  # a level's flag: the path ends at the flag itself
            found.append(f"{f'line {line}: ' if line else ''}{dotted(shown)}: `{name}` is not a flag launchlab knows for "
                         f"{kind.name} {kind.known_flags.version}; did you mean `{close[0]}`? (the list may be out of "
                         "date: if the server accepts it, ignore this)")
    return found


def _flags_set(exp: Experiment) -> Iterator[tuple[FieldPath, str]]:
    """Each long flag the params put on the server's command, with its field path."""
    for i, token in enumerate(exp.server.command):
        if token.startswith("--") and len(token) > 2:  # a bare `--` ends the options; it is no flag
            yield ("server", "command", i), token
    for factor, levels in exp.factors.items():
        for level, spec in levels.items():
            for flag in spec.flags:
                yield ("factors", factor, level, "flags", flag), flag
    if exp.search is not None:
        yield ("search", "flag"), exp.search.flag
