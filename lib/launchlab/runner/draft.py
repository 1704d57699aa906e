"""The params file `launchlab diagnose` writes from a Diagnosis: the failing launch as the baseline; the kind's
memory flag at the failing value and one value past the predicted break-even (or a `search:` around it); each
suspect the log shows on as an on/off factor where it can take effect; the kind's instrumentation patch; three
repetitions (and a warm-up where the kind compiles on its first start); the host given, or a simulated one shaped
like the log's GPUs where the kit simulates the kind. Every factor carries a comment naming the log line behind it.

YAML is written by hand so that it can carry those comments; every scalar is a double-quoted YAML string (_q: every
character the YAML reader would refuse or fold escaped), so a log's text cannot change the file's structure, and
`{`/`}` from a log are doubled (params placeholders, template.py). A log is someone else's input: a value of it that
the params could not hold (more GPUs than a host has, a memory share outside (0, 1], free memory above the total)
is left out of the draft with a TODO saying why, so that the draft validates whatever the log says.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from launchlab import hosts, safefiles
from launchlab.errors import LaunchlabError
from launchlab.fields import MAX_GPUS
from launchlab.hosts.sim_spec import SimSpec
from launchlab.logparse.parsedlog import PHASES
from launchlab.runner.diagnose import Diagnosis, quote
from launchlab.store.rundir import write_text

SIM_HOST, REAL_HOST = "box", "gpu"
PORT = ["--host", "127.0.0.1", "--port", "{port}"]
TODO_COMMAND = ["TODO-the-server-command", "--port", "{port}"]


@dataclass(frozen=True)
class Options:
    """What the command line adds: the launch command as typed (--command), a host (--host), --search."""

    command: str | None = None
    host: str | None = None
    search: bool = False


@dataclass
class Draft:
    """The params text, the patch files it names (name → the kit's copy), and what the reader is told of it."""

    text: str
    patches: dict[str, Path] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    mode: int = 0o644  # no more readable than the logs it quotes (safefiles.private_mode): a 0600 log, a 0600 draft


@dataclass
class _Parts:
    """What the draft's sections gather as they are made: its factors (name → comment, level → its entries), the
    baseline's levels, and the notes for the reader."""

    notes: list[str] = field(default_factory=list)
    factors: dict[str, tuple[str, dict[str, list[str]]]] = field(default_factory=dict)
    baseline: dict[str, str] = field(default_factory=dict)


def make(found: Diagnosis, opts: Options) -> Draft:
    """The draft of the experiment that isolates the diagnosed failure."""
    parts = _Parts()
    notes = parts.notes
    simulated = opts.host is None and _simulable(found, parts.notes)
    host = _host(found, opts, simulated, notes)
    command = _command(found, opts, simulated, notes)
    search, patches = _factors(found, opts, simulated, parts)
    factors, baseline = parts.factors, parts.baseline
    compiles = bool(found.kind and found.kind.relaunch and found.kind.relaunch.compiles)
    varied = found.kind.break_even.flag if search and found.kind and found.kind.break_even else None
    lines = [*_header(found, notes), f"experiment: {_q(experiment_name(found, search=bool(search)))}",
             f"question: {_q(_question(found, factors, searched=varied))}", "hosts:", *host, "server:",
             f"  kind: {_q(found.kind.name if found.kind else 'generic')}",
             f"  command: [{', '.join(_q(word) for word in command)}]", *_ready(found, simulated)]
    lines += _factor_lines(factors, searched=varied)
    lines.append(f"baseline: {{{', '.join(f'{_q(k)}: {_q(v)}' for k, v in baseline.items())}}}")
    lines += _reproduce(found)
    if search:
        lines += search
    else:
        lines += [_repetitions(factors, notes)]
    if compiles:
        lines.append("warmup: 1                          # its first start compiles kernels: never compared")
        if not search and be_level(found, factors) is not None:  # the baseline fails by design: warm up where it starts
            arg, level = be_level(found, factors)
            lines.append(f"warmup_levels: {{{_q(arg)}: {_q(level)}}}   # a launch that starts, so that it compiles")
    lines.append("drain: {timeout_s: 30, tolerance_mib: 64}" if simulated else
                 "drain: {timeout_s: 120, tolerance_mib: 512}")
    return Draft("\n".join(lines) + "\n", patches, notes, safefiles.private_mode(*_modes(found.logs)))


def _modes(logs) -> list[int]:
    """The modes of the logs as read (through the user's own link to a private log too): a draft of a private log
    is private."""
    modes = []
    for log in logs:
        try:
            with safefiles.open_regular(log) as fh:
                modes.append(os.fstat(fh.fileno()).st_mode)
        except OSError:
            continue
    return modes


def be_level(found: Diagnosis, factors: dict) -> tuple[str, str] | None:
    """(the memory flag's factor, its level past the break-even), where the draft has one."""
    be = found.kind.break_even if found.kind else None
    if be is None or be.arg not in factors:
        return None
    levels = list(factors[be.arg][1])
    return (be.arg, levels[-1]) if len(levels) > 1 else None


def _repetitions(factors: dict, notes: list[str]) -> str:
    """The repetitions by the kit's own rule: the fewest runs a side at which a clean split (every run of one level
    starts, none of the other) is significant by the exact test the verdict applies (analysis.settling_repetitions:
    Fisher's, p < 0.05, within each stratum) — and what that costs in launches."""
    from launchlab.verdicts.analysis import SIGNIFICANCE, settling_repetitions  # scipy: only when a draft is made

    n = settling_repetitions(1.0, 0.0)
    variants = math.prod(len(levels) for _, levels in factors.values()) if factors else 1
    notes.append(f"repetitions: {n} a side, the fewest at which a clean split reaches p < {SIGNIFICANCE:g} "
                 f"(Fisher's exact, the verdict's test); {variants} variant(s) × {n} = {variants * n} launches")
    return f"repetitions: {n}                     # a clean 0/{n} vs {n}/{n} split: p < {SIGNIFICANCE:g}; fewer cannot"


def write(draft: Draft, out: Path, *, force: bool) -> list[Path]:
    """The params file and the patches it names (patches/ beside it); nothing over an existing file without force.
    Checked before anything is written, so a refusal leaves no half."""
    targets = [out] + [out.parent / "patches" / name for name in draft.patches]
    existing = [t for t in targets if t.exists() or t.is_symlink()]
    if existing and not force:
        raise LaunchlabError(f"{existing[0]} exists: nothing written (--force replaces it, or -o names another file)")
    linked = [f for f in (out.parent, out.parent / "patches") if f.is_symlink()]
    if draft.patches and linked:  # a link planted in a shared params folder would take the patch elsewhere
        raise LaunchlabError(f"{linked[0]} is a symbolic link: nothing written (-o names a file in a real folder)")
    write_text(out, draft.text, mode=draft.mode)
    for name, source in draft.patches.items():
        write_text(out.parent / "patches" / name, source.read_text())
    return targets


def _simulable(found: Diagnosis, notes: list[str]) -> bool:
    """Whether the kit can simulate the log's launch: a kind it simulates, and a box shaped like the log's GPUs that
    a `sim` host can be (SimSpec checks it: a log's 10⁸ GPUs or free memory above the total cannot; said why)."""
    relaunch = found.kind.relaunch if found.kind else None
    if not (relaunch and relaunch.simulated and relaunch.sim_card_mib
            and {"total_gib", "avail_gib"} <= found.memory.keys()):
        return False
    try:
        SimSpec(transport="sim", **_sim_shape(found))
    except (ValidationError, ValueError, OverflowError) as exc:
        problem = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        notes.append(f"host: not simulated — the log's GPUs ({_gpus(found)} GPU(s), "
                     f"{found.memory['total_gib']:.3g} GiB free before the weights, {found.memory['avail_gib']:.3g} "
                     f"GiB after) are no box the simulator can be ({problem}); check the log's numbers")
        return False
    return True


def _gpus(found: Diagnosis) -> int:
    """The GPUs the launch used on one host: tensor × pipeline (× data) parallel (logparse/parallel.py), over its
    nodes."""
    sizes = found.parallel
    return max(1, sizes.get("gpus", found.tp) // sizes.get("nodes", 1))


def _gpus_unknown(found: Diagnosis) -> bool:
    """The log shows nothing of the launch's GPUs: no size stated and no rank beyond 0."""
    return found.parallel.get("tp_at_least", False) and found.tp == 1


def _sim_shape(found: Diagnosis) -> dict:
    total, avail = found.memory["total_gib"], found.memory["avail_gib"]
    if not 0 < avail <= total:
        raise ValueError(f"free memory after the weights {avail:.3g} GiB is not between 0 and the "
                         f"{total:.3g} GiB before them")
    on = any(f.suspect.name == "custom_ar" and f.takes_effect for f in found.findings)
    reserved = SimSpec.model_fields["mem_reserved_mib"].default
    return {"gpus": _gpus(found), "weights_gib_per_rank": round(total - avail, 3),
            "mem_total_mib": found.kind.relaunch.sim_card_mib(total, reserved_mib=reserved, custom_ar=on)}


def _host(found: Diagnosis, opts: Options, simulated: bool, notes: list[str]) -> list[str]:
    gpus = _gpus(found)
    if simulated:
        total, avail = found.memory["total_gib"], found.memory["avail_gib"]
        shape = _sim_shape(found)
        notes.append(f"host: simulated, {gpus} GPU(s) shaped like the log's ({total:.2f} GiB free before the weights, "
                     f"{total - avail:.2f} GiB of weights per rank); --host NAME runs it on a real one")
        return [f"  {SIM_HOST}:", "    transport: sim                 # shaped like the log's GPUs (--host NAME: a real one)",
                f"    gpus: {gpus}", f"    gpu_name: {_q('like the diagnosed log (simulated)')}",
                f"    mem_total_mib: {shape['mem_total_mib']}", f"    weights_gib_per_rank: {shape['weights_gib_per_rank']}"]
    sizes = found.parallel
    at_least = f"  # at least: {sizes['said'].removeprefix(f'at least {found.tp}: ')}" if sizes.get("tp_at_least") else ""
    count = [f"    gpus: {gpus}{at_least}"]
    if gpus > MAX_GPUS:  # what no host has: said, and left to the host's own count
        notes.append(f"host: TODO — the log's parallel sizes make {gpus} GPUs on a host, more than the {MAX_GPUS} "
                     "a host may have; `gpus:` is left out (the host's nvidia-smi counts them)")
        count = []
    elif _gpus_unknown(found):
        notes.append("host: TODO — the log states no parallel size and tags no rank beyond 0, so it cannot tell how "
                     "many GPUs the launch used; `gpus:` is left out (the host's nvidia-smi counts them)")
        count = []
    elif "nodes" not in sizes and any(state.reason == "spans_nodes" for state in found.custom_ar.values()):
        notes.append("host: TODO — the launch spanned nodes (its custom all-reduce says the process group spans "
                     "across nodes) and the log does not say how many; `gpus:` is left out (the host's nvidia-smi "
                     "counts them)")
        count = []
    elif sizes.get("nodes", 1) > 1:
        notes.append(f"host: the launch spanned {sizes['nodes']} nodes; `gpus:` is one node's share")
    if opts.host is None:
        notes.append("host: TODO — this machine as written; --host NAME names the one that ran the log")
        return [f"  {REAL_HOST}:", "    transport: local               # TODO: the machine of the log (--host NAME)",
                *count]
    if opts.host in hosts.THIS_MACHINE:
        return [f"  {REAL_HOST}:", "    transport: local", *count]
    return [f"  {REAL_HOST}:", "    transport: ssh", f"    address: {_q(opts.host)}", *count]


def _command(found: Diagnosis, opts: Options, simulated: bool, notes: list[str]) -> list[str]:
    """The launch: as typed (--command), else rebuilt from the log's argument dump by the kind's Relaunch, the
    memory flag left to its factor; the simulator's launcher in front when the host is simulated."""
    relaunch = found.kind.relaunch if found.kind else None
    port_flag = relaunch.port_flag if relaunch else "--port"
    if opts.command:
        words = _with_port(shlex.split(opts.command), port_flag)
    elif relaunch and found.args:
        words = _rebuilt(found) + (PORT if port_flag == "--port" else [port_flag, "{port}"])
        notes.append("command: reconstructed from the log's argument dump (a flag the log does not show is not "
                     "there); --command \"…\" gives the one you ran")
    else:
        notes.append("command: TODO — the log has no argument dump to rebuild it from; give it with --command \"…\"")
        return TODO_COMMAND
    if simulated:  # the simulator takes the server's flags: only the words before them change
        start = next((i for i, w in enumerate(words) if w.startswith("--")), len(words))
        words = [*relaunch.simulated, *words[start:]]
    return words


def _with_port(words: list[str], flag: str = "--port") -> list[str]:
    if flag in words[:-1]:
        i = words.index(flag)
        return [*words[: i + 1], "{port}", *words[i + 2:]]
    return words + [flag, "{port}"]


def _rebuilt(found: Diagnosis) -> list[str]:
    relaunch, kind = found.kind.relaunch, found.kind
    memory_arg = kind.break_even.arg if kind.break_even else kind.memory_share.arg if kind.memory_share else None
    names = relaunch.args if relaunch.args is not None else tuple(found.args)
    model = found.args.get(kind.log_facts.model or "", "TODO-model")
    words = [w.replace("{model}", _escaped(model)) for w in relaunch.launcher]
    for name in names:
        value = found.args.get(name)
        if value is None or name in relaunch.skip or name == memory_arg or value in ("None", "False", ""):
            continue
        if "{model}" in relaunch.launcher and name == kind.log_facts.model:
            continue  # the launcher names it
        words += [f"--{name.replace('_', '-')}"] + ([] if value == "True" else [_escaped(value)])
    return words


def _escaped(value: str) -> str:
    """A log's value inside a params command: braces doubled, so that only the kit's placeholders are filled."""
    return value.replace("{", "{{").replace("}", "}}")


def _ready(found: Diagnosis, simulated: bool) -> list[str]:
    timeout = 300 if simulated else 1800
    if found.kind is not None and found.kind.ready_pattern:
        return [f"  ready: {{timeout_s: {timeout}}}                # the kind's own ready line"]
    return [f"  ready: {{timeout_s: {timeout}, health_url: {_q('http://127.0.0.1:{port}/health')}}}"]


def _factors(found: Diagnosis, opts: Options, simulated: bool, parts: _Parts) -> tuple[list[str], dict[str, Path]]:
    """The factors and baseline into parts; (the search block's lines, the patches named)."""
    search = _memory(found, opts, parts)
    failed_in = found.failure.phase if found.failure else None
    for finding in found.findings:
        s = finding.suspect
        if not finding.takes_effect:
            parts.notes.append(
                f"left out: {s.what} is switched off by the server on this box by itself ({finding.reason}) and "
                "nothing forces it on" if finding.state == "server off" else
                f"left out: {s.what} is {finding.state} in the log but cannot take effect at tensor parallel {found.tp}")
            continue
        if finding.state != "failed" and failed_in in PHASES and s.phase in PHASES and \
                PHASES.index(s.phase) > PHASES.index(failed_in):  # its own code failing makes it the suspect
            parts.notes.append(f"left out: {s.what} takes its memory in {s.phase}, after {failed_in} where the launch "
                               "failed: it cannot have caused the failure")
            continue
        where = f"line {finding.line}: " if finding.line else ""
        off = ([f"flags: {_map(s.off_flags)}"] if s.off_flags else []) + ([f"env: {_map(s.off_env)}"] if s.off_env else [])
        if finding.state == "server off":  # on this box the server switches it off unless forced: "on" forces it
            parts.factors[s.name] = (f"{s.what}, off by the server in the log ({where}{finding.text}); 'on' forces "
                                     f"it: {s.forced_note}", {"off": off, "on": [f"env: {_map(s.forced_on)}"]})
            parts.notes.append(f"{s.name}: 'on' sets {', '.join(s.forced_on)} — {s.forced_note}")
        else:
            said = finding.state if finding.state in ("off", "failed") else "on"
            parts.factors[s.name] = (f"{s.what}, {said} in the log: {where}{finding.text}",
                                     {"off": off, "on": []} if said == "off" else {"on": [], "off": off})
        parts.baseline[s.name] = "on" if finding.state in ("on", "failed") else "off"  # the level the log's ran
    return search, ({} if opts.search else _instrumentation(found, simulated, parts))


def _memory(found: Diagnosis, opts: Options, parts: _Parts) -> list[str]:
    """The memory flag's factor (or search block) from the failing value and the break-even; [] when the log
    gives no break-even (said, with a TODO)."""
    be = found.kind.break_even if found.kind else None
    if be is None and found.kind and found.kind.memory_share:
        return _share(found, found.kind.memory_share, parts)
    if be is None or found.break_even is None or found.requested is None:
        if be is not None:
            parts.notes.append(f"{be.flag}: TODO — the log does not give the numbers of the break-even ({be.formula})")
        return []
    odd = [f"{what} {value:g}" for what, value in (("the failing value", found.requested),
                                                   ("the break-even", found.break_even)) if not 0 < value <= 1]
    if odd:  # a share of the memory, in every kind: a log that says otherwise is not one to draft levels from
        parts.notes.append(f"{be.flag}: TODO — {' and '.join(odd)} from the log is no share of the memory (0 < x ≤ "
                           "1); check the log, then add the factor by hand")
        return []
    step = be.margin
    past = max(math.ceil((found.break_even + step) / step - 1e-9) * step, step)
    where = f"line {found.failure.line}: " if found.failure and found.failure.line else ""
    comment = (f"{where}failed at {found.requested:g}; the log's numbers give the break-even "
               f"{found.break_even:.3g} ({be.formula}); {past:g} is at least {step:g} past it")
    if opts.search:
        return _search(found, be, where)
    levels = dict.fromkeys([_fmt(found.requested, step), _fmt(past, step)])
    if len(levels) < 2:
        parts.notes.append(f"{be.flag}: the failing value is already past the break-even; one level only")
    parts.factors[be.arg] = (comment, {v: [f"flags: {_map({be.flag: v})}"] for v in levels})
    parts.baseline[be.arg] = _fmt(found.requested, step)
    return []


def _share(found: Diagnosis, share, parts: _Parts) -> list[str]:
    """The kind's memory share (MemoryShare) at the failing value and at half of it, after a failure a smaller
    share can cure: a rule, not a prediction (the log gives no figures for one), and the comment says so."""
    reason = found.failure.reason if found.failure else None
    if found.requested is None or not 0 < found.requested <= 1 or reason not in share.reasons:
        return []
    failing, half = _fmt(found.requested, 0.1), _fmt(found.requested / 2, 0.1)
    where = f"line {found.failure.line}: " if found.failure.line else ""
    parts.factors[share.arg] = (f"{where}{reason} at {failing}, {share.what}; no figure of the log predicts a "
                                f"break-even: {half} is half, by rule",
                                {v: [f"flags: {_map({share.flag: v})}"] for v in (failing, half)})
    parts.baseline[share.arg] = failing
    return []


def _search(found: Diagnosis, be, where: str) -> list[str]:
    """The search block around the predicted break-even b: a unit u one digit finer than b's leading one (and fine
    enough that the failing value lies below b − u), the range (b − 5u, b + 3u] inside (0, 1] and a resolution of
    2u — so bisection's nodes fall on b − u and b + u, the pair the search probes first (`predicted`): two launches
    where the prediction holds, the ends and bisection only where it does not. The stated break-even (printed to
    u's digit, as a server prints its minimum) lies inside the bracket they make, the failing value below it."""
    b, failing = found.break_even, found.requested
    unit = 10.0 ** (math.floor(math.log10(b)) - 1)
    if failing < b:
        unit = min(unit, 10.0 ** math.floor(math.log10((b - failing) / 2)))
    b = round(b, -math.floor(math.log10(unit)) + 1)  # one digit finer than the unit: 0.769178 → 0.769
    low, high = max(b - 5 * unit, unit), min(b + 3 * unit, 1.0)
    comment = (f"{where}failed at {failing:g}; the log's numbers give the break-even {b:.3g} ({be.formula}): probed "
               f"just below and above it first, the range's ends only if that fails")
    return [f"search:                            # {comment}", f"  flag: {_q(be.flag)}",
            f"  low: {_q(_fmt(low, unit))}", f"  high: {_q(_fmt(high, unit))}",
            f"  resolution: {_q(_fmt(2 * unit, unit))}", f"  predicted: {_q(_fmt(b, unit / 10))}", "  repetitions: 1"]


def _reproduce(found: Diagnosis) -> list[str]:
    """The `reproduce:` block: what the log showed, for the report to say whether the baseline did the same."""
    if found.failure is None or found.failure_log is None:
        return []
    lines = ["reproduce:                         # what the log showed: the report says whether the baseline did too",
             f"  log: {_q(found.failure_log.name)}", f"  reason: {_q(found.failure.reason)}",
             f"  phase: {_q(found.failure.phase)}"]
    if found.break_even is not None and 0 < found.break_even <= 1:
        lines.append(f"  break_even: {_q(f'{found.break_even:.3g}')}")
    return lines


def _fmt(value: float, step: float) -> str:
    """A value at the precision of the step it moves by (0.01 → "0.78"), never fewer digits than it has."""
    places = max(0, -math.floor(math.log10(step))) if step > 0 else 3
    text = f"{value:.{places}f}"
    return text if float(text) == round(value, 9) or places >= 6 else f"{value:g}"


def _instrumentation(found: Diagnosis, simulated: bool, parts: _Parts) -> dict[str, Path]:
    """The kind's instrumentation as a factor, as the seed had it (`debug: print`): `instrument: true`, which the
    kit resolves on the host to its patch for the server version installed there (a log need not state its
    version: the host knows it), refusing before any launch a version it has no patch for. Left out on a
    simulated host (no package to patch) and where the log states a version the kit has no patch for."""
    inst, notes = (found.kind.instrumentation if found.kind else None), parts.notes
    if inst is None:
        return {}
    if simulated:
        notes.append(f"left out: the instrumentation patch {inst.patch} (the simulated host has no package to patch)")
        return {}
    if found.version is not None and found.version not in inst.versions:
        notes.append(f"left out: the kit's instrumentation patch is for {', '.join(inst.versions)}, the log's server "
                     f"is {found.version}")
        return {}
    parts.factors["debug"] = (f"prints {inst.prints}; the kit reads the server's version on the host and applies "
                              f"its patch for it ({', '.join(inst.versions)}), or stops before any launch",
                              {"off": [], "print": ["instrument: true"]})
    parts.baseline["debug"] = "off"
    return {}


def _factor_lines(factors: dict, *, searched: str | None = None) -> list[str]:
    if not factors and searched:  # the search itself varies the memory flag: a factor would repeat it per level
        return [f"factors: {{}}                        # the search varies {searched}; a factor here is searched at "
                "each of its levels"]
    if not factors:
        return ["factors: {}                        # TODO: what to vary (the log suggested nothing the kit knows)"]
    lines = ["factors:"]
    for name, (comment, levels) in factors.items():
        lines.append(f"  {_q(name)}:  # {quote(comment)}")
        lines += [f"    {_q(level)}: {{{', '.join(parts)}}}" for level, parts in levels.items()]
    return lines


def _header(found: Diagnosis, notes: list[str]) -> list[str]:
    logs = ", ".join(p.name for p in found.logs)
    failure = found.failure
    what = f"{failure.reason} in {failure.phase}" if failure else "no failure"
    lines = [f"# Drafted by `launchlab diagnose` from {quote(logs)}: {what}.",
             "# Check it with `launchlab validate` and `launchlab run --dry-run` before you run it."]
    lines += [f"# not read: {quote(gap)}" for gap in found.missing]  # no placeholder: nothing to fill in
    return lines + [f"# {quote(note)}" for note in notes]


def experiment_name(found: Diagnosis, *, search: bool = False) -> str:
    """The draft's experiment (and default file) name; a search's ends in -search, so that drafting both from one
    log keeps two files and two folders of run directories apart."""
    parts = ["diagnose", found.kind.name if found.kind else "server", found.failure.reason if found.failure else "launch"]
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "-".join(parts))[:60] + ("-search" if search else "")


def _question(found: Diagnosis, factors: dict, *, searched: str | None = None) -> str:
    what = f"fails with {found.failure.reason} in {found.failure.phase}" if found.failure else "starts"
    if searched and found.failure:
        return f"At which {searched} does the launch stop failing with {found.failure.reason} in {found.failure.phase}?"
    if not factors:
        return f"What decides whether the launch {what}? (TODO: the factors)"
    if len(factors) == 1:
        return f"Does {next(iter(factors))} decide whether the launch {what}?"
    return f"Which of {', '.join(factors)} decides whether the launch {what}?"


def _map(values: dict) -> str:
    return "{" + ", ".join(f"{_q(k)}: {_scalar(v)}" for k, v in values.items()) + "}"


def _scalar(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else _q(str(value))


def _q(text: str) -> str:
    """A double-quoted YAML scalar of the text, whatever a log put in it: `"` and `\\` escaped, and every character
    the YAML reader refuses (controls, lone surrogates) or reads as a line break (NEL, U+2028/9) escaped by its code
    point; the rest as it is — an emoji stays an emoji (JSON's `\\ud83d\\ude80` pairs are lone surrogates to YAML)."""
    return '"' + _YAML_UNSAFE.sub(_escape, str(text)) + '"'


_YAML_UNSAFE = re.compile("[\"\\\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]")


def _escape(match: re.Match) -> str:
    char = match.group()
    if char in '"\\':
        return "\\" + char
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
