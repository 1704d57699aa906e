"""How the report formats what it shows: memory in GiB, escaped tables (HTML Stylers and Markdown), figures as
SVG or PNG with alternative text, the end of a log. Shared by the notebook's sections (report.py) and report.md
(reportmd.py); every string from a log, a host or a params file is escaped here."""

from __future__ import annotations

import io
import math
from pathlib import Path

import pandas as pd
from IPython.display import SVG, Image, display
from pandas.io.formats.style import Styler

from launchlab.escaping import html_text, md


def figure_svg(fig) -> str:
    """A figure as SVG whose text stays text (not outlines), so the page lays it out and a browser test can measure
    where each label lands; closed afterwards so the inline backend does not show it a second time."""
    for ax in fig.axes:  # named groups in the SVG, found by tests/test_browser.py's overlap check
        ax.xaxis.label.set_gid("xlabel")
        ax.yaxis.label.set_gid("ylabel")
    import matplotlib.pyplot as plt  # loaded already (fig is one); not at the top: report.md draws no figure

    buffer = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": "launchlab"}):  # salt: the same ids every run
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue()


def show(fig, alt: str, raster: bool = False) -> None:
    """A figure with alternative text (nbconvert's placeholder says nothing): SVG for charts, PNG (`raster`) for
    dense line plots, where thousands of points would make the page heavy."""
    if not raster:
        display(SVG(data=figure_svg(fig), metadata={"alt": alt}))
        return
    import matplotlib.pyplot as plt  # loaded already, as in figure_svg

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    display(Image(data=buffer.getvalue(), format="png", metadata={"alt": alt}))


def in_gib(frame: pd.DataFrame) -> pd.DataFrame:
    """Memory columns in GiB, the unit of the plots and the server logs (`peak_mem_used_mib` → `_gib`)."""
    mib = [c for c in frame.columns if isinstance(c, str) and "_mib" in c]
    out = frame.copy()
    for column in mib:
        out[column] = pd.to_numeric(out[column], errors="coerce") / 1024
    return out.rename(columns={c: c.replace("_mib", "_gib") for c in mib})


def effects_in_gib(effects: pd.DataFrame) -> pd.DataFrame:
    """The effects rows of a MiB metric in GiB (the ratio is the same in either unit)."""
    rows = effects["metric"].astype(str).str.contains("_mib")
    for column in ("mean", "sd", "min", "max", "baseline_mean", "diff", "ci_low", "ci_high"):
        if column in effects:
            effects[column] = effects[column].astype(float)
            effects.loc[rows, column] = effects.loc[rows, column] / 1024
    effects.loc[rows, "metric"] = effects.loc[rows, "metric"].str.replace("_mib", "_gib")
    return effects


def styled(frame: pd.DataFrame, precision: int = 2) -> Styler:
    """A table as the report shows it: no index column, fixed decimals, long texts in full, NaN as blank, and
    every cell and header HTML-escaped (cells hold log lines and params values)."""
    frame = frame.rename(columns=lambda c: html_text(c))
    return frame.style.hide(axis="index").format(precision=precision, na_rep="", thousands=",", escape="html")


def log_tail(path: Path, lines: int = 20) -> str:
    """The last lines of a (possibly huge) log file."""
    with open(path, "rb") as fh:
        fh.seek(max(0, path.stat().st_size - 64 * 1024))
        return "\n".join(fh.read().decode("utf-8", errors="replace").splitlines()[-lines:])


def markdown(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table, every cell escaped (pandas' to_markdown needs an extra package)."""
    def cell(v) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            return "" if math.isnan(v) else f"{v:.3f}"
        return md(v)

    head = "| " + " | ".join(md(c) for c in frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])
