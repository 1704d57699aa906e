"""`launchlab ls DIR --html`: one offline HTML page over a folder of run directories — MLflow's run table without a
server. A row per run directory (runindex.Listed), each linking its report by a relative path; a click on a column's
header sorts by it, a text box filters the rows. The page's one script is inline and allowed by its hash alone (a
Content-Security-Policy that lets no other script run and nothing load), and every string from a run directory is
escaped, so a hostile experiment name stays text."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import urllib.parse
from pathlib import Path

from launchlab.escaping import html_text
from launchlab.reporting.runindex import Listed
from launchlab.store import rundir

# sorts by a header's column (again: the other way), on each cell's data-sort where it has one, numbers as numbers,
# empty cells last either way; filters on every word typed (a row shows where its text holds them all); `?q=words`
# in the address fills the box, so a filtered index can be linked to
SCRIPT = """(() => {
  const table = document.getElementById("runs"), body = table.tBodies[0], box = document.getElementById("filter");
  const shown = document.getElementById("shown"), rows = [...body.rows];
  const key = (row, i) => (row.cells[i].dataset.sort ?? row.cells[i].textContent).trim();
  const number = /^-?\\d+(\\.\\d+)?(e-?\\d+)?$/i;
  const order = (a, b) => number.test(a) && number.test(b) ? Number(a) - Number(b) : a.localeCompare(b);
  function sortBy(th) {
    const i = th.cellIndex, dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
    for (const h of table.tHead.rows[0].cells) h.removeAttribute("aria-sort");
    th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
    body.append(...rows.slice().sort((a, b) => {
      const x = key(a, i), y = key(b, i);
      return (x === "") !== (y === "") ? (x === "" ? 1 : -1) : order(x, y) * dir;
    }));
  }
  function filter() {
    const words = box.value.toLowerCase().split(/\\s+/).filter(Boolean);
    let n = 0;
    for (const row of rows) {
      row.hidden = !words.every(w => row.textContent.toLowerCase().includes(w));
      n += !row.hidden;
    }
    shown.textContent = `${n} of ${rows.length} run directories`;
  }
  for (const th of table.tHead.rows[0].cells) {
    th.addEventListener("click", () => sortBy(th));
    th.addEventListener("keydown", e => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sortBy(th); } });
  }
  box.addEventListener("input", filter);
  box.value = new URLSearchParams(location.search).get("q") ?? box.value;
  filter();
})();"""

STYLE = """body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; margin: 0 0 .3em; }
input { font: inherit; padding: .3em .5em; width: min(30em, 100%); margin: .6em 0; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: .35em .6em; border-bottom: 1px solid #ddd; }
th { cursor: pointer; user-select: none; background: #f4f4f4; white-space: nowrap; }
th[aria-sort=ascending]::after { content: " \\25B2"; }
th[aria-sort=descending]::after { content: " \\25BC"; }
.rows { overflow-x: auto; }
td.verdict { min-width: 16em; }
td.date, td.runs { white-space: nowrap; }
.nw { white-space: nowrap; }
small { color: #555; }
code { font-size: 90%; }
/* a long token breaks only where it cannot fit a line (break-word leaves the columns' widths alone; `anywhere` let
   the verdict column shrink to ~55 px at 800 px and split "--mem-fraction-static" mid-word) */
td, code { overflow-wrap: break-word; }
.unfinished { color: #8a5300; }
.unreadable { color: #a00; }"""

# the strength is the verdict's second line (its own column left the verdict ~55 px at 800 px)
COLUMNS = ("experiment", "date", "runs", "verdict", "report")
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")  # a server flag is one token: it never breaks at its hyphens


def _hash(source: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode()


def _href(target: Path, page: Path) -> str:
    """The target relative to the page's folder, as a URL path (each name percent-encoded): the page and the
    run directories can move together."""
    relative = os.path.relpath(os.path.abspath(target), os.path.dirname(os.path.abspath(page)))
    return urllib.parse.quote(Path(relative).as_posix())


def _row(row: Listed, page: Path) -> str:
    folder = f"{row.path.parent.name}/{row.path.name}"
    if row.unreadable:
        return (f'<tr class="unreadable"><td>{html_text(folder)}</td><td></td><td data-sort=""></td>'
                f'<td class="verdict">unreadable: {html_text(row.unreadable)}</td><td></td></tr>')
    question = f"<br><small>{html_text(row.question)}</small>" if row.question else ""
    date = row.created_at.replace("T", " ")[:16]
    fraction = f"{row.done / row.planned:.4f}" if row.planned else ""
    step = f"<br>next: <code>{html_text(row.next_step)}</code>" if row.next_step else ""
    state = ' class="unfinished"' if row.done < row.planned else ""
    link = (f'<a href="{html_text(_href(row.report, page))}">{html_text(row.report.name)}</a>' if row.report
            else "<small>none yet</small>")
    strength = f"<br><small>{_flags(html_text(row.strength))}</small>" if row.strength else ""
    return (f"<tr{state}><td><b>{html_text(row.experiment)}</b>{question}<br><small>{html_text(folder)}</small></td>"
            f'<td class="date" data-sort="{html_text(row.created_at)}">{html_text(date)}</td>'
            f'<td class="runs" data-sort="{fraction}">{row.done}/{row.planned}</td>'
            f'<td class="verdict">{_flags(html_text(row.headline))}{strength}{step}</td><td>{link}</td></tr>')


def _flags(escaped: str) -> str:
    """Escaped text with each flag it names kept on one line (escaped text holds no markup: the span is the only
    one)."""
    return FLAG.sub(r'<span class="nw">\1</span>', escaped)


def page(rows: list[Listed], root: Path, path: Path) -> str:
    """The index page of the run directories under root, to be written at path (its links are relative to it)."""
    policy = f"default-src 'none'; style-src 'unsafe-inline'; script-src '{_hash(SCRIPT)}'"
    heads = "".join(f'<th scope="col" tabindex="0">{name}</th>' for name in COLUMNS)
    body = "\n".join(_row(row, path) for row in rows)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{policy}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>launchlab: run directories under {html_text(root)}</title>
<style>{STYLE}</style></head>
<body><h1>Run directories under {html_text(root)}</h1>
<p><small>One row per run directory (<code>launchlab ls --html</code>). Click a column's header to sort by it; type to keep
the rows that hold every word.</small></p>
<input id="filter" type="search" placeholder="filter: experiment, verdict, date …" aria-label="filter the rows">
<span id="shown">{len(rows)} run directories</span>
<div class="rows"><table id="runs"><thead><tr>{heads}</tr></thead>
<tbody>
{body}
</tbody></table></div>
<script>{SCRIPT}</script>
</body></html>
"""


def write(rows: list[Listed], root: Path, path: Path) -> None:
    """The page written whole at path, in a folder of this user's own, replacing (never following) a link there."""
    rundir.write_text(path, page(rows, root, path))
