"""Field types shared by every params model — the experiment's (params/schema.py) and each transport's host
entry (hosts/*_spec.py): the strict base model, limits, paths, GPU indices, and the alphabets of names.

Every name-like field (the experiment, hosts, factors, levels, env variables, flags, ssh addresses and users,
Slurm partitions, accounts, gres and times) is checked by one `Alphabet` below: the whole value must match the
alphabet its message documents, and no control character passes. A name becomes a folder name, a run id, a line
of an env file that a shell sources, or an argument of ssh and sbatch: `re.match(r"^…$")` would let a final
newline through (`$` matches before it), and `AUDITX\n` in an env file is a command.

It imports nothing of launchlab but escaping (which imports nothing of it), so params (which builds its hosts
union from the transport registry) and the transports' specs can both use it without an import cycle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictStr

from launchlab.escaping import CONTROL, one_line

MAX_PATH_CHARS = 4096
MAX_TIMEOUT_S = 7 * 24 * 3600
MAX_MIB = 1 << 24  # 16 TiB: more memory than any GPU or tolerance needs
MAX_GPUS = 1024
MAX_NAME_CHARS = 64


@dataclass(frozen=True)
class Alphabet:
    """What a kind of name may be: `pattern` matched against the whole value (never a prefix, never up to a
    final newline), at most `max_chars` characters, and no control character whatever the pattern says.
    Messages say it as "must be {kind} of at most N characters: {chars}"."""

    kind: str
    pattern: str
    chars: str
    max_chars: int | None = None
    flags: re.RegexFlag = re.ASCII
    _rx: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_rx", re.compile(self.pattern, self.flags))

    def accepts(self, value: object, max_chars: int | None = None) -> bool:
        limit = max_chars if max_chars is not None else self.max_chars
        return (isinstance(value, str) and (limit is None or len(value) <= limit)
                and self._rx.fullmatch(value) is not None and CONTROL.search(value) is None)

    def problem(self, what: str, value: str, max_chars: int | None = None) -> str | None:
        """Why `value` cannot be the `what` (`host name`, `address`), or None; the value shown with its control
        characters escaped, so the message itself cannot break a line or drive a terminal."""
        if self.accepts(value, max_chars):
            return None
        limit = max_chars if max_chars is not None else self.max_chars
        length = f" of at most {limit} characters" if limit is not None else ""
        return f"{what} `{shown(value)}` must be {self.kind}{length}: {self.chars}"

    def check(self, what: str, max_chars: int | None = None) -> AfterValidator:
        """A pydantic validator of a field holding one such name."""
        def check(value: str) -> str:
            if problem := self.problem(what, value, max_chars):
                raise ValueError(problem)
            return value

        return AfterValidator(check)


def shown(value: object, limit: int = 40) -> str:
    """A user's value for a message: clipped, control characters escaped (`\\x0a`); what is no string (a number,
    null in a JSON file someone else wrote) as JSON writes it."""
    if not isinstance(value, str):
        value = "null" if value is None else repr(value)
    return one_line(value if len(value) <= limit else value[:limit] + "…")


# names that become folder names and parts of run ids: the experiment, hosts, factor levels
SLUG = Alphabet("a slug", r"[A-Za-z0-9][A-Za-z0-9._-]*",
                "a letter or digit, then letters, digits, '.', '_' or '-' (it names folders and run ids)",
                MAX_NAME_CHARS)
# a run's id: the name of its folder under runs/, read back from a manifest others may have written, so never a path
RUN_ID = Alphabet("a run id", r"[A-Za-z0-9][A-Za-z0-9._-]*",
                  "a letter or digit, then letters, digits, '.', '_' or '-' (a folder name under runs/, never a path)",
                  200)
# factor names (columns of the frames, keys of the baseline)
IDENTIFIER = Alphabet("an identifier", r"[A-Za-z_][A-Za-z0-9_]*", "a letter or '_', then letters, digits or '_'",
                      MAX_NAME_CHARS)
# environment variable names: a line `NAME=value` of an env file a shell sources, an `export NAME=…`
ENV_NAME = Alphabet("an environment variable name", r"[A-Za-z_][A-Za-z0-9_]*",
                    "a letter or '_', then letters, digits or '_'", 255)
# a flag a level sets or removes on the server command; it reaches the command line quoted, never a shell word
FLAG = Alphabet("a flag", r"-[^\s{}]*", "'-' first, then no spaces, braces or control characters, "
                "e.g. --mem-fraction-static", 1000, flags=re.UNICODE)
# a flag named under `secrets:` (its value is masked wherever it appears)
SECRET_FLAG = Alphabet("a flag", r"-\S+", "'-' first, then no spaces or control characters, e.g. --api-key", 1000,
                       flags=re.UNICODE)
# the long flag a threshold search bisects: without its dashes (and `-` as `_`) it names a column of runs.parquet and
# is part of every probe's run id, a folder name, so it is held to a slug's alphabet
SEARCH_FLAG = Alphabet("a long flag of the server command", r"--[A-Za-z0-9][A-Za-z0-9._-]*",
                       "'--', then a letter or digit, then letters, digits, '.', '_' or '-', e.g. --mem-fraction-static",
                       MAX_NAME_CHARS + 2)
# a host name, IP address (v6 in brackets, with a %zone) or ssh_config alias: reaches ssh and URLs, never an option
ADDRESS = Alphabet("a host name, an IP address or an ssh_config alias", r"[A-Za-z0-9_.:%\[\]][A-Za-z0-9_.:%\[\]-]*",
                   "letters, digits, '.', '-', '_', ':', '%', '[', ']', not starting with '-'", 253)
# a login name (a trailing `$`: Samba machine accounts)
USER = Alphabet("a user name", r"[A-Za-z0-9_][A-Za-z0-9._-]*\$?",
                "letters, digits, '.', '_', '-', not starting with '.' or '-' (a final '$' allowed)", 64)
# Slurm's partition and account names, gres and time limits, as sbatch takes them
SLURM_NAME = Alphabet("a Slurm name", r"[A-Za-z0-9_][A-Za-z0-9_.+-]*",
                      "letters, digits, '_', '.', '+', '-', not starting with '.', '+' or '-', e.g. gpu", 200)
GRES = Alphabet("generic resources", r"[A-Za-z0-9_]+(:[A-Za-z0-9_.-]+)*(,[A-Za-z0-9_]+(:[A-Za-z0-9_.-]+)*)*",
                "as Slurm writes them, e.g. gpu:8 or gpu:h100:4", 200)
SLURM_TIME = Alphabet("a Slurm time limit", r"([0-9]+-)?[0-9]+(:[0-9]{1,2}){0,2}", "e.g. 00:30:00 or 1-00:00:00", 200)


class StrictModel(BaseModel):
    # allow_inf_nan: a timeout of .inf or a fraction of .nan is a typo, not a setting. strict: a count is an
    # integer as written — `repetitions: true` is not 1, nor is "1" (a string) or 2.0; a number of seconds may
    # still be written as an integer
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)


def no_control(what: str) -> AfterValidator:
    def check(value: str) -> str:
        if CONTROL.search(value):
            raise ValueError(f"{what} contains a control character (newline, tab, escape, …); remove it")
        return value

    return AfterValidator(check)


def address(what: str) -> AfterValidator:
    """A host name, IP address or ssh_config alias: it reaches ssh and URLs, so never an option (`-…`)."""
    return ADDRESS.check(what)


PathStr = Annotated[StrictStr, Field(max_length=MAX_PATH_CHARS), no_control("the path")]
GpuIndex = Annotated[int, Field(ge=0, lt=MAX_GPUS)]
