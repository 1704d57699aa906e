"""`launchlab ls DIR --html`: the index of a folder of run directories, and what `ls` says of an unfinished batch."""

import html
import json
import os
import re
import shlex
import shutil
import subprocess
import urllib.parse
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, ROOT
from launchlab.reporting import indexpage, runindex
from launchlab.runner import batch
from launchlab.runner import plan as plans
from test_browser import FLAGS, chromium  # noqa: F401 (the fixture)

EXAMPLES = sorted(p.parent for p in (ROOT / "examples").glob("*/*/manifest.json"))
EXAMPLE = ROOT / "examples/h200-transformers-kv/20261129-232709"
HOSTILE = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script> & "x"'


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCHLAB, *args], capture_output=True, text=True, timeout=120, env=env)


def rows_of(page: str) -> list[str]:
    return re.findall(r"<tr(?: class=\"[a-z]+\")?><td>.*?</tr>", page, flags=re.S)


def hrefs(page: str) -> list[str]:
    return re.findall(r'<a href="([^"]*)"', page)


def test_the_page_has_one_row_per_run_directory_each_linking_its_report(tmp_path):
    page = tmp_path / "elsewhere" / "index.html"
    page.parent.mkdir()
    res = cli("ls", str(ROOT / "examples"), "--html", str(page))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(page)
    text = page.read_text()
    assert len(EXAMPLES) == 8 and len(rows_of(text)) == len(EXAMPLES)
    linked = {(page.parent / urllib.parse.unquote(h)).resolve() for h in hrefs(text)}
    assert linked == {(e / "summary.html").resolve() for e in EXAMPLES}
    assert not any(h.startswith("/") or "://" in h for h in hrefs(text)), "links are relative"
    for example in EXAMPLES:
        manifest = json.loads((example / "manifest.json").read_text())
        assert f"<b>{manifest['experiment']}</b>" in text
        planned = len(manifest["run_ids"])
        ended = sum((example / "runs" / r / "status.json").exists() for r in manifest["run_ids"])
        assert f"{ended}/{planned}</td>" in text  # the H100 diagnose batch: 15 of 16 (its time ran out)
    assert "<script src" not in text and "http" not in text.replace("http-equiv", ""), "nothing is fetched"
    # transformers-kv's strength, as its report's headline says it
    assert "p = 0.33, Fisher&#x27;s exact test, 2 runs a side; 4 runs a side would settle it" in text


def test_the_default_page_is_index_html_in_the_outputs_root_and_its_links_move_with_it(tmp_path):
    outputs = tmp_path / "outputs"
    for example in EXAMPLES[:2]:
        shutil.copytree(example, outputs / example.parent.name / example.name)
    res = cli("ls", str(outputs), "--html", env={**os.environ, "LAUNCHLAB_OUTPUTS": str(outputs)})
    assert res.returncode == 0, res.stderr
    text = (outputs / "index.html").read_text()
    assert sorted(hrefs(text)) == sorted(f"{e.parent.name}/{e.name}/summary.html" for e in EXAMPLES[:2])


def test_the_default_page_of_another_folder_goes_to_the_outputs_root_never_into_the_folder(tmp_path):
    """Issue 67, 5: `launchlab ls examples --html` (its -h example without FILE) wrote examples/index.html into the
    checkout."""
    listed, outputs = tmp_path / "examples", tmp_path / "outputs"
    shutil.copytree(EXAMPLES[0], listed / EXAMPLES[0].parent.name / EXAMPLES[0].name)
    res = cli("ls", str(listed), "--html", env={**os.environ, "LAUNCHLAB_OUTPUTS": str(outputs)})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(outputs / "index-examples.html") and not (listed / "index.html").exists()
    assert hrefs((outputs / "index-examples.html").read_text()) == [
        f"../examples/{EXAMPLES[0].parent.name}/{EXAMPLES[0].name}/summary.html"]


WIDTHS = """window.addEventListener("load", () => {
  const cells = [...document.querySelectorAll("#runs td.verdict")];
  // a flag split over two lines has two boxes; every flag a verdict names is in a .nw span
  const split = [...document.querySelectorAll("#runs .nw")].filter(s => s.getClientRects().length > 1)
    .map(s => s.textContent);
  document.body.dataset.probe = JSON.stringify({
    narrowest: Math.min(...cells.map(c => c.getBoundingClientRect().width)),
    flags: document.querySelectorAll("#runs td.verdict .nw").length, split,
    table: document.getElementById("runs").getBoundingClientRect().right, page: document.documentElement.clientWidth,
    reports: [...document.querySelectorAll("#runs td:last-child a")].map(a => a.getBoundingClientRect().right)});
});"""


