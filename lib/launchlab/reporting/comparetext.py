"""How a comparison of two run directories reads: the terminal's text and tables (through escaping.visible), and
the sections compare.html and the summary notebook show (Markdown escaped with md, tables with reporttables.styled).
Every run id, variant, path and value in it came from a log, a host or a params file: none reaches a page as markup
or a terminal as a control sequence."""

from __future__ import annotations

import pandas as pd

from launchlab.escaping import md, md_code, md_spans, visible
from launchlab.reporting.reporttables import styled
from launchlab.store.comparerecord import Batch, BeforeAfter, Shift
from launchlab.verdicts.comparesentences import interval_text

Section = tuple[str, str]  # (MIME type, text): "text/markdown" or "text/html"


def _batch_line(b: Batch) -> str:
    kind = "imported runs" if b.imported else "threshold search" if b.search else "fixed plan"
    judged = "controlled" if b.controlled else f"NOT controlled ({b.confounds} confound(s))"
    return (f"{b.experiment} · {b.created_at or '?'} · {kind}, {b.runs} runs ({b.valid_runs} valid) · "
            f"{b.server_kind}{' (simulated)' if b.simulated else ''} · {judged}")


def outcome_rows(record: BeforeAfter) -> pd.DataFrame:
    """One row per variant both ran: ready / valid runs on each side, Fisher's exact p, the change."""
    rows = [{"variant": o.variant, "before (ready/valid)": f"{o.before_ready}/{o.before_valid}",
             "after (ready/valid)": f"{o.after_ready}/{o.after_valid}",
             "Fisher p": None if o.p_value is None else float(f"{o.p_value:.2g}"),
             "outcome": "not compared" if o.changed is None else "CHANGED" if o.changed else "unchanged",
             "failure reasons (before → after)": f"{', '.join(o.before_reasons) or '—'} → "
                                                 f"{', '.join(o.after_reasons) or '—'}"}
            for o in record.outcomes]
    return pd.DataFrame(rows, columns=["variant", "before (ready/valid)", "after (ready/valid)", "Fisher p", "outcome",
                                       "failure reasons (before → after)"])


def _in_units(s: Shift) -> tuple[str, float]:
    """A metric's name and scale as shown: memory in GiB (the unit of the report and the logs)."""
    if s.unit == "MiB":
        return s.metric.replace("_mib", "_gib"), 1 / 1024
    return s.metric, 1.0


def _number(value: float | None, scale: float, unit: str) -> str:
    if value is None:
        return ""
    value *= scale
    if unit == "tokens":
        return f"{value:,.0f}"
    return f"{value:.4g}" if abs(value) < 1 else f"{value:,.2f}"


def shift_rows(record: BeforeAfter) -> pd.DataFrame:
    """One row per variant and metric: each side's mean (n), the difference after − before and its interval."""
    rows = []
    for s in record.shifts:
        name, scale = _in_units(s)
        unit = "tokens" if s.unit == "tokens" else ""

        def fmt(x: float, scale: float = scale, unit: str = unit) -> str:
            return ("+" if x * scale >= 0 else "") + _number(x, scale, unit)

        rows.append({"variant": s.variant, "metric": name,
                     "before": f"{_number(s.before_mean, scale, unit)} (n={s.before_n})" if s.before_n else "—",
                     "after": f"{_number(s.after_mean, scale, unit)} (n={s.after_n})" if s.after_n else "—",
                     "after − before": "" if s.diff is None else fmt(s.diff),
                     "interval": (interval_text(s, fmt) if s.diff is not None
                                  else f"not compared: {s.not_compared}" if s.not_compared else "one side has no value")
                     + (f"; runs not ready left out: {', '.join(s.left_out)}"
                        if s.left_out and not s.not_compared else "")})
    return pd.DataFrame(rows, columns=["variant", "metric", "before", "after", "after − before", "interval"])


def threshold_rows(record: BeforeAfter) -> pd.DataFrame:
    def shown(interval, state) -> str:
        return f"({interval[0]:g}, {interval[1]:g}]" if interval else (state or "not searched")

    rows = [{"stratum": t.stratum, "before": shown(t.before_interval, t.before_state),
             "after": shown(t.after_interval, t.after_state),
             "shift": "" if t.shift_low is None else f"{t.shift_low:+.4g} to {t.shift_high:+.4g}",
             "predicted before → after": " → ".join("?" if p is None else f"{p:.4f}"
                                                     for p in (t.before_predicted, t.after_predicted))}
            for t in record.thresholds]
    return pd.DataFrame(rows, columns=["stratum", "before", "after", "shift", "predicted before → after"])


