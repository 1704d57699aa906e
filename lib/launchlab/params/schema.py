"""The params schema: pydantic models of the fields of an experiment and their limits.

A params file names the hosts, the baseline server command and the factors to vary. Every model forbids
unknown keys, flag and env values must be YAML strings (so `0.10` cannot silently become `0.1`), and every
problem is reported with the file, line and field path. Checks that span several fields (references,
placeholders, the size of the plan) are in design.py.

Names that become folder names or parts of run ids (the experiment, hosts, factor levels) are slugs;
values that reach a shell are quoted by hosts/commands/, and those that reach ssh or a URL are checked
here and in the transports' specs (a `hosts.<name>` entry is the spec of the transport it names:
hosts/*_spec.py, registered in hosts.TRANSPORTS; the field types both use are in fields.py). Limits beyond
the loader's (yamlfile.py): names of at most 64 characters (the experiment 100), a command of at most 4,096
tokens, at most 1,024 flags or env variables per level, timeouts of at most a week, no infinite or NaN numbers.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StrictBool, StrictStr, field_validator, model_validator

from launchlab import fields
from launchlab.fields import CONTROL as _CONTROL
from launchlab.fields import MAX_MIB, MAX_TIMEOUT_S, PathStr
from launchlab.fields import StrictModel as _Strict
from launchlab.fields import address as _address
from launchlab.hosts import TRANSPORTS
from launchlab.logparse.kinds import KINDS
from launchlab.logparse.serverkind import ReadyRules
from launchlab.params import design
from launchlab.params.design import MAX_NAME_CHARS, slug_problem
from launchlab.params.searchspec import SearchSpec

MAX_EXPERIMENT_CHARS = 100
MAX_COMMAND_TOKENS = 4096
MAX_ENTRIES = 1024  # flags or env variables of one level, env variables of the server

# The registered server kinds as a Literal, so the JSON Schema lists them as an enum and a typo names them.
ServerKindName = Literal[tuple(KINDS)]


def _slug(what: str, limit: int = MAX_NAME_CHARS) -> AfterValidator:
    def check(value: str) -> str:
        if problem := slug_problem(what, value, limit):
            raise ValueError(problem)
        return value

    return AfterValidator(check)


def _url(value: str) -> str:
    if not re.match(r"^https?://", value) or _CONTROL.search(value) or " " in value:
        raise ValueError(f"`{value[:60]}` must be an http:// or https:// URL without spaces, "
                         "e.g. http://127.0.0.1:{port}/health")
    return value


Url = Annotated[StrictStr, AfterValidator(_url)]
FlagValue = StrictBool | StrictStr


def _check_env_names(env: dict[str, str]) -> dict[str, str]:
    problems = [p for name in env if (p := fields.ENV_NAME.problem("environment variable name", name))]
    if problems:
        raise ValueError("; ".join(problems))
    return env


class Level(_Strict):
    """What one level of a factor changes: command-line flags, environment variables, and patches (unified
    diffs against the server's installed package, applied before the launch and reverted after it)."""

    flags: dict[str, FlagValue] = Field({}, max_length=MAX_ENTRIES, description=(
        "flags this level sets on the command, e.g. {--mem-fraction-static: \"0.85\"}; values are strings; true adds "
        "the flag bare, false removes it"))
    env: dict[str, StrictStr] = Field({}, max_length=MAX_ENTRIES, description="environment variables this level sets "
                                                                            "(values are strings)")
    patches: list[PathStr] = Field([], max_length=64, description="unified diffs against the server's installed "
                                   "package, applied before the launch and reverted after it")
    instrument: bool = Field(False, description=(
        "apply the server kind's own instrumentation patch (it prints the numbers the server sizes its KV cache "
        "from) for the version installed on the host, which the kit reads there before anything is launched; a "
        "version the kit has no patch for stops the batch, naming it"))

    @field_validator("flags")
    @classmethod
    def _flags_look_like_flags(cls, flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
        problems = [p for name in flags if (p := fields.FLAG.problem("flag", name))]
        if problems:
            raise ValueError("; ".join(problems))
        return flags

    _env_names = field_validator("env")(_check_env_names)


# a `hosts.<name>` entry: the spec of the transport it names (hosts/__init__.py TRANSPORTS), picked by `transport:`
HostSpec = Annotated[functools.reduce(operator.or_, (t.spec for t in TRANSPORTS.values())),
                     Field(discriminator="transport")]


class ReadySpec(_Strict):
    timeout_s: float = Field(900, gt=0, le=MAX_TIMEOUT_S, description="a run not ready after this long is a "
                                                                       "`timeout`, s")
    health_url: Url | None = Field(None, description="ready once this answers 200, asked from the server's host, "
                                                     "e.g. http://127.0.0.1:{port}/health")
    log_pattern: str | None = Field(None, max_length=4096,
                                    description="regex of the ready line; default from the server kind")
    fatal_patterns: list[Annotated[str, Field(max_length=4096)]] = Field(
        [], max_length=256, description="regexes of log lines that mean the launch failed, beyond the kind's own")

    @field_validator("log_pattern", "fatal_patterns")
    @classmethod
    def _regexes_compile(cls, value: Any) -> Any:
        for pattern in [value] if isinstance(value, str) else value or []:
            try:
                re.compile(pattern)
            except (re.error, RecursionError, OverflowError) as exc:  # re's parser recurses once per group
                raise ValueError(f"`{pattern[:80]}` is not a usable regular expression: {exc}") from None
        return value


class SmokeSpec(_Strict):
    """A request sent once the server is ready: some servers allocate memory, or fail, only on the first one.
    A ready server whose smoke request does not answer `expect_status` is `degraded`."""

    url: Url = Field(description="e.g. http://127.0.0.1:{port}/v1/completions")
    body: dict[str, Any] = Field({}, description="sent as JSON: mappings, lists, strings, numbers, true/false, null; "
                                 "the values of secret-like keys (api_key, token, password, authorization, …) are "
                                 "masked in every file of a run directory")
    timeout_s: float = Field(120, gt=0, le=MAX_TIMEOUT_S, description="how long to wait for the answer, s")
    expect_status: int = Field(200, ge=100, le=599, description="the HTTP status a healthy server answers")

    @field_validator("body")
    @classmethod
    def _body_is_json(cls, body: dict[str, Any]) -> dict[str, Any]:
        if problem := _json_problem(body, ""):
            raise ValueError(problem)
        return body


def _json_problem(value: Any, where: str) -> str | None:
    """Why value cannot be sent as JSON (a YAML date, set, binary or .inf), or None."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"`{where or '(body)'}`: key {key!r} must be a string (quote it)"
            if problem := _json_problem(item, f"{where}.{key}" if where else key):
                return problem
    elif isinstance(value, list):
        return next((p for i, item in enumerate(value) if (p := _json_problem(item, f"{where}[{i}]"))), None)
    elif isinstance(value, float) and not math.isfinite(value):
        return f"`{where}`: {value} is not a JSON number"
    elif value is not None and not isinstance(value, (str, int, float, bool)):
        return f"`{where}`: a {type(value).__name__} cannot be sent as JSON; quote it to send it as a string"
    return None


class ServerSpec(_Strict):
    kind: ServerKindName = Field(description="which server writes the log: its parser, ready line and fatal lines")
    command: list[StrictStr] = Field(min_length=1, max_length=MAX_COMMAND_TOKENS, description=(
        "the baseline command as a list of strings; {port}, {run_id}, {host}, {gpus}, {node_rank}, {nnodes} and "
        "{master_addr} are filled in per run"))
    env: dict[str, StrictStr] = Field({}, max_length=MAX_ENTRIES, description="environment variables of every run "
                                                                            "(values are strings)")
    ready: ReadySpec = Field(ReadySpec(), description="when a run counts as ready, failed or timed out")
    smoke: SmokeSpec | None = Field(None, description="one request sent once the server is ready")
    stop_grace_s: float = Field(10, gt=0, le=MAX_TIMEOUT_S, description="after SIGTERM, how long before SIGKILL, s")

    _env_names = field_validator("env")(_check_env_names)

    @model_validator(mode="after")
    def _kind_without_ready_line_needs_a_ready_rule(self) -> ServerSpec:
        if KINDS[self.kind].ready_pattern is None and not (self.ready.log_pattern or self.ready.health_url):
            raise ValueError(f"a {self.kind} server needs ready.log_pattern or ready.health_url to know when it is ready")
        return self

    def rules(self) -> ReadyRules:
        """The ready line and fatal patterns a run watches for: the kind's, with the `ready:` section's own added."""
        return KINDS[self.kind].rules(self.ready.log_pattern, self.ready.fatal_patterns)

    def predicts(self, arg: str) -> bool:
        """Whether the kind's budget predicts the break-even of this argument (a search of its flag is guided)."""
        found = KINDS[self.kind].break_even
        return found is not None and found.arg == arg


class DrainSpec(_Strict):
    """After stopping: wait until every GPU's memory.used is back within tolerance of its preflight value."""

    timeout_s: float = Field(60, ge=0, le=MAX_TIMEOUT_S, description="how long to wait for the memory to come back, "
                                                                     "s; a GPU still held then is noted on the run")
    tolerance_mib: int = Field(256, ge=0, le=MAX_MIB, description="how far above its preflight value a GPU's memory "
                                                                  "may stay, MiB")


class SamplerSpec(_Strict):
    """nvidia-smi every 100 ms by default; `kind: nvml` samples through NVML (nvidia-ml-py on the host), fast
    enough to see allocations that last tens of milliseconds; `kind: none` runs without a GPU trace (a host
    without nvidia-smi: no preflight GPU state, no memory drain, no peaks — the report says so)."""

    kind: Literal["nvidia-smi", "nvml", "none"] = Field("nvidia-smi", description="what samples the GPUs: "
                                                        "nvidia-smi, NVML (nvidia-ml-py on the host) or nothing")
    interval_ms: int = Field(100, ge=1, le=3_600_000, description="time between samples, ms")


class ReproduceSpec(_Strict):
    """What the failing launch an experiment was drafted from showed (`launchlab diagnose` writes it): the report
    says whether the baseline's runs failed the same way — the same reason in the same phase, and the same
    break-even from their own numbers."""

    log: StrictStr = Field(description="the diagnosed log's file name")
    reason: StrictStr = Field(description="its failure reason (the parse vocabulary: kv_cache_no_memory, …)")
    phase: StrictStr = Field(description="the phase it failed in (startup, dist_init, weights, kv_cache, …)")
    break_even: StrictStr | None = Field(None, description="the break-even its numbers gave, quoted as printed "
                                                           "(\"0.0029\"): a run's within one unit of its last digit agrees")

    @field_validator("break_even")
    @classmethod
    def _decimal(cls, value: str | None) -> str | None:
        if value is not None:
            float(value)
        return value


class Experiment(_Strict):
    experiment: Annotated[str, _slug("experiment name", MAX_EXPERIMENT_CHARS)] = Field(
        description="the experiment's name: the folder of its run directories (letters, digits, - _ .)")
    question: str = Field("", description="what the experiment asks, in words: heads the report, and the verdict "
                                          "answers it where the measurements allow")
    hosts: dict[str, HostSpec] = Field(min_length=1, description="the machines, by name; each names its "
                                                                "`transport:` (sim, local, ssh) and that transport's "
                                                                "keys")
    host: str | list[str] | None = Field(None, description="the host(s) the runs use; default: the only host. With "
                                         "several, repetition r runs on host r mod n, so every host runs whole replicates")
    nodes: list[str] | None = Field(None, description="a multi-node server: every run spans these hosts, in "
                                                       "node-rank order; excludes `host:`")
    master_addr: Annotated[str, _address("master_addr")] | None = Field(
        None, description="{master_addr} for multi-node servers; default: the address of the first node")
    server: ServerSpec = Field(description="the server: its kind, baseline command, environment, readiness")
    factors: dict[str, dict[str, Level]] = Field({}, description=(
        "what to vary: factor name → level name → what the level changes (flags, env, patches); every combination "
        "of levels is a variant unless `variants:` lists them"))
    variants: list[dict[str, StrictStr]] | None = Field(None, description=(
        "only these combinations of levels, e.g. [{custom_ar: on, mem_fraction: \"0.85\"}]; default: all of them"))
    baseline: dict[str, StrictStr] | None = Field(None, description=(
        "the variant every effect is measured against, as factor: level; default: each factor's first level"))
    repetitions: int = Field(1, ge=1, le=1000, description="runs of each variant, interleaved (A B A B …)")
    warmup: int = Field(0, ge=0, le=100, description=(
        "launch the baseline this many times on each host before the plan (hyperfine's --warmup): the first "
        "launches on a host fill cold caches (a compile cache, the page cache holding the weights) and start far "
        "slower than their repeats. Warm-up runs are recorded (run ids `warmup<n>_…`) and never compared; "
        "--resume does not repeat finished ones; with `search:`, the baseline stratum at the range's high end"))
    warmup_levels: dict[str, StrictStr] | None = Field(None, description=(
        "the levels of the warm-up launches where they differ from the baseline's, as factor: level: a launch that "
        "starts, so "
        "that it compiles what the runs will use — `launchlab diagnose` sets it where the baseline is a failing "
        "launch by design"))
    drain: DrainSpec = Field(DrainSpec(), description="after each run, wait for the GPUs' memory to come back")
    search: SearchSpec | None = Field(None, description="bisect a numeric flag per stratum instead of running a "
                                      "fixed plan (see docs/threshold-search.md)")
    sampler: SamplerSpec = Field(SamplerSpec(), description="how GPU memory is sampled during a run")
    reproduce: ReproduceSpec | None = Field(None, description=(
        "the failing launch this experiment was drafted from (`launchlab diagnose` writes it): the report says "
        "whether the baseline reproduced it"))
    secrets: list[StrictStr] = Field(
        [], max_length=MAX_ENTRIES,
        description="env variable names and flag names whose values are secret, beyond the built-in name pattern "
                    "(TOKEN, KEY, SECRET, PASSWORD, …), e.g. [DB_URL, --my-password]: their values are masked in "
                    "every file of a run directory, whole and line by line (see docs/writing-an-experiment.md, Secrets), "
                    "also where the server inherits them from the caller's environment")

    @field_validator("hosts")
    @classmethod
    def _host_names(cls, hosts: dict[str, Any]) -> dict[str, Any]:
        problems = [p for name in hosts if (p := slug_problem("host name", name))]
        if problems:
            raise ValueError("; ".join(problems))
        return hosts

    @field_validator("factors")
    @classmethod
    def _factor_names(cls, factors: dict[str, dict[str, Level]]) -> dict[str, dict[str, Level]]:
        for name, levels in factors.items():
            if problem := fields.IDENTIFIER.problem("factor name", name, MAX_NAME_CHARS):
                raise ValueError(problem)
            if not levels:
                raise ValueError(f"factor `{name}` has no levels")
            for level in levels:
                if problem := slug_problem(f"level name of factor `{name}`", level):
                    raise ValueError(problem)
        return factors

    @field_validator("secrets")
    @classmethod
    def _secret_names(cls, secrets: list[str]) -> list[str]:
        wrong = [s for s in secrets if not (fields.ENV_NAME.accepts(s) or fields.SECRET_FLAG.accepts(s))]
        if wrong:
            raise ValueError(f"{', '.join(f'`{fields.shown(w)}`' for w in wrong)}: each entry is an environment "
                             "variable name (letters, digits, _) or a flag (starting with '-', no spaces or control "
                             "characters), e.g. [DB_URL, --api-key]")
        return secrets

    @model_validator(mode="after")
    def _design_is_consistent(self) -> Experiment:
        if problems := design.problems(self):
            raise design.DesignError(problems)
        return self

    @property
    def host_names(self) -> list[str]:
        if self.nodes is not None:
            return list(self.nodes)
        if self.host is None:
            return [next(iter(self.hosts))]
        return [self.host] if isinstance(self.host, str) else list(dict.fromkeys(self.host))

    @property
    def host_name(self) -> str:
        """The first host used (the only one in most experiments)."""
        return self.host_names[0]

    @property
    def simulated(self) -> bool:
        return any(self.hosts[h].simulated for h in self.host_names)


def json_schema() -> dict:
    """The JSON Schema of a params file (`launchlab schema`), for editors and validators."""
    schema = Experiment.model_json_schema()
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "launchlab params file", **schema}
