"""A before/after comparison in plain sentences (compare.BeforeAfter → its `summary`): the question first, then
what differs outside the factors, a search's thresholds, the outcomes, what decides the launch, the break-even and
the KV capacity — each figure with its interval and its n, variants whose figures read the same said once."""

from __future__ import annotations

from launchlab.store.comparerecord import BeforeAfter, Shift
from launchlab.store.verdictrecord import STATUS_WORDS


def summary(record: BeforeAfter) -> list[str]:
    """The comparison in plain sentences: the question first, then what differs, a search's thresholds, the
    outcomes, what decides the launch, the break-even and the KV capacity."""
    q = record.question
    if not q.same:  # the last word: nothing said after it (what else differs would read as a comparison made)
        return [f"Not the same question — the comparison cannot be made: {'; '.join(q.differences)}. Nothing is "
                "compared; run both with the same factors and levels."]
    factors = "; ".join(f"{f}: {', '.join(levels)}" for f, levels in q.factors.items())
    lines = [f"Same question: the same factors and levels ({factors})."]
    lines += _differences_sentence(record)
    thresholds = [t.summary + "." for t in record.thresholds]  # a search's answer is its thresholds: they lead
    lines += thresholds + _outcomes_sentence(record) + _decisions_sentence(record)
    return lines + _break_even_sentence(record) + _kv_sentence(record)


def _differences_sentence(record: BeforeAfter) -> list[str]:
    if not record.differences:
        return ["Nothing differs outside the factors among what the kit compares (versions, installed files, "
                "environment, host, driver, GPUs, what the server logs state, the params)."]
    whats = list(dict.fromkeys(d.what for d in record.differences))
    return [f"Differs outside the factors ({len(whats)}): {'; '.join(whats)}."]


def _outcomes_sentence(record: BeforeAfter) -> list[str]:
    compared = [o for o in record.outcomes if o.changed is not None]
    if record.outcomes_unchanged:
        return [f"Outcomes unchanged: every variant ({len(compared)}) has the same share of ready runs before and "
                "after."]
    if not compared:
        return ["Outcomes cannot be compared: no variant has valid runs on both sides."]
    changed = [o for o in compared if o.changed]
    if changed:
        lines = [f"Outcomes changed in {len(changed)} of {len(compared)} variant(s): " + "; ".join(
            f"{o.variant}: {o.before_ready}/{o.before_valid} ready before, {o.after_ready}/{o.after_valid} after "
            f"(Fisher's exact p = {o.p_value:.2g}, {'significant' if o.significant else 'not significant'} at 0.05)"
            for o in changed) + "."]
    else:
        lines = [f"Outcomes unchanged in the {len(compared)} variant(s) compared (the same share of ready runs "
                 "before and after)."]
    unknown = [o.variant for o in record.outcomes if o.changed is None]
    if unknown:
        lines.append(f"Not compared (no valid run on a side): {'; '.join(unknown)}.")
    return lines


def _decisions_sentence(record: BeforeAfter) -> list[str]:
    moved = [d for d in record.decisions if d.changed]
    if not moved:
        deciding = record.after.outcome_factors
        return [f"The same factors decide the launch: {', '.join(deciding) or 'none'}."]
    def said(status: str | None) -> str:
        return STATUS_WORDS.get(status, status) if status else "was no factor"

    return ["What decides the launch changed: " + "; ".join(f"{d.factor} {said(d.before)} before and "
                                                           f"{said(d.after)} after" for d in moved) + "."]


def _grouped(rows: list[Shift], fmt) -> str:
    """'a → b (±d; interval) for V1 · V2; …': variants whose figures read the same said once."""
    by_text: dict[str, list[str]] = {}
    for s in rows:
        text = f"{fmt(s.before_mean)} → {fmt(s.after_mean)} ({fmt(s.diff, '+')}; {interval_text(s, lambda x: fmt(x, '+'))})"
        by_text.setdefault(text, []).append(s.variant)
    return "; ".join(f"{text} for {' · '.join(variants)}" for text, variants in by_text.items())


def _direction(rows: list[Shift]) -> str:
    ups, downs = sum(s.diff > 0 for s in rows), sum(s.diff < 0 for s in rows)
    if ups == len(rows):
        return "moved up in every variant"
    if downs == len(rows):
        return "moved down in every variant"
    return "is unchanged in every variant" if not ups and not downs else "moved in some variants"


def _break_even_sentence(record: BeforeAfter) -> list[str]:
    found = record.break_even
    rows = [s for s in record.shifts if found and s.metric == found["column"] and s.diff is not None]
    if not rows:
        return []
    text = _grouped(rows, lambda x, sign="": f"{x:{sign}.3f}")
    return [f"Break-even {found['arg']} ({found['formula']}) {_direction(rows)}: {text}."]


def _kv_sentence(record: BeforeAfter) -> list[str]:
    rows = [s for s in record.shifts if s.metric == "kv_tokens" and s.diff is not None]
    if not rows:
        return []
    text = _grouped(rows, lambda x, sign="": f"{x:{sign},.0f}")
    return [f"KV capacity (tokens) {_direction(rows)}: {text}."]


def interval_text(s: Shift, fmt=lambda x: f"{x:+.4g}") -> str:
    """'95 % CI −0.2 to +0.4 (Welch), n=3 vs 3', 'exact, no spread, n=2 vs 2', or 'n=1 vs 2, no interval'."""
    n = f"n={s.before_n} vs {s.after_n}"
    if s.interval == "welch":
        return f"95 % CI {fmt(s.ci_low)} to {fmt(s.ci_high)} (Welch), {n}"
    if s.interval == "no spread":
        return f"no spread: every run gave one value, {n}"
    return f"{n}, no interval"
