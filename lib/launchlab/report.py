"""What summary.ipynb shows: a run directory loaded once, and one call per section of the report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from IPython.display import Markdown
from pandas.io.formats.style import Styler

from launchlab import analysis, frames, outputs, params, plots


@dataclass(frozen=True)
class Report:
    run_dir: Path
    exp: params.Experiment
    manifest: dict
    frames: frames.Frames

    @property
    def factors(self) -> list[str]:
        return list(self.exp.factors)

    def title(self) -> Markdown:
        runs = self.frames.runs
        sim = ("\n\n> **SIMULATED host.** The GPUs, nvidia-smi and the SGLang server of this experiment are "
               "simulated by launchlab (real processes, simulated memory). Use it to learn the kit, "
               "not as evidence about a real server.") if self.exp.simulated else ""
        factors = "; ".join(f"`{f}`: {', '.join(levels)}" for f, levels in self.manifest["factors"].items())
        return Markdown(
            f"# {self.exp.experiment}\n\n**Question:** {self.exp.question or '(none given)'}{sim}\n\n"
            f"- run directory: `{self.run_dir.name}` · host `{self.manifest['host']}` · "
            f"{len(runs)} of {len(self.manifest['run_ids'])} planned runs finished\n"
            f"- factors: {factors or 'none'} · baseline: **{self.manifest['baseline']}** · "
            f"{self.exp.repetitions} repetition(s), interleaved order"
        )

    def outcomes(self) -> Styler:
        return _table(analysis.outcomes(self.frames.runs, self.factors))

    def deciders(self) -> Styler:
        return _table(analysis.outcome_deciders(self.frames.runs, self.factors))

    def rank_memory(self) -> Styler:
        return _table(analysis.rank_memory(self.frames.events, self.frames.runs))

    def kv_summary(self) -> Styler:
        return _table(analysis.metric_summary(self.frames.events, self.frames.runs, "kv_tokens"), precision=0)

    def timeline(self):
        return plots.memory_timeline(self.frames.telemetry, self.frames.runs, simulated=self.exp.simulated)

    def failures(self) -> Styler:
        return _table(analysis.failures(self.frames.runs))

    def runs_table(self) -> Styler:
        return _table(self.frames.runs)


def _table(frame: pd.DataFrame, precision: int = 2) -> Styler:
    """A table as the report shows it: no index column, fixed decimals, long texts in full, NaN as blank."""
    return frame.style.hide(axis="index").format(precision=precision, na_rep="", thousands=",")


def load(run_dir: str | Path = "") -> Report:
    """A run directory's report; an empty run_dir means the newest run directory under outputs/."""
    path = Path(run_dir) if run_dir else outputs.latest_run_dir(outputs.default_root())
    path = outputs.check_run_dir(path)
    return Report(path, params.load(path / outputs.EXPERIMENT_FILE), outputs.read_json(path / outputs.MANIFEST),
                  frames.load(path))
