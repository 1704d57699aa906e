"""The comparison of a run directory as summary.ipynb shows it (and reportmd.py writes it), in the order a
reader needs it — verdict, design, confounds, outcomes, effects, budget, timelines, per-run detail."""

from __future__ import annotations

import dataclasses
import os
import shlex
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from urllib.parse import quote

import pandas as pd
from IPython.display import HTML, Markdown, display
from pandas.io.formats.style import Styler

from launchlab import masking, params, terminal
from launchlab.errors import RunDirError
from launchlab.escaping import html_text, md, md_code, md_spans
from launchlab.logparse.kinds import KINDS
from launchlab.reporting import headline
from launchlab.reporting.reporttables import (
    effects_in_gib,
    in_gib,
    log_tail,
    outcome_colours,
    show,
    styled,
    with_detail_rows,
)
from launchlab.store import finding, rundir
from launchlab.verdicts import (
    analysis,
    budget,
    casefile,
    frames,
    grouping,
    question,
    thresholds,
    verdict,
)

IMPORTED_NOTE = ("IMPORTED runs: made by hand and brought in with `launchlab import`. The kit did not watch "
                 "them — preflight GPU state, installed files and package versions, environment and startup time are "
                 "not observed (imported); each outcome is read from its log alone (ready line, failure line, or "
                 "unknown), and each level is checked against what the log shows.")
NOT_GIVEN = "(not given: not observed (imported))"


THRESHOLD_INTRO = ("## Threshold search\n\nFor a params file with `search:`: per stratum, the interval of the "
                   "searched flag between the highest value that did not start and the lowest that did, next to the "
                   "break-even the server's own memory numbers predict; strata whose outcome was noisy or not monotone "
                   "in the flag are named with their runs.")


def _plots():
    """The plotting module, imported when a figure is drawn: matplotlib costs a process about a second, and
    report.md (reportmd, `launchlab run --no-html`) draws none."""
    from launchlab.reporting import plots

    return plots


def warmup_markdown(warmups: list[dict]) -> str:
    """The warm-up runs as a paragraph (empty without any): what they were for, and how each ended."""
    if not warmups:
        return ""
    lines = [f"- {md_code(w['run_id'])} on {md(w['host'])}: {md(w['status'] or 'not finished')}"
             + (f", started in {w['startup_s']:.1f} s" if w["startup_s"] is not None else "") for w in warmups]
    return (f"\n\n**{len(warmups)} warm-up run(s)** of the baseline (params `warmup:`) ran first on each host, to "
            "fill cold caches; they are never compared:\n\n" + "\n".join(lines))


def imported_banner() -> str:
    """The quote that heads a report of imported runs; its own `code` spans stay code (md() showed backticks)."""
    return f"> {md_spans(IMPORTED_NOTE)}"


def sampler_name(sampler: params.SamplerSpec) -> str:
    """The GPU sampler as the runs had it: `NVML every 5 ms`, `nvidia-smi every 100 ms` (a chart or a sentence that
    said nvidia-smi every 100 ms for a 5 ms NVML sampler misdescribed the trace)."""
    name = {"nvml": "NVML", "none": "no sampler"}.get(sampler.kind, sampler.kind)
    return name if sampler.kind == "none" else f"{name} every {sampler.interval_ms:,} ms"


# more runs than this draw the timeline as PNG: their SVG would weigh megabytes (bench/report_scale.py)
TIMELINE_SVG_MAX_RUNS = 40


def _command_html(argv: list[str]) -> str:
    """A command whose lines break only between its arguments: each is one unbreakable span (the page broke
    `--disable-custom-all-reduce` after its first dash), joined by the spaces a line may break at."""
    return " ".join(f'<span class="ll-nw">{html_text(shlex.quote(a))}</span>' for a in argv)  # ll-nw: nowrap


