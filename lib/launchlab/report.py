"""The comparison of a run directory: verdict.json, report.md, and what summary.ipynb shows, in the order a
reader needs it — verdict, design, confounds, outcomes, effects, budget, timelines, per-run detail."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import pandas as pd
from IPython.display import Markdown
from pandas.io.formats.style import Styler

from launchlab import analysis, budget, frames, outputs, params, plots

VERDICT = "verdict.json"
REPORT_MD = "report.md"


@dataclass(frozen=True)
class Report:
    run_dir: Path
    exp: params.Experiment
    manifest: dict
    frames: frames.Frames

    @property
    def factors(self) -> list[str]:
        return list(self.exp.factors)

    @property
    def baseline_levels(self) -> dict[str, str]:
        return params.baseline_variant(self.exp).levels

    @cached_property
    def facts(self) -> dict[str, dict]:
        """provenance.json of every finished run, by run id."""
        out = {}
        for run_id in self.frames.runs["run_id"]:
            path = outputs.run_folder(self.run_dir, run_id) / outputs.PROVENANCE
            if path.exists():
                out[run_id] = outputs.read_json(path)
        return out

    @cached_property
    def budget(self) -> pd.DataFrame:
        f = self.frames
        if self.exp.server.kind == "vllm":
            return budget.vllm_budget(f.events, f.runs)
        return budget.sglang_budget(f.events, f.runs, f.telemetry)

    @cached_property
    def verdict(self) -> dict:
        rows = [{k: _plain(v) for k, v in row.items()} for row in budget.summarize(self.budget).to_dict("records")]
        return analysis.verdict(self.frames.runs, self.frames.events, self.factors, self.baseline_levels,
                                self.manifest["baseline"], self.facts, rows, self.exp.drain.tolerance_mib)

    # -- sections ---------------------------------------------------------------------------------------

    def title(self) -> Markdown:
        runs = self.frames.runs
        sim = ("\n\n> **SIMULATED host.** The GPUs, nvidia-smi and the SGLang server of this experiment are "
               "simulated by launchlab (real processes, simulated memory). Use it to learn the kit, "
               "not as evidence about a real server.") if self.exp.simulated else ""
        return Markdown(f"# {self.exp.experiment}\n\n**Question:** {self.exp.question or '(none given)'}{sim}\n\n"
                        f"{len(runs)} of {len(self.manifest['run_ids'])} planned runs finished · run directory "
                        f"`{self.run_dir.name}`")

    def verdict_text(self) -> Markdown:
        return Markdown(verdict_markdown(self.verdict, self.budget_summary()))

    def design(self) -> Markdown:
        factors = "\n".join(f"- `{f}`: {', '.join(f'`{lv}`' for lv in levels)}"
                            for f, levels in self.manifest["factors"].items()) or "- none"
        order = " → ".join(self.manifest["run_ids"][: len(self.manifest["run_ids"]) // max(1, self.exp.repetitions)])
        return Markdown(f"**Factors**\n\n{factors}\n\n**Baseline:** {self.manifest['baseline']} · "
                        f"**repetitions:** {self.exp.repetitions}, interleaved (one round: {order}) · "
                        f"**host(s):** {', '.join(self.manifest.get('hosts') or [self.manifest['host']])}")

    def confounds(self) -> Markdown:
        found = self.verdict["confounds"]
        if not found:
            return Markdown("No confound found: versions, installed files, environment, host, driver and the GPUs' "
                            "state before each launch are the same in every run (besides the declared factors).")
        lines = [f"- **{c['kind']}** — {c['detail']} (runs: {', '.join(c['runs'])})" for c in found]
        return Markdown("**The comparison is not controlled.**\n\n" + "\n".join(lines))

    def outcomes(self) -> Styler:
        return _table(analysis.outcomes(self.frames.runs, self.factors))

    def outcome_grid(self):
        return plots.outcome_grid(self.frames.runs, self.factors)

    def deciders(self) -> Styler:
        return _table(analysis.outcome_deciders(self.frames.runs, self.factors))

    def effects(self) -> Styler:
        effects = pd.DataFrame(analysis.factor_effects(self.frames.runs, self.frames.events, self.factors,
                                                       self.baseline_levels))
        if effects.empty:
            return _table(pd.DataFrame({"note": ["no metric was measured on both sides of any factor"]}))
        return _table(effects[["factor", "level", "baseline_level", "metric", "n", "mean", "sd", "min", "max",
                               "baseline_n", "baseline_mean", "diff", "ratio"]], precision=3)

    def variant_effects(self) -> Styler:
        return _table(analysis.variant_effects(self.frames.runs, self.frames.events, self.manifest["baseline"]), 3)

    def warnings(self) -> Markdown:
        items = self.verdict["warnings"]
        return Markdown("\n".join(f"- ⚠ {w}" for w in items) if items else "No warnings.")

    def budget_summary(self) -> pd.DataFrame:
        return budget.summarize(self.budget)

    def budget_intro(self) -> Markdown:
        """How the server sizes its KV cache, for the kinds whose logs carry the numbers."""
        if self.exp.server.kind == "sglang":
            return Markdown("SGLang sizes its KV cache as `rest = avail − total × (1 − mem_fraction_static)` with "
                            "`total` the free memory before the weights and `avail` after them (MIN over ranks). "
                            "`rest ≤ 0` is \"Not enough memory\"; the break-even fraction is `1 − avail/total`. "
                            "`logged_agrees` compares with a `DEBUG profile_max_num_token` line when the server "
                            "printed one.")
        if self.exp.server.kind == "vllm":
            return Markdown("vLLM sizes its KV cache as `total × gpu_memory_utilization − (weights + non-torch + "
                            "activation peak)`; the break-even utilization is `(weights + non-torch + activation) / total`.")
        return Markdown(f"The `{self.exp.server.kind}` server prints no memory budget in its log; the GPU memory it "
                        "took is in the effects above (`peak_mem_used_mib`, from nvidia-smi) and the timelines below.")

    def budget_table(self) -> Styler:
        summary = self.budget_summary()
        if summary.empty:
            return _table(pd.DataFrame({"note": ["the logs carry no memory-budget numbers"]}))
        return _table(summary, precision=3)

    def budget_gap(self) -> Markdown:
        if self.budget.empty:
            return Markdown("")
        notes = sorted({n for n in self.budget.get("gap_note", pd.Series(dtype=str)) if n})
        return Markdown("\n".join(f"- {n}" for n in notes) or "The formula's numbers match the card within 1 GiB.")

    def rank_memory(self) -> Styler:
        return _table(analysis.rank_memory(self.frames.events, self.frames.runs))

    def budget_plot(self):
        """The stacked budget per variant, when the server's log gave the numbers (None otherwise)."""
        memory = analysis.rank_memory(self.frames.events, self.frames.runs)
        if memory.empty:
            return None
        card = self.frames.telemetry["mem_total_mib"].max() / 1024 if len(self.frames.telemetry) else None
        return plots.memory_budget(memory, card)

    def kv_summary(self) -> Styler:
        return _table(analysis.metric_summary(self.frames.events, self.frames.runs, "kv_tokens"), precision=0)

    def timeline(self):
        fig = plots.memory_timeline(self.frames.telemetry, self.frames.runs, simulated=self.exp.simulated)
        return plots.mark_phases(fig, self.frames.events, self.frames.runs)

    def failures(self) -> Styler:
        return _table(analysis.failures(self.frames.runs))

    def runs_table(self) -> Styler:
        return _table(self.frames.runs)


