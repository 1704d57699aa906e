"""Confounds: what differs between runs besides the declared factors, from each run's provenance and from
what each run's own server log states.

Each check is a small function of (runs, facts) that returns what it found as `{kind, detail, runs}`;
`find` runs them all. `facts` is provenance.json of each run, by run id; `parsed` is parsed.json (the server's
log: its arguments and `log_facts`, see logfacts.py). A fact a run does not state is not a difference: only runs
that state it are compared (a by-hand log without a version line is not "another version").
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime

import pandas as pd

from launchlab import config
from launchlab.logparse.kinds import volatile_args
from launchlab.logparse.logfacts import LABELS
from launchlab.sim.state import STATE_ENV
from launchlab.store.records import VALID_STATUSES
from launchlab.verdicts import gpustate

VOLATILE_ENV = {"SSH_CLIENT", "SSH_CONNECTION", "SSH_TTY", "PWD", "OLDPWD", "SHLVL", "_", "LAUNCHLAB_RUN_ID",
                "JPY_PARENT_PID", "PYDEVD_USE_FRAME_EVAL", "TERM", "COLUMNS", "LINES"}
# what a scheduler sets in each job's environment: the job itself (SLURM_JOB_ID, …) and the GPUs of the node it
# got (its node is compared as a host fact, node_differences); the location of a job's simulated box
SCHEDULER_ENV_PREFIXES = ("SLURM_",)
SCHEDULER_ENV = {"CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK",
                 "LAUNCHLAB_SIM_STATE"}
# the kit's own launch context, which no server reads: what make exports to a recipe's commands (`make demo`), and
# what activating a Python environment sets; the environment's packages are compared as versions, and its bin
# folder in front of PATH is taken out of PATH (without_env_bins)
LAUNCH_CONTEXT_ENV = {"MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES", "MAKE_TERMOUT", "MAKE_TERMERR",
                      "VIRTUAL_ENV", "VIRTUAL_ENV_PROMPT", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "CONDA_PROMPT_MODIFIER",
                      "CONDA_SHLVL"}
ENV_PREFIXES = ("VIRTUAL_ENV", "CONDA_PREFIX")  # an active environment's folder: its bin/ may lead PATH
# lists searched in order, first match wins: an entry repeated further on can never be reached, so two lists that
# differ only in repeats find the same files (a script that appends its folder twice is not a different setting)
SEARCH_PATH_ENV = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "LIBRARY_PATH")
HOST_FACTS = (("driver", "driver version"), ("cuda", "CUDA version"), ("os", "operating system"), ("kernel", "kernel"))


VALUE_CHARS = 80  # a value in a confound's text: the whole value stays in the run's files (parsed.json, provenance.json)


def shown(values: list[str]) -> list[str]:
    """Each value as a confound's text shows it: whole up to about VALUE_CHARS characters; a longer one (a config
    dump of several KB) cut to VALUE_CHARS characters around where the values first differ, with its full length,
    so that two long values that differ deep inside still read apart."""
    if all(len(v) <= VALUE_CHARS for v in values):
        return values
    start = max(0, len(os.path.commonprefix(values)) - VALUE_CHARS // 4) if len(values) > 1 else 0
    out = []
    for value in values:
        if len(value) <= VALUE_CHARS:
            out.append(value)
            continue
        begin = min(start, max(0, len(value) - VALUE_CHARS))
        piece = value[begin:begin + VALUE_CHARS]
        more = begin + VALUE_CHARS < len(value)
        out.append(f"{'…' if begin else ''}{piece}{'…' if more else ''} ({len(value):,} characters)")
    return out


def _key(value: object) -> object:
    """A hashable stand-in for a fact's value (lists and dicts as sorted JSON)."""
    return value if isinstance(value, (str, int, float, type(None))) else json.dumps(value, sort_keys=True)


def _groups(values: dict[str, object]) -> dict[object, list[str]] | None:
    """Run ids grouped by value; None when every run has the same value."""
    groups: dict[object, list[str]] = {}
    for run_id, value in values.items():
        groups.setdefault(_key(value), []).append(run_id)
    return groups if len(groups) > 1 else None


def _differs(kind: str, label: str, values: dict[str, object]) -> list[dict]:
    """One confound when the runs disagree on a fact: every value with its runs; the runs of all but the
    first value are the ones touched."""
    groups = _groups(values)
    if groups is None:
        return []
    texts = shown([str(v) for v in groups])
    detail = f"{label} differs: " + "; ".join(f"{t}: {', '.join(rs)}" for t, rs in zip(texts, groups.values(),
                                                                                        strict=True))
    return [{"kind": kind, "detail": detail, "runs": sorted(r for rs in list(groups.values())[1:] for r in rs)}]