@dataclass(frozen=True)
class Report(casefile.CaseFile):
    """A run directory's case file (verdicts/casefile.py: its records and the verdict made from them) as the
    summary shows it, section by section."""

    chosen: finding.Chosen | None = None  # how load() picked it when no run directory was named

    def threshold_search(self) -> None:
        """The search's section: interval per stratum, the table and the probes' plot — and nothing at all for a
        fixed plan (an empty section would read as a missing result)."""
        spec = self.exp.search
        if spec is None:
            return
        display(Markdown(THRESHOLD_INTRO + "\n\n" + thresholds.markdown(self.threshold_verdict)))
        # each stratum's runs counted, not listed: a dozen ids made a wall of text in one cell (they are each
        # named in the bullets above and in the table of every run)
        # and what the bullets say in words (the prediction the search followed) or the frame keeps only for older
        # readers (pre_load_free_gib: budget_total_gib under its old name) left out: the table fits 1280 px
        shown = self.thresholds.assign(runs=[len(r.split(", ")) if r else 0 for r in self.thresholds["runs"]]).drop(
            columns=[thresholds.LEGACY_TOTAL, "guide_prediction", "guide_from"])
        display(styled(shown, precision=4, as_written=tuple(self.factors)))
        if self.frames.runs.empty:
            return
        stratum_of = {p.run_id: p.stratum for p in self.planned}
        fig = _plots().threshold_outcomes(self.runs, stratum_of, spec.factor, spec.flag, self.thresholds,
                                       self.exp.simulated)
        show(fig, f"Dots: the outcome of every probe run against {spec.flag}, one row per stratum; shaded: the "
                  "interval found; black tick: the break-even the log's numbers predict")

    # -- sections ---------------------------------------------------------------------------------------

    def title(self) -> Markdown:
        runs = self.frames.runs
        sim = ("\n\n> **SIMULATED host.** The GPUs, nvidia-smi and the SGLang server of this experiment are "
               "simulated by launchlab (real processes, simulated memory). Use it to learn the kit, "
               "not as evidence about a real server.") if self.exp.simulated else ""
        finished = f"{len(runs)} of {len(self.manifest.run_ids)} planned runs finished"
        if self.imported:
            sim += f"\n\n{imported_banner()}"
            finished = f"{len(runs)} imported run(s)"
        if self.manifest.single_run:
            finished += (" — **one run of run_variant.ipynb, not a batch**: the plan's other runs were never to run "
                         f"here, so this is no verdict of the experiment; {md_code('launchlab run ' + self.params_name)} "
                         "runs them all")
        return Markdown(f"# {md(self.exp.experiment)}\n\n**Question:** {md(self.exp.question or '(none given)')}{sim}"
                        f"\n\n{finished} · run directory {md_code(self.run_dir.name)}{self.chosen_markdown()}")

    @property
    def params_name(self) -> str:
        """The params file as `launchlab run` takes it: the one the run directory was made from."""
        return self.manifest.params_path(self.run_dir) or "PARAMS"

    def chosen_markdown(self) -> str:
        """Which run directory the summary picked when it was given none, and why it passed the newer ones over."""
        if self.chosen is None:
            return ""
        skipped = "".join(f"\n- {md_spans(s)}" for s in self.chosen.skipped)
        if self.chosen.finished:
            head = "the newest run directory whose batch finished (`run_dir` was empty)"
            return f"\n\n**Shown:** {head}." + (f" Newer ones passed over:{skipped}" if skipped else "")
        why = "" if self.manifest.single_run else f" ({md_spans(self.chosen.why_not)})"  # the line above says it
        return (f"\n\n> **No finished batch** under the outputs folder (`run_dir` was empty), so no verdict of a whole "
                f"experiment: shown is the newest run directory{why}. A batch of the whole plan "
                "(`launchlab run PARAMS`) makes one; then run this notebook again."
                + (f" Also passed over:{skipped}" if skipped else ""))

    @property
    def headline_record(self) -> headline.Headline:
        """The answer in one sentence, its strength and what would settle it (headline.py), from the verdict."""
        return headline.of(self.verdict, planned=len(self.manifest.run_ids),
                           resume=self.manifest.resume_command(self.run_dir, shared=True),
                           relative=self.manifest.resume_relative(self.run_dir))

    def headline(self) -> HTML:
        """The report's first box: the answer, its strength, what would settle it (before any table but the
        outcomes, which answer at a glance)."""
        return HTML(self.headline_record.html())

    def verdict_text(self) -> Markdown:
        return Markdown(self.verdict_markdown())

    def verdict_markdown(self) -> str:
        """The verdict's prose, then the answer to the experiment's question where the measurements give one."""
        said = question.markdown(self.exp.question, self.verdict.effects, self.baseline_levels,
                                 sampler=sampler_name(self.exp.sampler))
        return verdict.markdown(self.verdict, self.budget_summary()) + (f"\n\n{said}" if said else "")

    def design(self) -> Markdown:
        factors = "\n".join(f"- {md_code(f)}: {', '.join(md_code(lv) for lv in levels)}"
                            for f, levels in self.manifest.factors.items()) or "- none"
        order = " → ".join(self.manifest.run_ids[: len(self.manifest.run_ids) // max(1, self.exp.repetitions)])
        hosts = self.manifest.hosts
        if self.imported:
            return Markdown(f"**Factors**\n\n{factors}\n\n**Baseline:** {md(self.manifest.baseline)} · "
                            f"**runs:** {len(self.manifest.run_ids)} imported logs, filed by the user under the "
                            "levels above (each checked against its log below)")
        return Markdown(f"**Factors**\n\n{factors}\n\n**Baseline:** {md(self.manifest.baseline)} · "
                        f"**repetitions:** {self.exp.repetitions}, interleaved (one round: {md(order)}) · "
                        f"**host(s):** {md(', '.join(hosts))}")

    def level_checks_table(self) -> Styler:
        checks = self.verdict.level_checks
        if not checks:
            return styled(pd.DataFrame({"note": ["no level sets a flag the server's log records, and no factor is "
                                                 "about custom all-reduce: nothing to check"]}))
        frame = pd.DataFrame([{**c.counts(), "detail": grouping.detail(c.detail)} for c in checks])
        return styled(frame)

    @property
    def imported(self) -> bool:
        """The runs were made by hand and brought in with `launchlab import` (the kit did not watch them)."""
        return self.manifest.imported

    def imported_commands(self) -> list[tuple[str, str, str]]:
        """(run id, variant, the command as given, masked) of each imported run."""
        out = []
        for run in self.planned:
            argv = (self.facts.get(run.run_id) or {}).get("command")
            out.append((run.run_id, run.variant, shlex.join(argv) if argv else NOT_GIVEN))
        return out

    def commands(self) -> HTML:
        """Each variant's command, and its environment and patches where they differ from the baseline's."""
        if self.imported:
            return HTML("\n".join(f"<p><b>{html_text(r)}</b> ({html_text(v)})</p><pre>{html_text(c)}</pre>"
                                   for r, v, c in self.imported_commands()))
        parts = []
        for name, argv, notes in self.variant_commands():
            # one block per variant, set apart: a label ran into the command above it
            parts.append(f'<div class="ll-command"><p><b>{html_text(name)}</b></p><pre>{_command_html(argv)}</pre>'
                         + (f"<p>{'<br>'.join(html_text(e) for e in notes)}</p>" if notes else "") + "</div>")
        return HTML("\n".join(parts))

    def variant_commands(self) -> list[tuple[str, list[str], list[str]]]:
        """Each variant's label, command and notes (secrets masked): the baseline's whole environment, the others'
        environment where it differs from the baseline's, and each variant's patches."""
        base = params.baseline_variant(self.exp)
        base_env = {**self.exp.server.env, **base.env}
        masker, secrets = masking.for_run(self.exp), self.exp.secrets
        out = []
        for variant in params.expand(self.exp):
            argv = masker.argv(params.apply_flags(list(self.exp.server.command), variant.flags), secrets)
            env = {**self.exp.server.env, **variant.env}
            shown = masker.env(env, secrets)
            if variant.name == base.name:
                notes = [f"env {k}={v}" for k, v in shown.items()]
            else:
                notes = [f"env {k}={v}" for k, v in shown.items() if base_env.get(k) != env[k]]
                notes += [f"env {k} unset" for k in base_env if k not in env]
            # by name: the resolved params hold the path of the machine that ran it (the patch's files are checked)
            notes += [f"patch {os.path.basename(p)}" for p in variant.patches]
            out.append((variant.name + (" (baseline)" if variant.name == base.name else ""), argv, notes))
        return out

    def confounds(self) -> Markdown:
        found = self.verdict.confounds
        if not found:
            if self.valid_runs.empty:
                return Markdown("No valid run to compare: confounds cannot be looked for.")
            return Markdown("No confound found: versions, installed files, environment, host, driver and the GPUs' "
                            "state before each launch are the same in every valid run (besides the declared "
                            "factors), and every level checked took effect.")
        lines = [f"- **{md(c.kind)}** — {md(grouping.detail(c.detail))} (runs: {md(grouping.runs_named(c.runs))})"
                 for c in found]
        return Markdown("**The comparison is not controlled.**\n\n" + "\n".join(lines))

    def outcomes(self) -> Styler:
        """Each variant's runs and how they ended, the outcome cell red to green by its share of ready runs."""
        return outcome_colours(styled(in_gib(analysis.outcomes(self.observations, self.factors)),
                                      as_written=tuple(self.factors)))

    def outcome_grid(self) -> None:
        fig = _plots().outcome_grid(self.observations, self.factors)
        if fig is not None:
            a, b = self.factors
            show(fig, f"Heatmap: the share of ready runs for every combination of {a} and {b}")

    def deciders(self) -> Styler:
        """The verdict's decision per factor, with the strength of its evidence."""
        rows = [{"factor": f, "status": d.status, "summary": d.summary, "evidence": d.counts(),
                 "p_value (Fisher)": d.p_value, "repetitions_to_settle": d.repetitions_to_settle}
                for f, d in self.verdict.factors.items()]
        return styled(pd.DataFrame(rows), precision=3)

    def effects(self) -> Styler:
        effects = pd.DataFrame([dataclasses.asdict(e) for e in self.verdict.effects])
        if effects.empty:
            return styled(pd.DataFrame({"note": ["no metric was measured on both sides of any factor in one stratum"]}))
        effects["strata"] = effects["strata"].map("; ".join)
        # matched differences all the same: no interval (a zero-width one would read as a precise difference)
        effects["diffs_identical"] = [e.no_spread for e in self.verdict.effects]
        effects.loc[effects["diffs_identical"], ["ci_low", "ci_high"]] = None
        effects = effects_in_gib(effects)
        columns = ["factor", "level", "baseline_level", "metric", "strata", "n", "mean", "sd", "min", "max",
                   "baseline_n", "baseline_mean", "diff", "ci_low", "ci_high", "diffs_identical", "ratio",
                   "signs_disagree"]
        # a flag false in every row says nothing a row needs (no interval is blank already): it would only widen the
        # table past a 1280 px page
        columns = [c for c in columns if c not in ("diffs_identical", "signs_disagree") or effects[c].any()]
        return styled(effects[columns], precision=3, rows_of="metric", breakable=("factor", "baseline_level", "metric", "strata"))

    def warnings(self) -> Markdown:
        items = self.verdict.warnings
        return Markdown("\n".join(f"- ⚠ {md_spans(w)}" for w in items) if items else "No warnings.")

    def excluded(self) -> Markdown:
        rows = self.verdict.excluded_runs
        warmups = warmup_markdown(self.verdict.warmup_runs)
        if not rows:
            return Markdown("Every planned run finished and is a valid observation." + warmups)
        lines = [r.markdown() for r in rows]
        return Markdown(f"**{len(rows)} run(s) are not observations of the server** and are left out of every "
                        "comparison:\n\n" + "\n".join(lines) + warmups)

    def budget_summary(self) -> pd.DataFrame:
        return budget.summarize(self.budget)

    def budget_intro(self) -> Markdown:
        """How the server sizes its KV cache, for the kinds whose logs carry the numbers."""
        if (intro := KINDS[self.exp.server.kind].report_intro) is not None:
            return Markdown(intro)
        return Markdown(f"The `{self.exp.server.kind}` server prints no memory budget in its log; the GPU memory it "
                        f"took is in the effects above (`peak_mem_used_gib`, from {md(sampler_name(self.exp.sampler))}) "
                        "and the timelines below.")

    def budget_table(self) -> Styler | Markdown:
        summary = self.budget_summary()
        if summary.empty:  # the intro above already says why; an empty table would only look broken
            return Markdown("")
        return styled(summary, precision=3)

    def budget_gap(self) -> Markdown:
        if self.budget.empty:
            return Markdown("")
        notes = sorted({n for n in self.budget.get("gap_note", pd.Series(dtype=str)) if n})
        return Markdown("\n".join(f"- {n}" for n in notes) or "The formula's numbers match the card within 1 GiB.")

    @cached_property
    def memory(self) -> pd.DataFrame:
        """Per-variant means of the memory fields the server kind's log gives (ServerKind.memory_fields)."""
        return analysis.rank_memory(self.frames.events, self.frames.runs,
                                    fields=KINDS[self.exp.server.kind].memory_fields)

    def rank_memory(self) -> Styler | Markdown:
        """Per-variant means of the memory lines the server printed, when it printed any."""
        memory = self.memory
        if memory.empty:
            return Markdown("")
        units = KINDS[self.exp.server.kind].units_note  # the kind's own: SGLang's `GB` is GiB, under SGLang only
        display(Markdown(f"Per-variant means of the memory lines the server printed ({units}), with the ranks that "
                         "disagree named."))
        return styled(memory)

    def budget_plot(self) -> None:
        """The stacked budget per variant, when the server's log gave the numbers (nothing otherwise)."""
        memory = self.memory
        if memory.empty or not memory.columns.isin([c for c, _, _ in _plots().BUDGET_PARTS]).any():
            return
        free = KINDS[self.exp.server.kind].free_memory  # what was left after the last phase, where the log says
        if free is not None and (left := free(memory)) is not None:
            memory = memory.assign(free_gib=left)
        card = self.frames.telemetry["mem_total_mib"].max() / 1024 if len(self.frames.telemetry) else None
        from launchlab.reporting import budgetchart  # matplotlib, as _plots

        flag = KINDS[self.exp.server.kind].break_even
        show(budgetchart.memory_budget(memory, card, self.budget_summary(), flag.flag if flag else "the memory flag"),
             "Stacked bars: where each variant's GPU memory went, per the server's log (distributed init, weights, KV "
             "cache, CUDA graphs, free), against the card's capacity and the share the memory flag keeps back; "
             "beside them each phase on a log scale")

    def timeline(self) -> None:
        if self.frames.telemetry.empty:
            why = ("`sampler: {kind: none}`: the runs were not sampled" if self.exp.sampler.kind == "none"
                   else "no nvidia-smi capture with timestamps was given with the imported runs" if self.imported
                   else "no run left nvidia-smi samples")
            display(Markdown(f"No GPU trace: {why}. Peak memory figures are missing (not 0)."))
            return None
        fig = _plots().memory_timeline(self.frames.telemetry, self.frames.runs, simulated=self.exp.simulated,
                                       sampler=sampler_name(self.exp.sampler))
        show(_plots().mark_phases(fig, self.frames.events, self.frames.runs, self.frames.telemetry),
             "Line plots: GPU memory used over time, one panel per variant, one line per run coloured by outcome",
             raster=len(self.frames.runs) > TIMELINE_SVG_MAX_RUNS)

    def failures(self) -> HTML:
        """Each run that did not become ready, its failure message whole on a row of its own (wrapped at any width)."""
        found = analysis.failures(self.runs)
        if found.empty:
            return HTML("<p>Every run became ready.</p>")
        return HTML(with_detail_rows(found, "failure_message", label="failure message", as_written=tuple(self.factors)))

    def failure_logs(self, lines: int = 20) -> HTML:
        """The last lines of the server log of every run that did not become ready."""
        parts = []
        for run in self.runs[self.runs["status"] != "ready"].itertuples():
            path = rundir.RunDir(self.run_dir).run(run.run_id).log()
            tail = log_tail(path, lines) if path.exists() else "(no server log was collected)"
            parts.append(f"<details><summary>{html_text(run.run_id)} — {html_text(run.status)}</summary>"
                         f"<pre>{html_text(tail)}</pre></details>")
        return HTML("\n".join(parts) or "<p>Every run became ready.</p>")

    def runs_table(self) -> HTML:
        """Every run, its failure message on a row of its own (as in "Why launches failed"): the table fits the page."""
        return HTML(with_detail_rows(in_gib(self.runs), "failure_message", label="failure message",
                                     as_written=tuple(self.factors)))

    def run_links(self) -> HTML:
        """Relative links to each run's raw files (they work where the run directory is opened whole)."""
        items = []
        for run_id in self.manifest.run_ids:
            folder = rundir.RunDir(self.run_dir).run(run_id)
            files = (folder.log(), folder.status, folder.notebook, folder.provenance)
            links = [f'<a href="{html_text(quote(str(f.relative_to(self.run_dir))))}">{f.name}</a>'
                     for f in files if f.exists()]
            items.append(f"<li>{html_text(run_id)}: {' · '.join(links) or 'no files (the run never started)'}</li>")
        return HTML(f"<ul>{''.join(items)}</ul>")


# the telemetry columns the report reads: a 200-run directory has millions of samples, and their GPU UUIDs alone
# took hundreds of MB and seconds to read (bench/report_scale.py); frames.load(run_dir) reads them all
SUMMARY_TELEMETRY_COLUMNS = ["run_id", "t_s", "node", "gpu_index", "mem_used_mib", "mem_total_mib"]


def load(run_dir: str | Path = "") -> Report:
    """A run directory's report; an empty run_dir means the newest one under outputs/ whose batch finished (the
    newest of all where none did), and the report says which it took and why it passed the newer ones over."""
    chosen = None if run_dir else finding.newest_finished(finding.default_root())
    directory = chosen.run_dir if chosen else rundir.RunDir.check(run_dir)
    if chosen:  # papermill's terminal hears which one (the page says why)
        terminal.say(f"summary.ipynb: run directory {directory.path}"
                     + ("" if chosen.finished else " (no batch under it finished: the newest of all)"))
    path = directory.path
    exp = params.load(directory.experiment_file)
    try:
        tables = frames.load(path, telemetry_columns=SUMMARY_TELEMETRY_COLUMNS)
    except RunDirError:  # a run notebook's own folder, or a batch still running: read what the runs left
        tables = frames.build(path, exp)
    return Report(path, exp, directory.manifest(), tables, chosen)
