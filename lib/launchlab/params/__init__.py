"""Params files: the pydantic schema of an experiment, strict loading, factor expansion and command rendering.

A params file names the hosts, the baseline server command and the factors to vary. Every model forbids
unknown keys, flag and env values must be YAML strings (so `0.10` cannot silently become `0.1`), and every
problem is reported with the file, line and field path.

    schema.py    the pydantic models of the fields and their limits; a `hosts:` entry is the spec of its
                 transport (hosts/*_spec.py, registered in hosts.TRANSPORTS)
    design.py    checks across fields: names, references, placeholders, the size of the plan
    loading.py   reading a file, strict YAML, errors located by line and field; the resolved dump
    launch.py    variants (factor expansion) and rendering a variant's launch
    template.py  placeholders: `{name}` and `{{`/`}}`, parsed and filled in one place, exactly once

Callers use the names re-exported here: `params.load`, `params.Experiment`, `params.render`, ….
"""

from launchlab.hosts.local_spec import LocalSpec
from launchlab.hosts.sim_spec import SimSpec
from launchlab.hosts.ssh_spec import SshSpec
from launchlab.params.design import MAX_RUNS, DesignError, PlanSize, plan_size
from launchlab.params.launch import (
    LaunchSpec,
    Variant,
    apply_flags,
    baseline_variant,
    expand,
    master_addr,
    render,
    variant_name,
    variant_of,
)
from launchlab.params.loading import digest, dump_resolved, load, load_filled, loads, unfilled
from launchlab.params.schema import (
    DrainSpec,
    Experiment,
    FlagValue,
    HostSpec,
    Level,
    ReadySpec,
    SamplerSpec,
    ServerSpec,
    SmokeSpec,
    json_schema,
)
from launchlab.params.template import PLACEHOLDERS, TemplateError

__all__ = [
    "MAX_RUNS", "PLACEHOLDERS", "DesignError", "DrainSpec", "Experiment", "FlagValue", "HostSpec", "LaunchSpec",
    "Level", "LocalSpec", "PlanSize", "ReadySpec", "SamplerSpec", "ServerSpec", "SimSpec", "SmokeSpec", "SshSpec",
    "TemplateError", "Variant", "apply_flags", "baseline_variant", "digest", "dump_resolved", "expand", "json_schema",
    "load", "load_filled", "loads", "unfilled",
    "master_addr", "plan_size", "render", "variant_name", "variant_of",
]