# ---------------------------------------------------------------------------------------------------------
# The terminal


def table(frame: pd.DataFrame) -> str:
    """A plain text table, columns padded to their widest cell."""
    cells = [[str(c) for c in frame.columns]] + [["" if v is None or (isinstance(v, float) and pd.isna(v)) else str(v)
                                                  for v in row] for row in frame.itertuples(index=False)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(frame.columns))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells)


def terminal(record: BeforeAfter) -> str:
    """The comparison as `launchlab compare` prints it: the two, the sentences, what differs, the tables."""
    lines = [f"before  {record.before.run_dir}", f"        {_batch_line(record.before)}",
             f"after   {record.after.run_dir}", f"        {_batch_line(record.after)}", ""]
    lines += record.summary
    if not record.comparable:  # the refusal is the last word
        return visible("\n".join(lines))
    if record.question.notes:
        lines += ["", "Also differs in the design (the question is the same):"]
        lines += [f"  - {n}" for n in record.question.notes]
    if record.differences:
        lines += ["", "What differs outside the factors:"]
        lines += [f"  - [{d.kind}] {d.detail}" + _within(d.within) for d in record.differences]
    for title, frame in (("Outcomes per variant", outcome_rows(record)),
                         ("KV capacity, peak memory and break-even per variant", shift_rows(record)),
                         ("Thresholds per stratum", threshold_rows(record))):
        if not frame.empty:
            lines += ["", f"{title}:", table(frame)]
    if record.warnings:
        lines += [""] + [f"warning: {w}" for w in record.warnings]
    return visible("\n".join(lines))


def _within(sides: list[str]) -> str:
    return f" (it differs among the runs {' and '.join(sides)} too)" if sides else ""


# ---------------------------------------------------------------------------------------------------------
# compare.html and the summary notebook


def sections(record: BeforeAfter, *, heading: str = "#") -> list[Section]:
    """The comparison as the report shows it: its Markdown (escaped) and its tables (escaped HTML), in order.
    heading: the level of its title ("#" on its own page, "##" as a section of the summary)."""
    out: list[Section] = [("text/markdown", _head(record, heading))]
    if not record.comparable:  # the refusal is the last word
        return out
    if record.question.notes:
        out.append(("text/markdown", "**Also differs in the design** (the question is the same):\n\n"
                    + "\n".join(f"- {md(n)}" for n in record.question.notes)))
    out.append(("text/markdown", _differences_markdown(record, heading)))
    for title, frame, precision in ((f"{heading}# Outcomes per variant\n\nReady runs among the valid ones, and "
                                     "Fisher's exact test (two-sided) of the counts.", outcome_rows(record), 2),
                                    (f"{heading}# KV capacity, peak memory and break-even per variant\n\nThe "
                                     "difference of the means (after − before) with Welch's 95 % t interval (the "
                                     "runs of two batches are independent samples).", shift_rows(record), 4),
                                    (f"{heading}# Thresholds per stratum", threshold_rows(record), 4)):
        if not frame.empty:
            out += [("text/markdown", title), ("text/html", styled(frame, precision=precision).to_html())]
    if record.warnings:
        out.append(("text/markdown", f"{heading}# Warnings\n\n" + "\n".join(f"- ⚠ {md_spans(w)}"
                                                                         for w in record.warnings)))
    return out


def _head(record: BeforeAfter, heading: str) -> str:
    sides = "\n".join(f"- **{b.label}**: {md_code(b.run_dir)} — {md(_batch_line(b))}" for b in (record.before,
                                                                                                   record.after))
    sentences = "\n\n".join(_lead(s) for s in record.summary)
    return f"{heading} Before and after: {md(record.after.experiment)}\n\n{sides}\n\n{sentences}"


def _lead(sentence: str) -> str:
    """A sentence of the summary with its lead ("Outcomes unchanged:") in bold, as the verdict's prose reads."""
    head, colon, rest = sentence.partition(": ")
    if not colon or len(head) > 60:
        return md(sentence)
    return f"**{md(head)}:** {md(rest)}"


def _differences_markdown(record: BeforeAfter, heading: str) -> str:
    title = f"{heading}# What differs outside the factors\n\n"
    if not record.differences:
        return title + "Nothing: versions, installed files, environment, host, driver, GPUs, what the server logs state " \
                       "and the params are the same in the runs of both (where the kit observed them)."
    return title + "\n".join(f"- **{md(d.kind)}** — {md(d.detail)}{md(_within(d.within))}" for d in record.differences)
