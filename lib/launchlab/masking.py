"""Secrets never reach a run directory: masking by name and by value.

A value is secret when its environment variable's name says so (TOKEN, KEY, SECRET, PASS, AUTH, PAT,
CREDENTIAL, DSN, WEBHOOK, `*_PWD`), when it follows a secret flag (`--api-key`, `--hf-token`, any `--…-token`,
`--…-key`, `--…-secret`, `--…-password`), when its shape says so whatever its name (SHAPES: the password of a URL
`scheme://user:password@host`, a key-like user of one as a Sentry DSN's `https://KEY@host/1`, a webhook's URL
(Slack, Discord, Teams), a token of a known prefix: `ghp_…`, `xoxb-…`, `hf_…`, `sk-…`, `AKIA…`, a JSON Web Token, a
connection string's `AccountKey=`/`SharedAccessKey=`/`Password=`, a PEM private key's body), or when
the params file lists its name under `secrets:`, or when it sits under a secret-like key of the smoke
request's body (`api_key`, `token`, `password`, `authorization`, … — not `max_tokens`). Masking by name is not
enough — a server prints its own arguments (SGLang's `server_args=ServerArgs(… api_key='sk-…' …)`) and its
environment, a token ends up in a URL — so every value found secret is also masked wherever else it appears:
in argv, env, logs, notebooks, provenance, status and the resolved params. The values found include those of
the environment a server inherits without the params saying so (the caller's shell, a host's login
environment) under a secret-like or declared name.

A value that spans lines (a PEM key) is masked whole and line by line: logs are masked a line at a time and a
server may print it escaped (`\\n`), so each of its lines is a value of its own. Masking by value has a floor:
values (and lines of values) shorter than MIN_VALUE_LEN characters are masked by name only, and values the kit
finds only by their name in an inherited environment need MIN_INHERITED_LEN (`TOKENIZERS_PARALLELISM=false`
must not blank every "false" of a log). The real values exist only in the user's params file, the caller's
environment and, on a host, in the 0600 env file the server sources.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from launchlab import safefiles

MASK = "****"
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASS|AUTH|CREDENTIAL|DSN|WEBHOOK|JWT|CONN(?:ECTION)?_?STR|(?:^|_)PAT(?:$|_)|"
                         r"_PWD$", re.IGNORECASE)
SECRET_FLAG = re.compile(r"^--?(?:[\w-]*[-_])?(?:api[-_]?key|token|key|secret|password|passwd|pass|auth|credentials?)$",
                         re.IGNORECASE)
_URL_PASSWORD = re.compile(r"(?P<scheme>[A-Za-z][\w+.-]*://)(?P<user>[^:/@\s]*):(?P<password>[^@/\s]+)@")
# Secrets by their shape, whatever name holds them (the caller's MYSQL_PWD is a name; a webhook under NOTIFY is not):
# each pattern's group `secret` is what is masked.
SHAPES = (
    # a URL's user that is a key (a Sentry DSN `https://<32 hex>@o1.ingest.sentry.io/42`), not a login name
    re.compile(r"[A-Za-z][\w+.-]*://(?P<secret>[\w-]{16,})@"),
    # a webhook's URL: its path is the credential
    re.compile(r"https?://(?:hooks\.slack\.com|(?:[\w-]+\.)?discord(?:app)?\.com/api/webhooks|[\w.-]+\.webhook\.office"
               r"\.com|hooks\.zapier\.com)(?P<secret>/[^\s'\"<>]{8,})"),
    # tokens of known prefixes: GitHub, Slack, Hugging Face, OpenAI-style, GitLab, AWS access key ids
    re.compile(r"(?<![\w-])(?P<secret>(?:gh[pousr]_|github_pat_)[A-Za-z0-9_]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|"
               r"hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{20,}|glpat-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16})(?![\w-])"),
    # a JSON Web Token (CI_JOB_JWT, an OIDC id token): header.payload.signature, the first two base64url JSON
    re.compile(r"(?<![\w-])(?P<secret>eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*)"),
    # a connection string's key or password (Azure's AccountKey= / SharedAccessKey=, ODBC and ADO.NET's Password=)
    re.compile(r"(?<![\w])(?:AccountKey|SharedAccessKey|Password|Pwd)=(?P<secret>[^;\s'\"&]{4,})", re.IGNORECASE),
    # a private key's body (PEM): what lies between its BEGIN and END lines
    re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?P<secret>.+?)-----END", re.DOTALL),
)
# the words of a secret JSON key in a request body, as a whole word of the key (`api_key`, `x-auth-token`; not `max_tokens`)
SECRET_KEY = re.compile(r"^(?:[\w-]*[-_])?(?:api[-_]?key|token|key|secret|password|passwd|pass|auth|authorization|"
                        r"credentials?|cookie)$", re.IGNORECASE)
_ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.+)$", re.DOTALL)
MIN_VALUE_LEN = 4  # shorter values ("1", "on") would mask every digit of a log; they are masked by name only
MIN_INHERITED_LEN = 8  # an inherited value found by its name alone (not set by the params, nor declared secret)


def secret_name(name: str, extra: Iterable[str] = ()) -> bool:
    return bool(SECRET_NAME.search(name)) or name in set(extra)


def secret_flag(flag: str, extra: Iterable[str] = ()) -> bool:
    return bool(SECRET_FLAG.match(flag.split("=", 1)[0])) or flag.split("=", 1)[0] in set(extra)


def secret_key(key: str, extra: Iterable[str] = ()) -> bool:
    """A key of a JSON request body whose value is secret (`api_key`, `token`, `Authorization`, a declared name)."""
    return bool(SECRET_KEY.match(key)) or key in set(extra)


def url_passwords(text: str) -> list[str]:
    return [m["password"] for m in _URL_PASSWORD.finditer(text)]


def shaped(text: str) -> list[str]:
    """The secrets in a text by their shape (SHAPES): URL passwords, key-like URL users, webhook paths, tokens of
    known prefixes."""
    return url_passwords(text) + [m["secret"] for shape in SHAPES for m in shape.finditer(text)]


def _mask_shapes(text: str) -> str:
    for shape in SHAPES:
        if shape.search(text):
            text = shape.sub(lambda m: m.group(0).replace(m["secret"], MASK), text)
    return text


def pieces(value: str, shortest: int = MIN_VALUE_LEN) -> set[str]:
    """What of one secret value to mask: the value, its JSON-escaped form (a notebook or record holding it), and
    when it spans lines each line of it (stripped) — every one at least `shortest` characters long."""
    found = {value, json.dumps(value, ensure_ascii=False)[1:-1]}
    if "\n" in value or "\r" in value:
        found.update(line.strip() for line in re.split(r"\r\n|\r|\n", value))
    return {p for p in found if len(p) >= shortest}


def _copy(src: BinaryIO, dst: BinaryIO, chunk_bytes: int) -> int:
    total = 0
    while block := src.read(chunk_bytes):
        total += len(block)
        dst.write(block)
    return total


@dataclass(frozen=True)
class Masker:
    """Replaces every known secret value, longest first, in text, bytes and nested records."""

    values: tuple[str, ...] = ()

    @classmethod
    def collect(cls, env: Mapping[str, str] = {}, argv: Iterable[str] = (), extra: Iterable[str] = (),
                more: Iterable[str] = ()) -> Masker:
        """The secret values of a launch: secret-named env values, values of secret flags, URL passwords."""
        extra = tuple(extra)
        found = {v for k, v in env.items() if secret_name(k, extra)}
        argv = list(argv)
        for i, token in enumerate(argv):
            if "=" in token and token.startswith("-") and secret_flag(token, extra):
                found.add(token.split("=", 1)[1])
            elif secret_flag(token, extra) and token.startswith("-") and i + 1 < len(argv):
                found.add(argv[i + 1])
            elif (m := _ASSIGNMENT.match(token)) and secret_name(m["name"], extra):
                found.add(m["value"])  # `env HF_TOKEN=… python3 …`, `HF_TOKEN=… python3 …` (an imported command)
        for text in [*env.values(), *argv]:
            found.update(shaped(text))
        found.update(more)
        return cls.of(found)

    @classmethod
    def of(cls, values: Iterable[str], shortest: int = MIN_VALUE_LEN) -> Masker:
        """A masker of these secret values (each with its pieces), longest first."""
        found: set[str] = set()
        for value in values:
            found |= pieces(value, shortest)
        return cls(tuple(sorted(found, key=len, reverse=True)))

    @classmethod
    def inherited(cls, env: Mapping[str, str], extra: Iterable[str] = ()) -> Masker:
        """The secret values of an environment a server inherits without the params naming them (the caller's
        shell, a host's login environment): declared names (`secrets:`) and URL passwords from MIN_VALUE_LEN
        characters, values of secret-like names from MIN_INHERITED_LEN."""
        extra = tuple(extra)
        declared = [v for k, v in env.items() if k in extra]
        for value in env.values():
            declared += shaped(value)
        by_name = [v for k, v in env.items() if k not in extra and secret_name(k)]
        return cls.of(declared).merge(cls.of(by_name, MIN_INHERITED_LEN))

    def merge(self, other: Masker) -> Masker:
        return Masker(tuple(sorted(set(self.values) | set(other.values), key=len, reverse=True)))

    def text(self, text: str) -> str:
        for value in self.values:
            if value in text:
                text = text.replace(value, MASK)
        return _mask_shapes(_URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text))

    def bytes(self, data: bytes) -> bytes:
        for value in self.values:
            raw = value.encode()
            if raw in data:
                data = data.replace(raw, MASK.encode())
        return data

    def stream(self, src: BinaryIO, dst: BinaryIO, chunk_bytes: int = 1 << 20) -> int:
        """Copy src to dst with every secret value masked, in memory bounded by chunk_bytes whatever its lines
        (a 2 GB log without a newline is one line). One pass of all the values at once (longest first at each
        place), decided up to where the chunk's end cannot change a match; the rest, shorter than the longest
        value, waits for the next chunk: the copy is the same as that pass over the whole file. The bytes read."""
        raws = sorted((v.encode() for v in self.values), key=len, reverse=True)
        if not raws:
            return _copy(src, dst, chunk_bytes)
        pattern, mask = re.compile(b"|".join(re.escape(r) for r in raws)), MASK.encode()
        keep, carry, total = len(raws[0]) - 1, b"", 0
        while block := src.read(chunk_bytes):
            total += len(block)
            data = carry + block
            cut, done, out = max(0, len(data) - keep), 0, []
            for match in pattern.finditer(data):
                if match.start() >= cut:  # it might be longer, or another value, once more bytes come
                    break
                out += [data[done:match.start()], mask]
                done = match.end()
            cut = max(cut, done)
            out.append(data[done:cut])
            dst.write(b"".join(out))
            carry = data[cut:]
        dst.write(pattern.sub(mask, carry))
        return total

    def mask_file(self, path: Path) -> None:
        """Mask a file in place (a log can be hundreds of MB, and any of its lines as long: Masker.stream)."""
        if not self.values:
            return
        with safefiles.open_regular(path, follow_symlinks=False) as src:
            mode = os.fstat(src.fileno()).st_mode & 0o777
            with safefiles.replacing(path, mode=mode) as tmp, open(tmp, "wb") as dst:
                self.stream(src, dst)

    def record(self, obj: object) -> object:
        """A JSON-like record with every string masked (dict keys included)."""
        if isinstance(obj, str):
            return self.text(obj)
        if isinstance(obj, Mapping):
            return {self.text(str(k)) if isinstance(k, str) else k: self.record(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.record(v) for v in obj]
        return obj

    def env(self, env: Mapping[str, str], extra: Iterable[str] = ()) -> dict[str, str]:
        """An environment for the record: secret names masked, other values masked where they hold a secret."""
        return {k: MASK if secret_name(k, extra) else self.text(v) for k, v in env.items()}

    def argv(self, argv: Iterable[str], extra: Iterable[str] = ()) -> list[str]:
        """A command for the record: the value after a secret flag masked, secrets inside other tokens too."""
        out: list[str] = []
        hide_next = False
        for token in argv:
            if hide_next:
                out.append(MASK)
                hide_next = False
            elif token.startswith("-") and "=" in token and secret_flag(token, extra):
                out.append(f"{token.split('=', 1)[0]}={MASK}")
            else:
                hide_next = token.startswith("-") and secret_flag(token, extra)
                out.append(self.text(token))
        return out


def for_experiment(exp) -> Masker:
    """Every secret value a params file holds: in the server's command and env, in every level and in the smoke
    request's body. (`exp` is a params.Experiment; typed loosely so this module stays below params in the
    layering.)"""
    extra = tuple(exp.secrets)
    more: list[str] = []
    if exp.server.smoke is not None:
        more += body_secrets(exp.server.smoke.body, extra)
    for levels in exp.factors.values():
        for level in levels.values():
            more += [v for k, v in level.env.items() if secret_name(k, extra)]
            more += [v for f, v in level.flags.items() if isinstance(v, str) and secret_flag(f, extra)]
            for value in [*level.env.values(), *(v for v in level.flags.values() if isinstance(v, str))]:
                more += shaped(value)
    return Masker.collect(exp.server.env, exp.server.command, extra, more)


def for_run(exp, environ: Mapping[str, str] | None = None) -> Masker:
    """The secrets of running an experiment from this process: the params file's (for_experiment) and those of
    the environment every process the kit starts here inherits (`environ`, default this process's): a server on
    a local or simulated host prints them as its own."""
    return for_experiment(exp).merge(Masker.inherited(os.environ if environ is None else environ, exp.secrets))


def body_secrets(body: object, extra: Iterable[str] = (), secret: bool = False) -> list[str]:
    """The secret values of a JSON request body: every scalar under a secret key (at any depth), and URL
    passwords anywhere."""
    if isinstance(body, Mapping):
        return [v for k, item in body.items() for v in body_secrets(item, extra, secret or secret_key(str(k), extra))]
    if isinstance(body, list):
        return [v for item in body for v in body_secrets(item, extra, secret)]
    if isinstance(body, bool) or body is None:
        return []
    text = str(body)
    return [text] if secret else shaped(text)


def masked_body(body: object, masker: Masker, extra: Iterable[str] = ()) -> object:
    """A request body for the record: the value under a secret key replaced whole, secrets elsewhere masked."""
    if isinstance(body, Mapping):
        return {k: MASK if secret_key(str(k), extra) else masked_body(v, masker, extra) for k, v in body.items()}
    if isinstance(body, list):
        return [masked_body(v, masker, extra) for v in body]
    return masker.record(body)


def resolved_params(data: object, masker: Masker, extra: Iterable[str] = (), key: str = "") -> object:
    """The resolved params (a model_dump) for the run directory: env values, secret flags' values, the smoke
    body's secret keys and every secret value elsewhere masked."""
    if isinstance(data, Mapping):
        if key == "body":
            return masked_body(data, masker, extra)
        if key == "env":
            return masker.env({k: str(v) for k, v in data.items()}, extra)
        if key == "flags":
            return {f: (MASK if isinstance(v, str) and secret_flag(f, extra) else masker.record(v))
                    for f, v in data.items()}
        return {k: resolved_params(v, masker, extra, str(k)) for k, v in data.items()}
    if isinstance(data, list) and key == "command":
        return masker.argv([str(t) for t in data], extra)
    if isinstance(data, list):
        return [resolved_params(v, masker, extra) for v in data]
    return masker.record(data)