def _plain(value):
    """A value JSON can hold (NaN → None, numpy scalars → Python)."""
    if value is None:
        return None
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def _table(frame: pd.DataFrame, precision: int = 2) -> Styler:
    """A table as the report shows it: no index column, fixed decimals, long texts in full, NaN as blank."""
    return frame.style.hide(axis="index").format(precision=precision, na_rep="", thousands=",")


def verdict_markdown(v: dict, budget_summary: pd.DataFrame) -> str:
    """The verdict as prose: what decided the launch, what did not, and whether the comparison is controlled."""
    lines = []
    lines.append("**Controlled comparison.**" if v["controlled"] else
                 f"**Not a controlled comparison** — {len(v['confounds'])} confound(s), see below.")
    if v["outcome_factors"]:
        lines.append(f"**Decides the launch:** {', '.join(f'`{f}`' for f in v['outcome_factors'])}.")
    if v["neutral_factors"]:
        lines.append(f"**Does not change the launch outcome:** {', '.join(f'`{f}`' for f in v['neutral_factors'])}.")
    for e in v["effects"]:
        if e["metric"] == "kv_tokens" and e["mean"] is not None and e["baseline_mean"]:
            lines.append(f"`{e['factor']}={e['level']}` changes the KV capacity by {e['diff']:+,.0f} tokens "
                         f"({e['ratio']:.3f}× of {e['baseline_mean']:,.0f}; n={e['n']}).")
    if not budget_summary.empty and "break_even_fraction" in budget_summary:
        be = budget_summary["break_even_fraction"].dropna()
        if len(be):
            pairs = zip(budget_summary["variant"], budget_summary["break_even_fraction"], strict=True)
            lines.append("**Break-even `mem_fraction_static`** (from the logged numbers: 1 − avail/total): "
                         + ", ".join(f"{name}: {b:.3f}" for name, b in pairs if pd.notna(b))
                         + ". A launch has room for a KV cache only above it.")
    return "\n\n".join(lines)


def _markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (pandas' to_markdown needs an extra package for this)."""
    def cell(v) -> str:
        if isinstance(v, float):
            return "" if math.isnan(v) else f"{v:.3f}"
        return str(v).replace("|", "\\|")

    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def load(run_dir: str | Path = "") -> Report:
    """A run directory's report; an empty run_dir means the newest run directory under outputs/."""
    path = Path(run_dir) if run_dir else outputs.latest_run_dir(outputs.default_root())
    path = outputs.check_run_dir(path)
    return Report(path, params.load(path / outputs.EXPERIMENT_FILE), outputs.read_json(path / outputs.MANIFEST),
                  frames.load(path))


def write(run_dir: Path) -> dict:
    """verdict.json and report.md (for pasting into an issue) from the frames of a run directory."""
    rep = load(run_dir)
    v = rep.verdict
    outputs.write_json(rep.run_dir / VERDICT, v)
    md = [f"# {rep.exp.experiment}", "", f"Question: {rep.exp.question}", ""]
    if rep.exp.simulated:
        md += ["> SIMULATED host: the GPUs and the server are simulated by launchlab.", ""]
    md += [verdict_markdown(v, rep.budget_summary()), "", "## Outcomes", "",
           _markdown_table(analysis.outcomes(rep.frames.runs, rep.factors)), ""]
    if v["confounds"]:
        md += ["## Confounds", ""] + [f"- {c['kind']}: {c['detail']}" for c in v["confounds"]] + [""]
    if v["warnings"]:
        md += ["## Warnings", ""] + [f"- {w}" for w in v["warnings"]] + [""]
    summary = rep.budget_summary()
    if not summary.empty:
        md += ["## Memory budget (from the server's log)", "", _markdown_table(summary), ""]
    outputs.write_text(rep.run_dir / REPORT_MD, "\n".join(md))
    return v
