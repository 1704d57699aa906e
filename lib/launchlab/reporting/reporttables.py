"""How the report formats what it shows: memory in GiB, escaped tables (HTML Stylers and Markdown), figures as
SVG or PNG with alternative text, the end of a log. Shared by the notebook's sections (report.py) and report.md
(reportmd.py); every string from a log, a host or a params file is escaped here."""

from __future__ import annotations

import hashlib
import io
import math
import os
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
from IPython.display import SVG, Image, display
from pandas.io.formats.style import Styler

from launchlab import numtext, safefiles
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
    svg = _GEOMETRY.sub(lambda m: m[1] + " ".join(_DECIMALS.sub(r"\1", m[2]).split()) + '"', buffer.getvalue())
    svg = _STYLE.sub(lambda m: m[1] + _STYLE_SPACE.sub(r"\1", m[2]).strip() + '"', svg)
    referenced = set(_REFERENCE.findall(svg))
    svg = _PLAIN_ID.sub(lambda m: m[0] if m[1] in referenced else "", svg)
    return _BARE_GROUP.sub(r"\1", svg).replace(" xlink:href=", " href=")  # SVG 2's href: every browser reads it


# matplotlib writes coordinates to 6 decimals of a point; one is a tenth of a point, an eighth of a screen pixel —
# and the committed examples' reports are 100 kB lighter. Only geometry attributes: a label's text is never touched.
_GEOMETRY = re.compile(r'(\s(?:d|x|y|x1|x2|y1|y2|cx|cy|r|width|height|viewBox|transform|points)=")([^"]*)"')
_DECIMALS = re.compile(r"(\d\.\d)\d+")
# and, for the same weight (the examples travel to the GPU machine within 64 MiB): no spaces inside a style
# attribute's declarations, and no id of a figure's, patch's or axis's group that nothing refers to (the axes',
# ticks', lines', collections', texts' and legends' stay: the browser tests find a chart's parts by them)
_STYLE = re.compile(r'(\sstyle=")([^"]*)"')
_STYLE_SPACE = re.compile(r"\s*([:;])\s*")
_REFERENCE = re.compile(r'(?:url\(#|href="#)([^)"]+)')
_BARE_GROUP = re.compile(r"<g>\n(<use [^>]*></use>)\n</g>")  # a group of one marker and nothing else
_PLAIN_ID = re.compile(r'\sid="((?:patch|figure|matplotlib\.axis)_\d+)"')


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


def styled(frame: pd.DataFrame, precision: int = 2, *, rows_of: str | None = None,
           breakable: tuple[str, ...] = (), as_written: tuple[str, ...] = ()) -> Styler:
    """A table as the report shows it: no index column, no column that is empty in every row (a host that records
    none of a field), numbers right-aligned at the precision that carries them (`column_formats`), text
    left-aligned, a column of single tokens (run ids, levels) never broken inside one, NaN as blank, and every
    cell and header HTML-escaped (cells hold log lines and params values). A long table whose rows hold different
    quantities (`rows_of`: the column naming each row's, as an effect's metric) writes the rows of a quantity whose
    every value is whole as integers (KV tokens), whatever the other rows of its columns hold. A column of
    `breakable` tokens (an effect's factor and metric) may break after a dot or an underscore before a letter, each
    piece whole (`peak_mem_` / `used_gib`), so a long name does not push the table past the page. A header is in
    words (header_html), except those `as_written` (factors: the user's own names, written as the params write
    them)."""
    frame = without_empty_columns(frame)
    formats = column_formats(frame, precision)
    names = {c: html_text(c) for c in frame.columns}
    frame = frame.rename(columns=names)
    # the table's id (its CSS selectors) from its content: pandas draws a random one, and a re-rendered report
    # would differ in every table
    uuid = hashlib.sha256(f"{precision}\0{rows_of}\0{breakable}\0{frame.to_csv()}".encode()).hexdigest()[:5]
    # no id per cell (none is read; a styled cell keeps its own): a tenth of a table's bytes
    styler = Styler(frame, uuid=uuid, cell_ids=False).hide(axis="index").format(precision=precision, na_rep="",
                                                                                thousands=",", escape="html")
    # a header in words (`peak mem used GiB`), wrapped where words are: a column is as wide as its values, not as its
    # name, so the outcomes, effects and budget tables fit a 1280 px page (issue 49) — wrapped after an underscore,
    # `peak_mem_` / `used_gib` read as two names (issue 67); the frame's name is the header's title
    kept = {html_text(n) for n in as_written}
    styler = styler.format_index(lambda name: _name_html(name) if name in kept else header_html(name), axis="columns")
    for column, format_value in formats.items():
        styler = styler.format(format_value, subset=[names[column]], na_rep="")
    broken = [c for c in breakable if c in names and c not in formats]
    for column in broken:
        styler = styler.format(_token_html, subset=[names[column]], na_rep="")  # escapes each piece itself
    if rows_of is not None and rows_of in names:
        styler = _whole_rows(styler, frame, names[rows_of], [names[c] for c in formats])
    return styler.set_table_styles({names[c]: _column_css(frame[names[c]], numeric=c in formats,
                                                          whole=c not in broken) for c in names}, overwrite=False)