@pytest.mark.parametrize("width", [800, 1280])
def test_chromium_at_800_and_1280_px_gives_the_verdict_room_and_never_splits_a_flag(chromium, tmp_path, width):  # noqa: F811
    """Issue 67, 5: at 800 px the verdict column was ~55 px wide and "--mem-fraction-static" broke mid-word."""
    page = tmp_path / "index.html"
    assert cli("ls", str(ROOT / "examples"), "--html", str(page)).returncode == 0
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("script-src '", f"script-src '{indexpage._hash(WIDTHS)}' '")
                     .replace("</body>", f"<script>{WIDTHS}</script></body>"))
    dom = subprocess.run([chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},900",
                          "--virtual-time-budget=5000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = json.loads(html.unescape(re.search(r'data-probe="([^"]*)"', dom.stdout).group(1)))
    assert found["narrowest"] >= 240, found  # 16em at least
    assert found["flags"] >= 3 and found["split"] == [], found
    # the whole table, its report links included, on the page: nothing to scroll sideways to
    assert found["table"] <= found["page"] and max(found["reports"]) <= found["page"], found


def hostile_run_dir(root: Path) -> Path:
    run_dir = root / "exp" / "20261201-000000"
    shutil.copytree(EXAMPLE, run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest.update(experiment=HOSTILE, question=HOSTILE, created_at="2026-12-09T00:00:00")  # the newest
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    verdict = json.loads((run_dir / "verdict.json").read_text())
    verdict.update(conclusive=False, inconclusive_reasons=[HOSTILE])
    (run_dir / "verdict.json").write_text(json.dumps(verdict))
    return run_dir


def test_a_hostile_experiment_name_question_and_verdict_stay_text(tmp_path):
    hostile_run_dir(tmp_path / "outputs")
    [row] = runindex.index(tmp_path / "outputs")
    assert row.experiment == HOSTILE and HOSTILE in row.headline
    text = indexpage.page([row], tmp_path / "outputs", tmp_path / "outputs" / "index.html")
    assert "<img" not in text and text.count("<script") == 1
    assert "&lt;img src=x onerror=&quot;document.title=&#x27;pwned&#x27;&quot;&gt;" in text
    assert "&lt;script&gt;document.title=&quot;pwned&quot;&lt;/script&gt; &amp; &quot;x&quot;" in text


def test_a_record_that_is_a_link_is_not_followed_and_a_link_at_the_page_is_replaced(tmp_path):
    outputs, outside = tmp_path / "outputs", tmp_path / "outside"
    outside.mkdir()
    run_dir = outputs / "exp" / "20261201-000000"
    shutil.copytree(EXAMPLE, run_dir)
    secret = json.loads((run_dir / "verdict.json").read_text())
    secret.update(conclusive=False, inconclusive_reasons=["read from outside the run directory"])
    (outside / "verdict.json").write_text(json.dumps(secret))
    (outside / "summary.html").write_text("someone else's page")
    for name in ("verdict.json", "summary.html", "report.md"):
        (run_dir / name).unlink()
        (run_dir / name).symlink_to(outside / name)
    (outputs / "index.html").symlink_to(outside / "kept.html")
    (outside / "kept.html").write_text("not to be overwritten")
    [row] = runindex.index(outputs)
    assert "read from outside" not in row.headline and "is a symbolic link" in row.headline, row
    assert row.report is None and row.next_step.startswith("launchlab report ")
    res = cli("ls", str(outputs), "--html", env={**os.environ, "LAUNCHLAB_OUTPUTS": str(outputs)})
    assert res.returncode == 0, res.stderr
    assert (outside / "kept.html").read_text() == "not to be overwritten"
    assert not (outputs / "index.html").is_symlink() and hrefs((outputs / "index.html").read_text()) == []


@pytest.mark.parametrize("only, repetitions", [((), None), (("custom_ar=off",), 1)])
def test_an_unfinished_batch_is_pointed_at_resume_with_a_command_that_resumes_it_uncut(tmp_path, only, repetitions):
    """The papermill pair leaves 1 of 8 runs; an interrupted `--only` batch some of its own: `ls` gives the whole
    command, which --resume accepts (the check it makes before launching anything)."""
    params_file = ROOT / "params/demo.yaml"
    exp, plan = plans.planned(params_file, only, repetitions)
    deep = tmp_path / ("a-long-folder-name-" * 8) / "outputs"
    if only:
        run_dir, _ = batch._open_run_dir(exp, plan, params_file, deep, resume=None)
    else:
        os.environ["LAUNCHLAB_OUTPUTS"] = str(deep)
        try:
            run_dir = batch.new_run_dir(params_file)  # what run_variant.ipynb makes for its one run
        finally:
            del os.environ["LAUNCHLAB_OUTPUTS"]
    res = cli("ls", str(deep))
    assert res.returncode == 0, res.stderr
    [line] = res.stdout.splitlines()
    planned = len([r for r in plan if not r.warmup])
    assert f"unfinished: 0 of {planned} planned runs" in line and "launchlab report" not in line, line
    command = line.split("; next: ", 1)[1]
    assert command.startswith(f"launchlab run {params_file} --resume {run_dir}") and "…" not in command, line
    words = shlex.split(command)
    given_only = words[words.index("--only") + 1:words.index("--repetitions")] if "--only" in words else []
    reps = int(words[words.index("--repetitions") + 1])
    assert tuple(given_only) == only and reps == (repetitions or exp.repetitions)
    exp2, plan2 = plans.planned(words[2], tuple(given_only), reps)
    assert batch._resumed(exp2, plan2, words[2], Path(words[4])) == run_dir  # --resume takes it


PROBE = """window.addEventListener("load", () => {
  const names = () => [...document.querySelectorAll("#runs tbody tr:not([hidden]) b")].map(b => b.textContent);
  const th = [...document.querySelectorAll("#runs th")].find(h => h.textContent === "date");
  th.click(); const up = names(); th.click(); const down = names();
  const box = document.getElementById("filter"); box.value = "vllm threshold";
  box.dispatchEvent(new Event("input"));
  document.body.dataset.probe = JSON.stringify({up, down, filtered: names(),
    shown: document.getElementById("shown").textContent, title: document.title,
    images: document.images.length, scripts: document.scripts.length});
});"""


def test_chromium_sorts_by_a_clicked_header_filters_on_typed_words_and_runs_nothing_hostile(chromium, tmp_path):  # noqa: F811
    outputs = tmp_path / "outputs"
    for example in EXAMPLES:
        shutil.copytree(example, outputs / example.parent.name / example.name)
    hostile_run_dir(outputs)
    assert cli("ls", str(outputs), "--html", env={**os.environ, "LAUNCHLAB_OUTPUTS": str(outputs)}).returncode == 0
    text = (outputs / "index.html").read_text()
    # the probe clicks and types as a user would; the page's policy lets it run by its hash, as the page's own script
    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("script-src '", f"script-src '{indexpage._hash(PROBE)}' '")
                     .replace("</body>", f"<script>{PROBE}</script></body>"))
    base = [chromium, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom"]
    dom = subprocess.run([*base, probe.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = json.loads(html.unescape(re.search(r'data-probe="([^"]*)"', dom.stdout).group(1)))
    by_date = [json.loads((e / "manifest.json").read_text())["experiment"]
               for e in sorted(EXAMPLES, key=lambda e: json.loads((e / "manifest.json").read_text())["created_at"])]
    assert found["up"] == [*by_date, HOSTILE] and found["down"] == found["up"][::-1], found
    assert found["filtered"] == ["h200-vllm-threshold"] and found["shown"] == f"1 of {len(EXAMPLES) + 1} run directories", found
    assert found["title"].startswith("launchlab") and found["images"] == 0 and found["scripts"] == 2, found
    # ?q= in the address fills the filter box: the page's own script, without the probe
    dom = subprocess.run([*base, (outputs / "index.html").as_uri() + "?q=sglang"], capture_output=True, text=True,
                         timeout=120)
    sglang = sum("sglang" in e.parent.name for e in EXAMPLES)  # the experiments' names and folders say sglang
    assert f'<span id="shown">{sglang} of {len(EXAMPLES) + 1} run directories</span>' in dom.stdout, dom.stdout[-3000:]