def _of(facts: dict, *path: str) -> object:
    for key in path:
        facts = (facts or {}).get(key)
    return facts


def host_differences(ids: list[str], facts: dict[str, dict]) -> list[dict]:
    return [c for key, label in HOST_FACTS for c in _differs("host", label, {r: _of(facts[r], "host_facts", key)
                                                                          for r in ids})]


def node_differences(ids: list[str], facts: dict[str, dict]) -> list[dict]:
    """The compute node a scheduler's job ran on (Slurm's node list): with `pin_node: false` runs can land on
    different machines, and that difference is compared like any other host fact."""
    return _differs("host", "node the job ran on", {
        r: ",".join(p.get("NodeList") or "?" for p in facts[r].get("scheduler") or []) or None for r in ids})


def version_differences(ids: list[str], facts: dict[str, dict]) -> list[dict]:
    found = _differs("versions", "Python", {r: _of(facts[r], "interpreter", "python") for r in ids})
    packages = sorted({p for r in ids for p in (_of(facts[r], "interpreter", "packages") or {})})
    for package in packages:
        found += _differs("versions", f"package {package}",
                          {r: (_of(facts[r], "interpreter", "packages") or {}).get(package) for r in ids})
    found += _differs("versions", "git commit of the server", {r: _of(facts[r], "integrity", "git_commit") for r in ids})
    return found


def _changed_files(facts: dict) -> list[str]:
    """Installed files that differ from the release; notebooks left out where the record has their code
    (notebook_code: compared by notebook_differences, so a notebook JupyterLab re-saved is not a modified file)."""
    integrity = facts.get("integrity") or {}
    files = (integrity.get("modified") or []) + (integrity.get("added") or [])
    if "notebook_code" in integrity:
        files = [f for f in files if not f.removesuffix(" (missing)").endswith(".ipynb")]
    return sorted(files)


def notebook_differences(ids: list[str], facts: dict[str, dict]) -> list[dict]:
    """The server package's notebooks (the kit's own templates, when the server is the simulated one) compared by
    their code — each cell's type and source, and which takes the parameters — never by their bytes: a save from
    JupyterLab rewrites the JSON without changing what a notebook runs. Runs without the record are not compared."""
    unpatched = [r for r in ids if not facts[r].get("patched") and "notebook_code" in (_of(facts[r], "integrity") or {})]
    names = sorted({n for r in unpatched for n in _of(facts[r], "integrity", "notebook_code")})
    found = []
    for name in names:
        digests = {r: (_of(facts[r], "integrity", "notebook_code").get(name) or "missing")[:12] for r in unpatched}
        found += _differs("modified files", f"the code of notebook {name} (cell sources, parameters)", digests)
    return found


def file_differences(ids: list[str], facts: dict[str, dict]) -> list[dict]:
    """Installed files that differ from the release in some runs only (patches declared as a factor level
    change files on purpose: those runs are compared by the factor), and a git checkout dirty in some."""
    found = []
    unpatched = [r for r in ids if not facts[r].get("patched")]
    for rs in (_groups({r: _changed_files(facts[r]) for r in unpatched}) or {}).values():
        files = _changed_files(facts[rs[0]])
        if files:
            found.append({"kind": "modified files", "runs": sorted(rs),
                          "detail": f"installed files differ from the release in runs {', '.join(rs)} only: "
                                    f"{', '.join(files[:5])}{' …' if len(files) > 5 else ''}"})
    dirty = _groups({r: _of(facts[r], "integrity", "git_dirty") for r in ids})
    if dirty:
        found.append({"kind": "modified files", "runs": sorted(r for rs in list(dirty.values())[1:] for r in rs),
                      "detail": "the server's git checkout had uncommitted changes in some runs only: "
                                + "; ".join(f"dirty={v}: {', '.join(rs)}" for v, rs in dirty.items())})
    return found