def _whole_rows(styler: Styler, frame: pd.DataFrame, key: str, numeric: list[str]) -> Styler:
    """In the rows of each quantity (`key`'s value), each column whose numbers there are all whole, written as
    integers — column by column: a KV-token row's ratio (0.944) once kept its counts at 137,178.000, sd 0.000."""
    for _, rows in frame.groupby(key, sort=False):
        whole = [c for c in numeric if numtext.whole(rows[c].to_numpy().ravel().tolist())]
        if whole:
            styler = styler.format(lambda v: numtext.fixed(v, 0), subset=pd.IndexSlice[rows.index, whole], na_rep="")
    return styler


def _column_css(values: pd.Series, *, numeric: bool, whole: bool = True) -> list[dict]:
    props = "text-align: right" if numeric else "text-align: left"
    cells = props + ("; white-space: nowrap" if whole and not numeric and _tokens(values) else "")
    return [{"selector": "th", "props": props}, {"selector": "td", "props": cells}]  # headers wrap between words


def _tokens(values: pd.Series) -> bool:
    """Every cell is one token (an id, a level, a status): breaking one inside would cut the id in two."""
    texts = [str(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return bool(texts) and all(len(t) <= 80 and not any(ch.isspace() for ch in t) for t in texts)


def _is_blank(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA or value == ""


def without_empty_columns(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame without the columns that are blank in every row (a column the host that ran never fills is no
    information); a frame without rows keeps its columns (its headers say what is missing)."""
    if frame.empty:
        return frame
    return frame[[c for c in frame.columns if not all(_is_blank(v) for v in frame[c])]]


def _numeric(values: pd.Series) -> bool:
    present = [v for v in values if not _is_blank(v)]
    return bool(present) and all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
                                 and not isinstance(v, np.bool_) for v in present)


def column_formats(frame: pd.DataFrame, precision: int = 2) -> dict[str, Callable[[object], str]]:
    """How each numeric column is written: a break-even to numtext.BREAK_EVEN_DIGITS significant digits, the value a
    launch asked for (a budget's fraction) as given, a column
    of whole numbers (counts, tokens, repetitions) as integers, the rest with `precision` decimals; never `-0.0`."""
    formats: dict[str, Callable[[object], str]] = {}
    for column in frame.columns:
        values = frame[column]
        if not _numeric(values):
            continue
        if numtext.is_break_even(str(column)):
            formats[column] = numtext.significant
        elif numtext.is_asked(str(column)):
            formats[column] = numtext.as_given
        elif numtext.whole(values):
            formats[column] = partial(numtext.fixed, decimals=0)
        else:
            formats[column] = partial(numtext.fixed, decimals=precision)
    return formats


def log_tail(path: Path, lines: int = 20) -> str:
    """The last lines of a (possibly huge) log file."""
    with safefiles.open_regular(path) as fh:  # no link another user made, no FIFO waited on
        fh.seek(max(0, os.fstat(fh.fileno()).st_size - 64 * 1024))
        return "\n".join(fh.read().decode("utf-8", errors="replace").splitlines()[-lines:])


def markdown(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table, every cell escaped (pandas' to_markdown needs an extra package)."""
    formats = column_formats(frame, precision=3)

    def cell(column, v) -> str:
        if _is_blank(v):
            return ""
        return formats[column](v) if column in formats else md(v)

    head = "| " + " | ".join(md(c) for c in frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(cell(c, v) for c, v in zip(frame.columns, row, strict=True)) + " |"
            for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


# the outcome cell's background by its share of ready runs: the outcome grid's ends (all ready, none) and between
OUTCOME_COLOURS = {"all": "#c6e9c4", "some": "#fbe6a8", "none": "#f6c3c0"}


def _outcome_css(value) -> str:
    """'3/3 ready' green, '0/3 ready' red, '1/3 ready' amber; 'no valid run' uncoloured (nothing was observed)."""
    ready, _, rest = str(value).partition("/")
    total = rest.split(" ", 1)[0]
    if not (ready.isdigit() and total.isdigit() and int(total)):
        return ""
    share = "all" if ready == total else "none" if ready == "0" else "some"
    return f"background-color: {OUTCOME_COLOURS[share]}; color: #000"


def outcome_colours(styler: Styler, column: str = "outcome") -> Styler:
    """The outcomes table with its outcome column coloured red to green, so the table answers at a glance."""
    if column not in styler.data.columns:
        return styler
    return styler.map(_outcome_css, subset=[column])


def _token_html(value) -> str:
    """A single token (a run id) that may break only after a dot or an underscore before a letter, each piece
    unbroken: `01_fraction-0.004.` / `graphs-off.` — never inside `graphs-off` at its hyphen, as a browser would, nor
    inside a number (`0.004`)."""
    pieces = re.split(r"(?<=[._])(?=[A-Za-z])|(?<= )", str(value))  # and after a space, where text breaks anyway
    return "<wbr>".join(f'<span class="ll-nw">{html_text(p)}</span>' for p in pieces)  # ll-nw: nowrap


def without_false_flags(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame without the yes/no columns that say no in every row (`simulated`, `imported` of a batch the kit ran
    on a real host): a flag no row raises widens the table past the page and tells no row apart."""
    flags = [c for c in frame.columns if frame[c].dtype == bool and not frame[c].any()]
    return frame.drop(columns=flags) if len(frame) else frame


_UNITS = {"gib": "GiB", "mib": "MiB", "kib": "KiB"}


def header_html(escaped: str) -> str:
    """A column's header in words, from its escaped frame name: underscores as spaces, units as written
    (`peak_mem_used_gib` → `peak mem used GiB`), the name itself in the title."""
    if "_" not in escaped:
        return escaped
    return f'<span title="{escaped}">{" ".join(_UNITS.get(w, w) for w in escaped.split("_"))}</span>'


def _name_html(escaped: str) -> str:
    """A name shown as it is written (a factor's, as the params and the variants write it), a line break allowed
    after an underscore where the table would not fit its page otherwise."""
    return escaped.replace("_", "_<wbr>")


def with_detail_rows(frame: pd.DataFrame, detail: str, *, label: str = "", precision: int = 2,
                     as_written: tuple[str, ...] = ()) -> str:
    """An HTML table whose long text column (`detail`: a failure message) is a row of its own under each row, across
    the whole table and wrapped, so the message is read whole at 800 px instead of behind a sideways scroll; the
    other columns as `styled` shows them (escaped, single tokens unbroken). A row without a detail has no such row."""
    shown = without_false_flags(without_empty_columns(frame.drop(columns=[detail])))
    columns = list(shown.columns)
    formats = column_formats(shown, precision)
    # aligned by the page's stylesheet (.ll-detail-table: text left, a number's cell `r` right), not a style a cell
    number = ' class="r"'
    head = "".join(f"<th{number if c in formats else ''}>"
                   f"{_name_html(html_text(c)) if c in as_written else header_html(html_text(c))}</th>" for c in columns)

    def cell(column: str, value) -> str:
        if _is_blank(value):
            return "<td></td>"
        if column in formats:
            return f'<td class="r">{html_text(formats[column](value))}</td>'
        text = _token_html(value) if _tokens(pd.Series([value])) else html_text(value)
        return f"<td>{text}</td>"

    body = []
    for (_, row), text in zip(shown.iterrows(), frame[detail], strict=True):
        cells = "".join(cell(c, v) for c, v in zip(columns, row, strict=True))
        body.append(f"<tr>{cells}</tr>")
        if not _is_blank(text):
            said = f"{html_text(label)}: " if label else ""
            body.append(f'<tr class="ll-detail"><td colspan="{len(columns)}">{said}'
                        f'<span class="ll-message">{html_text(text)}</span></td></tr>')
    return f'<table class="ll-detail-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
