"""The params schema: pydantic models of an experiment and the checks that span several fields.

A params file names the hosts, the baseline server command and the factors to vary. Every model forbids
unknown keys, flag and env values must be YAML strings (so `0.10` cannot silently become `0.1`), and every
problem is reported with the file, line and field path.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    field_validator,
    model_validator,
)

from launchlab.params import template

_SLUG = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


FlagValue = StrictBool | StrictStr


def _check_env_names(env: dict[str, str]) -> dict[str, str]:
    for name in env:
        if not _ENV_NAME.match(name):
            raise ValueError(f"`{name}` is not a valid environment variable name (letters, digits, _)")
    return env


class Level(_Strict):
    """What one level of a factor changes: command-line flags, environment variables, and patches (unified
    diffs against the server's installed package, applied before the launch and reverted after it)."""

    flags: dict[str, FlagValue] = {}
    env: dict[str, StrictStr] = {}
    patches: list[StrictStr] = []

    @field_validator("flags")
    @classmethod
    def _flags_look_like_flags(cls, flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
        for name in flags:
            if not name.startswith("-") or any(c.isspace() or c in "{}" for c in name):
                raise ValueError(f"flag `{name}` must start with '-' and contain no spaces or braces, "
                                 "e.g. --mem-fraction-static")
        return flags

    _env_names = field_validator("env")(_check_env_names)


class SimHost(_Strict):
    """A simulated multi-GPU box on this machine (real processes, simulated GPU memory)."""

    transport: Literal["sim"]
    gpus: int = Field(8, ge=1, le=64)
    gpu_name: str = "RTX PRO 6000 Blackwell Server Edition (simulated)"
    mem_total_mib: int = Field(97887, gt=0)
    mem_reserved_mib: int = Field(566, ge=0)
    weights_gib_per_rank: float = Field(70.0, ge=0)
    pace: float = Field(1.0, gt=0, description="multiplies the simulated startup durations")
    workdir: str | None = None
    gpu_slots: list[list[int]] | None = None


class LocalHost(_Strict):
    """This machine, its real GPUs (if any) and its real nvidia-smi."""

    transport: Literal["local"]
    gpus: int | None = Field(None, ge=0)
    workdir: str | None = None
    gpu_slots: list[list[int]] | None = Field(None, description="run this many runs at once, each on its own GPUs "
                                                                  "(CUDA_VISIBLE_DEVICES), e.g. [[0], [1]]")


class SshHost(_Strict):
    """A GPU box over SSH. `address` may be an alias of ~/.ssh/config (or of $LAUNCHLAB_SSH_CONFIG)."""

    transport: Literal["ssh"]
    address: str = Field(min_length=1)
    port: int | None = Field(None, ge=1, le=65535)
    user: str | None = None
    identity_file: str | None = None
    gpus: int | None = Field(None, ge=0)
    workdir: str | None = Field(None, description="where run files live on the host (default ~/.launchlab/work)")
    reconnect_s: float = Field(30, ge=0, description="how long to keep reopening a dropped connection")
    gpu_slots: list[list[int]] | None = None


HostSpec = Annotated[SimHost | LocalHost | SshHost, Field(discriminator="transport")]


class ReadySpec(_Strict):
    timeout_s: float = Field(900, gt=0)
    health_url: str | None = None
    log_pattern: str | None = Field(None, description="regex of the ready line; default from the server kind")
    fatal_patterns: list[str] = []

    @field_validator("log_pattern", "fatal_patterns")
    @classmethod
    def _regexes_compile(cls, value: Any) -> Any:
        for pattern in [value] if isinstance(value, str) else value or []:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"`{pattern}` is not a valid regular expression: {exc}") from None
        return value


class SmokeSpec(_Strict):
    """A request sent once the server is ready: some servers allocate memory, or fail, only on the first one.
    A ready server whose smoke request does not answer `expect_status` is `degraded`."""

    url: str = Field(description="e.g. http://127.0.0.1:{port}/v1/completions")
    body: dict[str, Any] = {}
    timeout_s: float = Field(120, gt=0)
    expect_status: int = 200


class ServerSpec(_Strict):
    kind: Literal["sglang", "vllm", "transformers", "generic"]
    command: list[StrictStr] = Field(min_length=1)
    env: dict[str, StrictStr] = {}
    ready: ReadySpec = ReadySpec()
    smoke: SmokeSpec | None = None
    stop_grace_s: float = Field(10, gt=0)

    _env_names = field_validator("env")(_check_env_names)

    @model_validator(mode="after")
    def _generic_needs_a_ready_rule(self) -> ServerSpec:
        if self.kind == "generic" and not (self.ready.log_pattern or self.ready.health_url):
            raise ValueError("a generic server needs ready.log_pattern or ready.health_url to know when it is ready")
        return self


class DrainSpec(_Strict):
    """After stopping: wait until every GPU's memory.used is back within tolerance of its preflight value."""

    timeout_s: float = Field(60, ge=0)
    tolerance_mib: int = Field(256, ge=0)


class SamplerSpec(_Strict):
    """nvidia-smi every 100 ms by default; `kind: nvml` samples through NVML (nvidia-ml-py on the host), fast
    enough to see allocations that last tens of milliseconds."""

    kind: Literal["nvidia-smi", "nvml"] = "nvidia-smi"
    interval_ms: int = Field(100, ge=1)


class Experiment(_Strict):
    experiment: str = Field(pattern=_SLUG)
    question: str = ""
    hosts: dict[str, HostSpec] = Field(min_length=1)
    host: str | list[str] | None = Field(None, description="the host(s) the runs use; default: the only host. With "
                                         "several, repetition r runs on host r mod n, so every host runs whole replicates")
    nodes: list[str] | None = Field(None, description="a multi-node server: every run spans these hosts, in "
                                                       "node-rank order; excludes `host:`")
    master_addr: str | None = Field(None, description="{master_addr} for multi-node servers; default: the address "
                                                      "of the first node")
    server: ServerSpec
    factors: dict[str, dict[str, Level]] = {}
    variants: list[dict[str, StrictStr]] | None = None
    baseline: dict[str, StrictStr] | None = None
    repetitions: int = Field(1, ge=1, le=1000)
    drain: DrainSpec = DrainSpec()
    sampler: SamplerSpec = SamplerSpec()

    @field_validator("factors")
    @classmethod
    def _factor_names(cls, factors: dict[str, dict[str, Level]]) -> dict[str, dict[str, Level]]:
        for name, levels in factors.items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
                raise ValueError(f"factor name `{name}` must be an identifier (letters, digits, _)")
            if not levels:
                raise ValueError(f"factor `{name}` has no levels")
            for level in levels:
                if not re.match(_SLUG, level):
                    raise ValueError(f"level name `{level}` of factor `{name}` must match {_SLUG}")
        return factors

    @model_validator(mode="after")
    def _design_is_consistent(self) -> Experiment:
        problems = []
        if self.host is None and self.nodes is None and len(self.hosts) > 1:
            problems.append(f"several hosts are defined ({', '.join(self.hosts)}): say which to use with `host:` "
                            "(a name, or a list: repetitions are spread over them)")
        for name in [self.host] if isinstance(self.host, str) else self.host or []:
            if name not in self.hosts:
                problems.append(f"host `{name}` is not defined under hosts: ({', '.join(self.hosts)})")
        for name, spec in self.hosts.items():
            slots = spec.gpu_slots or []
            used = [g for slot in slots for g in slot]
            if any(not slot for slot in slots) or len(used) != len(set(used)) or any(g < 0 for g in used):
                problems.append(f"hosts.{name}.gpu_slots: every slot needs its own GPUs (no GPU in two slots)")
            if slots and self.nodes is not None:
                problems.append(f"hosts.{name}.gpu_slots: not supported for multi-node servers")
        if self.nodes is not None:
            if self.host is not None:
                problems.append("`nodes:` (one server over several hosts) and `host:` exclude each other")
            if len(self.nodes) < 2 or len(set(self.nodes)) != len(self.nodes):
                problems.append("nodes: list two or more different hosts, node rank 0 first")
            problems += [f"node `{n}` is not defined under hosts: ({', '.join(self.hosts)})"
                         for n in self.nodes if n not in self.hosts]
        for i, variant in enumerate(self.variants or []):
            problems += [f"variants[{i}]: {p}" for p in self._level_problems(variant)]
        if self.baseline is not None:
            problems += [f"baseline: {p}" for p in self._level_problems(self.baseline)]
            if self.variants is not None and self.baseline not in self.variants:
                problems.append("baseline: is not one of the listed variants")
        elif self.factors:
            problems.append("baseline: is required when factors are given, e.g. {" + ", ".join(
                f"{f}: {next(iter(levels))!r}" for f, levels in self.factors.items()) + "}")
        problems += _placeholder_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _level_problems(self, levels: dict[str, str]) -> list[str]:
        problems = []
        for factor, level in levels.items():
            if factor not in self.factors:
                problems.append(f"unknown factor `{factor}` (factors: {', '.join(self.factors) or 'none'})")
            elif level not in self.factors[factor]:
                problems.append(f"factor `{factor}` has no level `{level}` (levels: {', '.join(self.factors[factor])})")
        missing = [f for f in self.factors if f not in levels]
        if missing:
            problems.append(f"names no level for factor(s) {', '.join(missing)}")
        return problems

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
        return any(self.hosts[h].transport == "sim" for h in self.host_names)


def _placeholder_problems(exp: Experiment) -> list[str]:
    texts = [(f"server.command[{i}]", t) for i, t in enumerate(exp.server.command)]
    texts += [(f"server.env.{k}", v) for k, v in exp.server.env.items()]
    if exp.server.ready.health_url:
        texts.append(("server.ready.health_url", exp.server.ready.health_url))
    if exp.server.smoke:
        texts.append(("server.smoke.url", exp.server.smoke.url))
    for factor, levels in exp.factors.items():
        for name, level in levels.items():
            texts += [(f"factors.{factor}.{name}.flags.{k}", v) for k, v in level.flags.items() if isinstance(v, str)]
            texts += [(f"factors.{factor}.{name}.env.{k}", v) for k, v in level.env.items()]
    return [f"{where}: {problem}" for where, text in texts for problem in template.problems(text)]