def inherited_env(node: dict) -> dict[str, str]:
    """The environment a run's server inherited, without what the kit itself put there (provenance's `kit_env`:
    a simulated box's state folder, the stand-in nvidia-smi's folder and the kit's Python in front of PATH). Those
    name folders of the batch's own box, made anew by every batch and every --resume, and the kit's
    configuration (config.VARIABLES) is read by the kit alone: none of it is the server's setting, so comparing
    it would call every resumed batch uncontrolled. A value the kit set whole is left out; a list the kit put
    entries in front of (PATH) is compared without them. A run recorded before `kit_env` existed: a simulated
    box's state folder is taken as the kit's, and so is every PATH entry inside it."""
    env = dict(node.get("host_env") or {})
    own = node.get("kit_env")
    if own is None and node.get("simulated") and env.get(STATE_ENV):
        box = env[STATE_ENV].rstrip("/") + "/"
        own = {STATE_ENV: env[STATE_ENV]}
        if "PATH" in env:
            env["PATH"] = os.pathsep.join(e for e in env["PATH"].split(os.pathsep) if not e.startswith(box))
    for name, value in (own or {}).items():
        if env.get(name) == value:
            del env[name]
        elif name in env and env[name].startswith(value + os.pathsep):
            env[name] = env[name][len(value) + len(os.pathsep):]
    env = without_env_bins(env, [env.get(n) for n in ENV_PREFIXES] + [_of(node, "interpreter", "prefix")])
    env = {k: (without_repeats(v) if k in SEARCH_PATH_ENV else v) for k, v in env.items()}
    return {k: v for k, v in env.items() if k not in config.VARIABLES and k not in LAUNCH_CONTEXT_ENV}


def without_repeats(value: str) -> str:
    """A search list (PATH, PYTHONPATH, …) with every entry after its first occurrence left out: the search stops at
    the first, so the list finds the same files with or without them."""
    return os.pathsep.join(dict.fromkeys(value.split(os.pathsep)))


def without_env_bins(env: dict[str, str], prefixes: list) -> dict[str, str]:
    """The environment with the bin folders of the Python environments in `prefixes` (the active one's, VIRTUAL_ENV
    or CONDA_PREFIX, and the server interpreter's) taken out of PATH: `launchlab run` with the environment's bin/
    on PATH and `.venv/bin/launchlab` (what `make demo` runs) launch the same server, and the environment's packages
    are compared as versions."""
    bins = {str(p).rstrip("/") + "/bin" for p in prefixes if p and isinstance(p, str)}
    if not bins or "PATH" not in env:
        return env
    kept = [e for e in env["PATH"].split(os.pathsep) if e.rstrip("/") not in bins]
    return {**env, "PATH": os.pathsep.join(kept)}


def as_written(value: str | None) -> str:
    """A value as the user wrote it (an environment variable, a params setting): `unset` where it is not set,
    `(empty)` for "" — never a Python repr."""
    if value is None:
        return "unset"
    return value if value else "(empty)"


def env_differences(ids: list[str], facts: dict[str, dict]) -> list[dict]:
    inherited = {r: inherited_env(facts[r]) for r in ids}
    names = sorted({k for r in ids for k in inherited[r]} - VOLATILE_ENV)
    if any(facts[r].get("scheduler") for r in ids):  # jobs: what the scheduler set for each is where it ran
        names = [n for n in names if n not in SCHEDULER_ENV and not n.startswith(SCHEDULER_ENV_PREFIXES)]
    found = []
    for name in names:
        groups = _groups({r: inherited[r].get(name) for r in ids})
        if groups:
            texts = shown([as_written(v) for v in groups])
            found.append({"kind": "environment", "runs": sorted(r for rs in list(groups.values())[1:] for r in rs),
                          "detail": f"undeclared environment variable {name} differs between runs: "
                                    + "; ".join(f"{t}: {', '.join(rs)}" for t, rs in zip(texts, groups.values(),
                                                                                         strict=True))})
    return found


def params_env_differences(runs: pd.DataFrame, facts: dict[str, dict]) -> list[dict]:
    """The environment the params set for the server (provenance `env`: the run's env file, the params' own and its
    level's) differs between runs of one variant: the design says they are the same, so the params file was edited
    between them — before a --resume. Runs of different variants differ by design (their levels' `env:`)."""
    if "variant" not in runs:
        return []
    ids = [r for r in runs["run_id"] if r in facts]
    variant = dict(zip(runs["run_id"], runs["variant"], strict=True))
    env = {r: facts[r].get("env") if isinstance(facts[r].get("env"), dict) else {} for r in ids}
    found = []
    for name in sorted({k for r in ids for k in env[r]}):
        odd, parts = [], []
        for v in dict.fromkeys(variant[r] for r in ids):
            groups = _groups({r: env[r].get(name) for r in ids if variant[r] == v})
            if groups:
                odd += [r for rs in list(groups.values())[1:] for r in rs]
                parts.append(f"{v}: " + "; ".join(f"{t}: {', '.join(rs)}" for t, rs in
                                                  zip(shown([as_written(x) for x in groups]), groups.values(), strict=True)))
        if odd:
            found.append({"kind": "environment", "runs": sorted(odd),
                          "detail": f"environment variable {name}, which the params set, differs between runs of one "
                                    f"variant (the params file was edited between them): {' | '.join(parts)}"})
    return found


