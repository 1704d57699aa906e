"""The README fits on a page and points into docs/, the documentation site builds strictly and offline, and neither
speaks of the tooling the repository is developed with (issue 41, point 1)."""

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from markdown.extensions.toc import slugify

from conftest import ROOT
from launchlab import cli as launchlab_cli
from launchlab import params
from launchlab.logparse.kinds import KINDS
from test_browser import FLAGS, chromium  # noqa: F401 (the fixture)

DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()
# words of the set-up this repository is developed with (a GPU lent through a tool, with leases and budgets), which
# mean nothing to a user on their own GPU machine
TOOLING = [r"device time", r"\bleases?\b", r"\$OUT\b", r"budget_left", r"\blent\b", r"ten minutes at most",
           r"part calls", r"device calls?", r"nvidia-h200", r"warm: false", r"shared/gpu", r"KINDS\.md",
           r"\bthe lent machine", r"a session's (?:30 minutes|time)", r"\$OUT/"]


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 4)
    return text[start:] if end < 0 else text[start:end]


def anchors(path: Path) -> set[str]:
    """The ids MkDocs gives a page's headings (Python-Markdown's toc slugify, the default)."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {slugify(re.sub(r"[`*]", "", m), "-") for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def nav_pages(nav) -> list[str]:
    found = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        found += nav_pages(value) if isinstance(value, list) else [value]
    return found


def test_the_readme_fits_on_a_page_and_has_the_sections_a_newcomer_reads():
    assert len(README.splitlines()) <= 150
    headings = re.findall(r"^## (.+)$", README, re.M)
    assert headings == ["Quickstart", "Install", "Your own server in ten lines", "Commands",
                        "Start from a failing launch", "Layout", "Read on"]
    quick = section(README, "Quickstart")
    assert "make demo" in quick and "make test" in quick
    install = section(README, "Install")
    assert "pip install" in install and "launchlab init" in install and "make setup" in install


def test_the_readmes_own_server_is_ten_lines_that_validate(tmp_path):
    block = re.search(r"```yaml\n(.*?)```", section(README, "Your own server in ten lines"), re.S).group(1)
    assert len(block.splitlines()) <= 10
    (tmp_path / "mine.yaml").write_text(block)
    experiment = params.load(tmp_path / "mine.yaml")
    assert experiment.server.kind in KINDS
    kinds_named = re.search(r"kind: \w+ +# (.+)", block).group(1)
    assert [k.strip() for k in kinds_named.split(",")] == list(KINDS)  # every kind, in the registry's order


def test_the_readmes_command_table_lists_exactly_the_clis_subcommands():
    rows = re.findall(r"^\| `launchlab (\w+)", section(README, "Commands"), re.M)
    [sub] = [a for a in launchlab_cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert sorted(rows) == sorted(sub.choices) and len(rows) == len(set(rows))


def test_every_link_of_the_readme_into_docs_reaches_a_page_and_its_heading():
    links = re.findall(r"\]\((docs/[^)\s]+)\)", README)
    assert len(links) >= 10
    for link in links:
        path, _, anchor = link.partition("#")
        assert (ROOT / path).is_file(), link
        assert not anchor or anchor in anchors(ROOT / path), f"{link}: no such heading in {path}"


def test_every_page_of_the_docs_is_in_the_nav_and_every_nav_entry_is_a_page():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = nav_pages(config["nav"])
    assert sorted(nav) == sorted(str(p.relative_to(DOCS)) for p in pages())


@pytest.mark.parametrize("pattern", TOOLING)
def test_no_page_of_the_docs_nor_the_readme_speaks_of_the_development_tooling(pattern):
    texts = {"README.md": README, **{str(p.relative_to(ROOT)): p.read_text() for p in pages()}}
    found = [name for name, text in texts.items() if re.search(pattern, text, re.I)]
    assert found == [], f"{pattern!r} in {found}"


def test_the_docs_name_every_params_file_every_kind_and_every_module():
    written = (DOCS / "writing-an-experiment.md").read_text()
    shipped = sorted(p.name for p in (ROOT / "params").glob("*.yaml"))
    assert [name for name in shipped if f"params/{name}" not in written] == []
    module_map = section((DOCS / "architecture.md").read_text(), "Module map")
    modules = sorted((ROOT / "lib" / "launchlab").rglob("*.py"))
    missing = [str(m.relative_to(ROOT)) for m in modules if m.name != "__init__.py" and m.name not in module_map]
    assert missing == []
    assert all(f"{kind}.py" in module_map for kind in KINDS)
    assert "init" in next(line for line in module_map.splitlines() if "cli.py" in line)


def test_the_docs_run_page_names_every_command_and_every_option_of_run():
    block = re.search(r"```sh\n(.*?)```", (DOCS / "running.md").read_text(), re.S).group(1)
    [sub] = [a for a in launchlab_cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for name, command in sub.choices.items():
        assert f"launchlab {name}" in block, name
        if name == "run":
            for action in command._actions:
                for flag in action.option_strings:
                    assert flag in ("-h", "--help") or flag in block, flag


def test_the_clis_help_points_to_the_pages_that_now_hold_what_it_cites():
    parser = launchlab_cli.build_parser()
    assert "docs/architecture.md" in " ".join(parser.format_help().split())
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert "docs/reference/params.md" in " ".join(sub.choices["schema"].format_help().split())


def mkdocs_build(root: Path, site: Path) -> subprocess.CompletedProcess:
    # not --quiet: MkDocs 1.6 then no longer counts warnings, and --strict lets a broken link pass
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(site)], cwd=root, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


@pytest.mark.slow  # MkDocs in a process of its own: about 2 s
def test_the_docs_build_strictly_into_a_site_that_loads_nothing_remote(tmp_path):
    built = mkdocs_build(ROOT, tmp_path / "site")
    assert built.returncode == 0, built.stderr[-3000:]
    html = sorted((tmp_path / "site").rglob("*.html"))
    assert {p.name for p in html} >= {p.with_suffix(".html").name for p in pages()}
    remote = [(p.name, m) for p in html for m in re.findall(r'(?:src|href)="((?:https?:)?//[^"]*)"', p.read_text())]
    assert remote == []  # no web fonts, no CDN script, no link out of the offline site
    styles = [p.name for p in (tmp_path / "site").rglob("*.css") if re.search(r"url\(['\"]?(?:https?:)?//", p.read_text())]
    assert styles == []
    assert (tmp_path / "site" / "search" / "search_index.js").is_file()  # search without a server (offline plugin)


@pytest.mark.slow  # two MkDocs builds of a copy of the docs: about 4 s
def test_a_broken_anchor_or_a_page_left_out_of_the_nav_fails_the_docs_build(tmp_path):
    for case in ("anchor", "page"):
        copy = tmp_path / case
        shutil.copytree(DOCS, copy / "docs")
        shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
        if case == "anchor":
            page = copy / "docs" / "index.md"
            page.write_text(page.read_text().replace("(compare.md)", "(compare.md#no-such-heading)", 1))
        else:
            (copy / "docs" / "orphan.md").write_text("# Not in the nav\n")
        built = mkdocs_build(copy, copy / "site")
        assert built.returncode != 0, case
        assert ("no-such-heading" if case == "anchor" else "orphan.md") in built.stderr


def test_every_list_of_server_kinds_beside_a_kind_key_is_the_registrys():
    """Issue 49: params/my-server.yaml named 4 kinds where the README named 7 (and KINDS holds 7)."""
    lists = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "params").glob("*.yaml"))]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if (said := re.search(r"^\s*kind: \w+\s+#\s*((?:\w+\s*[|,]\s*)+\w+)", line)):
                lists[f"{path.name}:{number}"] = re.split(r"\s*[|,]\s*", said.group(1).strip())
    assert {where.split(":")[0] for where in lists} >= {"my-server.yaml", "README.md"}, lists
    assert {where: kinds for where, kinds in lists.items() if kinds != list(KINDS)} == {}


DOCS_PROBE = """window.addEventListener("load", () => {
  // a key of the params reference broken over two lines has two boxes
  const keys = [...document.querySelectorAll(".md-typeset table td:first-child code")];
  const broken = keys.filter(k => k.getClientRects().length > 1).map(k => k.textContent);
  // a code block's text: inside its block (nothing scrolled away), clear of the copy button
  const blocks = [...document.querySelectorAll(".md-typeset pre > code")].map(code => {
    const pre = code.parentElement, button = pre.querySelector("button.md-clipboard, .md-clipboard");
    const text = document.createRange(); text.selectNodeContents(code);
    const lines = [...text.getClientRects()];
    const under = button ? lines.filter(r => {
      const b = button.getBoundingClientRect();
      return r.right > b.left + 1 && r.left < b.right && r.bottom > b.top && r.top < b.bottom && r.width > 0;
    }).length : 0;
    return {scrolls: code.scrollWidth > code.clientWidth + 1, under};
  });
  document.body.dataset.probe = JSON.stringify({keys: keys.length, broken, blocks});
});"""


@pytest.mark.slow  # MkDocs, then Chromium on two pages at two widths
@pytest.mark.parametrize("width", [800, 1280])
def test_chromium_reads_the_params_reference_and_the_diagnose_page_whole_at_800_and_1280_px(chromium, tmp_path, width):  # noqa: F811
    """Issue 67, 8: the params reference broke key names mid-word ("experimen t"); the diagnose page's first code
    block was clipped, the copy button over its text."""
    import html as htmllib
    import json

    site = tmp_path / "site"
    built = mkdocs_build(ROOT, site)
    assert built.returncode == 0, built.stderr[-3000:]
    found = {}
    for page in ("reference/params.html", "diagnose.html"):
        probe = site / page
        text = probe.read_text()
        probe.write_text(text.replace("</body>", f"<script>{DOCS_PROBE}</script></body>"))
        dom = subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},900",
                              "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
                             capture_output=True, text=True, timeout=120)
        assert dom.returncode == 0, dom.stderr[-2000:]
        found[page] = json.loads(htmllib.unescape(re.search(r'data-probe="([^"]*)"', dom.stdout).group(1)))
    reference, diagnose = found["reference/params.html"], found["diagnose.html"]
    assert reference["keys"] > 50 and reference["broken"] == [], reference["broken"]
    assert diagnose["blocks"] and not [b for b in diagnose["blocks"] if b["scrolls"] or b["under"]], diagnose
