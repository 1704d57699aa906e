"""The experiment's question answered in the verdict where the measurements allow: for each quantity the
question asks about (GPU memory, time to ready, KV capacity), each factor level against its baseline level, from
the matched valid runs of the effects (never more than they show: a metric without both sides is left out)."""

from __future__ import annotations

import re
from collections.abc import Callable

from launchlab.escaping import md, md_code
from launchlab.store.verdictrecord import Effect


def _gib(mib: float) -> str:
    return f"{mib / 1024:,.1f} GiB"


def _gib_diff(mib: float) -> str:
    return f"{mib / 1024:+,.1f} GiB"


# (what in the question asks for it, the effects' metric, how the answer names it, value format, diff format)
TOPICS: tuple[tuple[re.Pattern[str], str, str, Callable[[float], str], Callable[[float], str]], ...] = (
    (re.compile(r"memory|\bGiB\b|\bGB\b|VRAM", re.I), "peak_mem_used_mib", "peak GPU memory (nvidia-smi)",
     _gib, _gib_diff),
    (re.compile(r"start[- ]?up|how long|how fast|slow|time to ready|\bready\b", re.I), "startup_s", "time to ready",
     lambda s: f"{s:,.1f} s", lambda s: f"{s:+,.1f} s"),
    (re.compile(r"\bKV\b|tokens|cache capacity", re.I), "kv_tokens", "KV cache capacity",
     lambda t: f"{t:,.0f} tokens", lambda t: f"{t:+,.0f} tokens"),
)


def answer_lines(question: str | None, effects: list[Effect], baseline_levels: dict[str, str], *,
                 sampler: str = "nvidia-smi") -> list[str]:
    """One Markdown line per factor level and asked-for metric, with its 95 % interval where both sides have two
    or more runs; empty when the question asks for nothing the effects measured. sampler: what measured the peak
    memory, as the runs had it (`NVML every 5 ms`)."""
    if not question:
        return []
    lines = []
    for asks, metric, label, value, diff in TOPICS:
        if not asks.search(question):
            continue
        if metric == "peak_mem_used_mib":
            label = f"peak GPU memory ({md(sampler)})"
        for e in effects:
            if e.metric != metric or e.mean is None or e.baseline_mean is None or e.signs_disagree:
                continue
            base = baseline_levels.get(e.factor, "baseline")
            strata = e.strata or ["alone"]
            where = f" at {md('; '.join(strata))}" if strata != ["alone"] else ""
            ratio = f", {e.ratio:.2f}×" if e.ratio is not None else ""
            ci = f"; {said}" if (said := e.interval(diff)) else ""
            level, baseline = md_code(f"{e.factor}={e.level}"), md_code(f"{e.factor}={base}")
            per = [s for s in e.stratum_diffs or [] if s.get("mean") is not None]
            if len(per) > 1:  # the mean of the strata's means is no run's value: each stratum's, then the difference
                means = "; ".join(f"{value(s['mean'])} vs {value(s['baseline_mean'])} at {md(s['stratum'])}"
                                  for s in per)
                lines.append(f"- {label}: {level} vs {baseline}: {means} ({diff(e.diff)} on average; "
                             f"n={e.n} vs {e.baseline_n}{ci})")
                continue
            # the stratum before the figures: after them it read as the interval's ("…no interval at x=0.3)")
            lines.append(f"- {label}{where}: {level} {value(e.mean)} vs {baseline} {value(e.baseline_mean)} "
                         f"({diff(e.diff)}{ratio}; n={e.n} vs {e.baseline_n}{ci})")
    return lines


def markdown(question: str | None, effects: list[Effect], baseline_levels: dict[str, str], *,
             sampler: str = "nvidia-smi") -> str:
    lines = answer_lines(question, effects, baseline_levels, sampler=sampler)
    if not lines:
        return ""
    return ("**What the question asks, as measured** (means of the valid runs, each level against the baseline's "
            "in the same stratum, stratum by stratum where the other factors take several levels):\n\n"
            + "\n".join(lines))