def at_the_resume(found: list[dict], ids: list[str], facts: dict[str, dict]) -> list[dict]:
    """Each difference that sets exactly the runs on one side of a --resume apart from the others (provenance
    `batch`: the batch that ran each run) said as such — 'changed at the resume: …' — rather than as odd runs out
    (the majority's value is not the right one because more runs ran after the resume)."""
    batch = {r: facts[r].get("batch") for r in ids if facts[r].get("batch")}
    order = list(dict.fromkeys(batch[r] for r in ids if r in batch))
    if len(order) < 2 or len(batch) < len(ids):
        return found
    before = {r for r in ids if batch[r] == order[0]}
    after = set(ids) - before
    out = []
    for c in found:
        if set(c["runs"]) in (before, after):
            c = {**c, "detail": f"changed at the resume (runs resumed: {', '.join(r for r in ids if r in after)}): "
                                f"{c['detail']}"}
        out.append(c)
    return out


def _model_text(model: dict) -> str:
    if model.get("kind") == "none":
        return "nothing there"
    files = model.get("files") or []
    size = sum(f[1] for f in files) / 2**30
    newest = max((f[2] for f in files), default=None)
    when = datetime.fromtimestamp(newest).isoformat(timespec="seconds") if newest is not None else "?"
    config = (model.get("config_sha256") or "none")[:12]
    return f"config.json {config}, {len(files)} weight file(s), {size:.2f} GiB, newest modified {when}"


def model_differences(ids: list[str], facts: dict[str, dict]) -> list[dict]:
    """What the model path held (provenance `model`: config.json's digest, the weight files' names, sizes and
    modification times) differs between runs: other weights at the same path are another experiment."""
    models = {r: facts[r].get("model") for r in ids if isinstance(facts[r].get("model"), dict)}
    groups = _groups(models) if len(models) > 1 else None
    if groups is None:
        return []
    texts = [_model_text(models[rs[0]]) for rs in groups.values()]
    path = next(iter(models.values())).get("path")
    return [{"kind": "model", "runs": sorted(r for rs in list(groups.values())[1:] for r in rs),
             "detail": f"what the model path {path} holds differs between runs: "
                       + "; ".join(f"{t}: {', '.join(rs)}" for t, rs in zip(texts, groups.values(), strict=True))}]


def unbalanced_hosts(runs: pd.DataFrame) -> list[dict]:
    if "host" not in runs or runs["host"].nunique() <= 1:
        return []
    per_variant = runs.groupby("variant")["host"].apply(lambda h: tuple(sorted(h.value_counts().items())))
    if per_variant.nunique() <= 1:
        return []
    return [{"kind": "host", "runs": sorted(runs["run_id"]), "detail": "the hosts are not balanced over the variants: "
             + "; ".join(f"{v}: {', '.join(f'{h}×{n}' for h, n in c)}" for v, c in per_variant.items())}]


def unreproducible_baseline(runs: pd.DataFrame, baseline_variant: str) -> list[dict]:
    """Valid baseline runs that disagree on the outcome (a kit error says nothing about the server)."""
    base = runs[(runs["variant"] == baseline_variant) & runs["status"].isin(VALID_STATUSES)]
    if base["status"].nunique() <= 1:
        return []
    return [{"kind": "baseline", "runs": sorted(base["run_id"]),
             "detail": f"the baseline ({baseline_variant}) is not reproducible: "
                       + ", ".join(f"{r}: {s}" for r, s in zip(base["run_id"], base["status"], strict=True))}]


def log_differences(ids: list[str], parsed: dict[str, dict], declared: set[str],
                    facts: dict[str, dict] | None = None) -> list[dict]:
    """What the server logs state differently between runs: version, engine, NCCL, model, TP/DP size, and
    every other argument of `server_args` / `non-default args` that no factor declares (declared: the
    argument names the factors' flags set). The server version of an imported run whose log does not print it
    is the one its imports file declares (facts: provenance, `declared`), named as such."""
    logged = [r for r in ids if r in parsed]
    found = []
    for key, label in LABELS.items():
        values = {r: (parsed[r].get("log_facts") or {}).get(key) for r in logged}
        values = {r: v for r, v in values.items() if v is not None}
        if key == "server_version":
            found += _declared_versions(ids, values, facts or {})
            continue
        found += _differs("log", f"{label} (from the server log)", values)
    for name in undeclared_args(logged, parsed, declared):
        values = {r: str(parsed[r]["args"][name]).strip("'\"") for r in logged if name in (parsed[r].get("args") or {})}
        found += _differs("server argument", f"undeclared server argument {name}", values)
    return found


