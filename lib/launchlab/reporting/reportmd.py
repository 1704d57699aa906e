"""report.md, the verdict as Markdown for pasting into an issue, and verdict.json, written from the same Report
the summary notebook shows."""

from __future__ import annotations

import shlex
from pathlib import Path

import pandas as pd

from launchlab.escaping import md, md_block, md_spans, visible
from launchlab.reporting import report
from launchlab.reporting.report import IMPORTED_NOTE
from launchlab.reporting.reporttables import in_gib, markdown
from launchlab.store import rundir
from launchlab.store.verdictrecord import Verdict
from launchlab.verdicts import analysis, grouping, thresholds


def write_verdict(run_dir: Path) -> Verdict:
    """verdict.json and report.md (for pasting into an issue) from the frames of a run directory."""
    rep = report.load(run_dir)
    v = rep.computed_verdict()  # never the verdict.json being replaced
    rep.__dict__["verdict"] = v  # what report.md's prose reads (Report.verdict is a cached property)
    directory = rundir.RunDir(rep.run_dir)
    rundir.write_json(directory.verdict_file, v.to_json())
    # the answer first (headline.py), then the outcomes that show it at a glance; the question and the detail below
    text = [f"# {md(rep.exp.experiment)}", "", rep.headline_record.markdown(), ""]
    text += ["## Outcomes", "", markdown(in_gib(analysis.outcomes(rep.observations, rep.factors))), "",
             analysis.READY_PEAK, ""]
    text += ["## Verdict", "", f"Question: {md(rep.exp.question)}", ""]
    if rep.exp.simulated:
        text += ["> SIMULATED host: the GPUs and the server are simulated by launchlab.", ""]
    if rep.imported:
        text += [f"> {md(IMPORTED_NOTE)}", ""]
    if v.thresholds is not None:  # a search's answer is its thresholds: they lead
        text += [thresholds.markdown(v.thresholds), ""]
        rundir.write_frame(directory.thresholds_frame, rep.thresholds)
    text += [rep.verdict_markdown(), ""]
    if v.excluded_runs:
        text += ["## Runs that are not observations", ""]
        text += [r.markdown() for r in v.excluded_runs] + [""]
    if v.warmup_runs:
        text += ["## Warm-up runs", "", report.warmup_markdown(v.warmup_runs).strip(), ""]
    if v.level_checks:
        checks = pd.DataFrame([c.counts() for c in v.level_checks])
        text += ["## Did each level take effect? (the server's own log)", "", markdown(checks), ""]
    if v.confounds:
        text += ["## Confounds", ""] + [f"- {md(c.kind)}: {md(grouping.detail(c.detail))}" for c in v.confounds] + [""]
    if v.warnings:
        text += ["## Warnings", ""] + [f"- {md_spans(w)}" for w in v.warnings] + [""]
    summary = rep.budget_summary()
    if not summary.empty:
        text += ["## Memory budget (from the server's log)", "", markdown(summary), ""]
    text += _commands(rep)
    # pasted into issues and read in terminals (`cat report.md`): no control character of a log or params value
    # reaches it raw, whichever table or line carries it
    rundir.write_text(directory.report_md, visible("\n".join(text)))
    return v


def _commands(rep: report.Report) -> list[str]:
    """report.md's last section: each imported run's command, or each variant's."""
    text = ["## Commands", ""]
    for run_id, variant, command in rep.imported_commands() if rep.imported else []:
        text += [f"{md(run_id)} ({md(variant)}):", "", md_block(command, "sh"), ""]
    for name, argv, notes in rep.variant_commands() if not rep.imported else []:
        text += [f"{md(name)}:", "", md_block(shlex.join(argv), "sh"), ""]
        text += [*(f"- {md(n)}" for n in notes), ""] if notes else []
    return text