def undeclared_args(logged: list[str], parsed: dict[str, dict], declared: set[str]) -> list[str]:
    """The server arguments the logs of `logged` record that no factor declares, less those their server kinds say
    differ between any two launches or are compared as log facts already (ServerKind.volatile_args)."""
    volatile = volatile_args(parsed[r].get("server") for r in logged)
    return sorted({a for r in logged for a in (parsed[r].get("args") or {})} - set(declared) - volatile)


def _declared_versions(ids: list[str], stated: dict[str, str], facts: dict[str, dict]) -> list[dict]:
    """The server version per run: what its log states, else what the imports file declares. A declaration the
    log contradicts is a confound of its own (the user's notes and the run disagree)."""
    declared = {r: v for r in ids if (v := _of(facts.get(r), "declared", "server_version"))}
    found = [{"kind": "declared", "runs": [r],
              "detail": f"run {r}: the imports file declares server version {declared[r]}, but its log states "
                        f"{stated[r]} (the log's is used)"}
             for r in ids if r in declared and r in stated and str(declared[r]) != str(stated[r])]
    values = {r: stated.get(r, declared.get(r)) for r in ids if r in stated or r in declared}  # in run order
    only_declared = sorted(r for r in values if r not in stated)
    label = "server version (from the server log" + (f"; declared in the imports file for {', '.join(only_declared)}"
                                                      if only_declared else "") + ")"
    return found + _differs("log", label, values)


def gpu_differences(ids: list[str], facts: dict[str, dict]) -> list[dict]:
    """GPU models and memory totals: from the kit's preflight of launched runs, or the nvidia-smi capture given
    with an imported run. Runs without either are not compared."""
    found = []
    for key, label in (("name", "GPU model"), ("mem_total_mib", "GPU memory total (MiB)")):
        values = {}
        for r in ids:
            gpus = _of(facts[r], "preflight", "gpus") or facts[r].get("gpus") or []
            seen = sorted({str(g.get(key)) for g in gpus if g.get(key) is not None})
            if seen:
                values[r] = ", ".join(seen)
        found += _differs("gpu", label, values)
    return found


Check = Callable[[list[str], dict[str, dict]], list[dict]]
# the checks of what each run's provenance records (host, versions, files, environment, GPUs): the same rules judge
# runs of one batch (find) and two batches before and after (verdicts/compare.py)
PROVENANCE_CHECKS: tuple[Check, ...] = (host_differences, node_differences, version_differences, file_differences,
                                       notebook_differences, env_differences, gpu_differences, model_differences)


def find(runs: pd.DataFrame, facts: dict[str, dict], baseline_variant: str, tolerance_mib: float = 256) -> list[dict]:
    """Every difference in provenance and outcome between runs that the design did not declare, with the runs it
    touches (what the server logs state: log_differences)."""
    ids = [r for r in runs["run_id"] if r in facts]
    found: list[dict] = []
    for check in PROVENANCE_CHECKS:
        found += check(ids, facts)
    busy = gpustate.busy_gpus(ids, facts, tolerance_mib)
    found += busy
    found += gpustate.foreign_gpu_memory(ids, facts, tolerance_mib)
    baseline_ids = [r for r in runs.loc[runs["variant"] == baseline_variant, "run_id"] if r in facts] \
        if "variant" in runs else []
    found += gpustate.less_free_at_start(ids, facts, baseline_ids or ids, tolerance_mib,
                                         skip={r for c in busy for r in c["runs"]})
    found += params_env_differences(runs, facts)
    found += unbalanced_hosts(runs)
    found += unreproducible_baseline(runs, baseline_variant)
    return at_the_resume(found, ids, facts)


def provenance_notes(facts: dict[str, dict]) -> list[str]:
    """What is the same in every run but worth saying: all runs ran modified or uncommitted code."""
    ids = list(facts)
    if not ids:
        return []
    notes = []
    first = facts[ids[0]].get("integrity") or {}
    files = _changed_files(facts[ids[0]])
    if files and all(not facts[r].get("patched") for r in ids):
        notes.append(f"every run ran a modified {first.get('package')} ({', '.join(files[:5])}): the results describe "
                     "that code, not the release")
    if all(_of(facts[r], "integrity", "git_dirty") for r in ids):
        notes.append(f"every run ran {first.get('package')} from a git checkout with uncommitted changes "
                     f"({(first.get('git_commit') or '')[:12]}): commit them to make the experiment repeatable")
    return notes
