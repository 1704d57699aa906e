"""`launchlab run` of a params file with `search:`, end to end: real papermill kernels, the simulated SGLang server
(or a tiny script server), real parquet and the real HTML export. The searches are kept short (a range a few
resolutions wide, or guided by the server's own numbers); the bisection itself is tested in test_search.py."""

import json
import math
import os
import random
import signal
import subprocess
import time
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest

from conftest import LAUNCHLAB, ROOT, processes_using, write_params
from test_search import sim_break_even

pytestmark = pytest.mark.slow


def demo_search(folder: Path, low: str, high: str, resolution: str, more: tuple[tuple[str, str], ...] = ()) -> Path:
    """params/demo-threshold.yaml on a 2-GPU simulated box at its fastest pace, over a narrower range; more: other
    (old, new) replacements in its text."""
    text = (ROOT / "params" / "demo-threshold.yaml").read_text()
    for old, new in (("gpus: 8", "gpus: 2"), ('--tp, "8"', '--tp, "2"'),
                     ("weights_gib_per_rank: 70.0", f"weights_gib_per_rank: 70.0\n    pace: 0.05\n    workdir: {folder / 'w'}"),
                     ('low: "0.50"', f'low: "{low}"'), ('high: "0.95"', f'high: "{high}"'),
                     ('resolution: "0.005"', f'resolution: "{resolution}"'), *more):
        assert old in text, old
        text = text.replace(old, new)
    path = folder / "demo-threshold.yaml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def demo_search_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("threshold")
    env = {**os.environ, "LAUNCHLAB_SIM_ROOT": str(base / "sim"), "LAUNCHLAB_OUTPUTS": str(base / "outputs")}
    path = demo_search(base, "0.72", "0.78", "0.01")
    proc = subprocess.run([*LAUNCHLAB, "run", str(path)], capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert processes_using(str(base / "sim")) == []
    return Path(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_the_demo_search_brackets_the_break_even_of_each_stratum_within_the_resolution(demo_search_run):
    run_dir, _ = demo_search_run
    found = pd.read_parquet(run_dir / "thresholds.parquet").set_index("stratum")
    assert list(found.index) == ["custom_ar=off", "custom_ar=on"]
    bound = 2 + math.ceil(math.log2((0.78 - 0.72) / 0.01))
    for stratum, custom_ar in (("custom_ar=off", False), ("custom_ar=on", True)):
        row = found.loc[stratum]
        assert row["state"] == "converged", row["note"]
        assert row["interval_high"] - row["interval_low"] <= 0.01 + 1e-9
        # the simulated server's own break-even (its constants) and the budget's prediction from its log lines
        assert row["interval_low"] < sim_break_even(custom_ar) <= row["interval_high"]
        assert row["interval_low"] < row["predicted_break_even"] <= row["interval_high"]
        assert row["predicted_in_interval"]
        assert abs(row["predicted_break_even"] - sim_break_even(custom_ar)) < 0.0005
        assert row["probes"] <= bound
    runs = pd.read_parquet(run_dir / "runs.parquet")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    values = {(e["stratum"], e["levels"]["mem_fraction_static"]) for e in manifest["runs"]}
    assert len(values) == found["probes"].sum()  # every probed value counted (a run lost to a kit error is repeated)
    assert len(runs) >= len(values)
    assert found.loc["custom_ar=off", "interval_high"] <= found.loc["custom_ar=on", "interval_low"]


def test_every_probe_is_an_ordinary_run_listed_in_the_manifest_with_why_it_was_chosen(demo_search_run):
    run_dir, _ = demo_search_run
    manifest = json.loads((run_dir / "manifest.json").read_text())
    runs = pd.read_parquet(run_dir / "runs.parquet")
    assert manifest["run_ids"] == list(runs["run_id"]) == sorted(p.name for p in (run_dir / "runs").iterdir())
    for entry in manifest["runs"]:
        folder = run_dir / "runs" / entry["run_id"]
        for name in ("run_variant.ipynb", "status.json", "server.log", "nvidia-smi.csv.gz"):
            assert (folder / name).is_file(), f"{entry['run_id']}/{name}"
        assert entry["why"] and entry["stratum"] in ("custom_ar=off", "custom_ar=on")
        assert f"--mem-fraction-static {entry['levels']['mem_fraction_static']}" in (folder / "server.log").read_text(
            ).replace("mem_fraction_static=", "--mem-fraction-static ")
    whys = [e["why"] for e in manifest["runs"]]
    assert whys[0].startswith("the low end") and whys[1].startswith("the high end")
    # after the ends, the values next to the break-even the server's numbers predict (issue 30), each stratum's pair
    assert [w.split(" the break-even")[0] for w in whys[4:]] == ["just below", "just above"] * 2, whys
    # interleaved: within every round the strata take turns
    strata = [e["stratum"] for e in manifest["runs"]]
    assert strata[:4] == ["custom_ar=off", "custom_ar=off", "custom_ar=on", "custom_ar=on"]
    assert strata[4:] == ["custom_ar=off", "custom_ar=off", "custom_ar=on", "custom_ar=on"]
    assert set(runs["mem_fraction_static"]) >= {"0.72", "0.78"}


def test_the_verdict_and_report_show_each_interval_next_to_the_prediction_and_the_cost_in_gib(demo_search_run):
    run_dir, _ = demo_search_run
    verdict = json.loads((run_dir / "verdict.json").read_text())
    found = verdict["thresholds"]
    assert found["flag"] == "--mem-fraction-static" and found["resolution"] == "0.01"
    assert [s["state"] for s in found["strata"]] == ["converged", "converged"]
    [diff] = found["differences"]
    assert diff["stratum"] == "custom_ar=on" and diff["baseline"] == "custom_ar=off"
    assert diff["difference_low"] <= diff["predicted_difference"] <= diff["difference_high"]
    assert 0.4 < diff["predicted_difference_gib"] < 0.55  # 640 MiB of custom all-reduce buffers, as a fraction
    report = (run_dir / "report.md").read_text()
    assert "## Threshold of `--mem-fraction-static`" in report
    assert "the server's own numbers predict the break-even at 0.748" in report
    assert "the server's own numbers predict the break-even at 0.753" in report
    assert "GiB per GPU" in report and "custom\\_ar=on" in report
    # the search is controlled (its own flag is declared), and the thresholds lead the report, before the verdict's
    # prose, in report.md and on the summary's first screen
    assert verdict["controlled"] is True and verdict["confounds"] == []
    # the searched flag is declared, not merely derived from the probed values
    assert "mem_fraction_static" not in [d["arg"] for d in verdict["derived_args"]]
    assert "**Controlled comparison.**" in report and "Not a controlled comparison" not in report
    assert report.index("## Threshold of `--mem-fraction-static`") < report.index("**Controlled comparison.**")
    # the probed values are not compared one by one with the high end: the thresholds answer that (issue 28)
    assert not [line for line in report.splitlines() if line.startswith("- ") and "`mem_fraction_static=" in line]
    html = (run_dir / "summary.html").read_text()
    assert "Threshold search" in html
    assert "Not a controlled comparison" not in html
    assert html.index("Threshold search") < html.index("Controlled comparison")
    # the probes' chart is inline SVG whose text stays text: its title, and its alternative text
    assert "Outcome of every probe" in html and 'aria-label="Dots: the outcome of every probe run' in html


def test_the_shipped_demo_search_takes_four_launches_per_stratum_for_the_intervals_bisection_finds(tmp_path, sim_root):
    """Issue 30's acceptance: params/demo-threshold.yaml's own range (0.50–0.95 by 0.005), guided by the simulated
    server's numbers: 4 launches per stratum (both ends, then just below and just above the prediction), and the
    intervals today's bisection finds (search.step without a guide, on the simulated server's break-even)."""
    from launchlab import search
    from test_search import run_search

    path = demo_search(tmp_path, "0.50", "0.95", "0.005")
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    bounds = search.Bounds.parse("0.50", "0.95", "0.005")
    truth = {"custom_ar=off": Decimal(str(sim_break_even(False))), "custom_ar=on": Decimal(str(sim_break_even(True)))}
    blind, _ = run_search(bounds, truth, outcome=lambda s, v, rep: v > truth[s])
    strata = json.loads((run_dir / "verdict.json").read_text())["thresholds"]["strata"]
    for row, bisected in zip(strata, blind, strict=True):
        assert row["stratum"] == bisected.stratum and row["state"] == "converged"
        assert (row["interval_low"], row["interval_high"]) == (float(bisected.low), float(bisected.high))
        assert row["launches"] == 4 and row["blind_launches"] == bisected.probes == 9
        assert row["prediction_held"] is True and row["prediction_note"] == ""
    assert "4 launches, bisection alone 9; the prediction held" in (run_dir / "report.md").read_text()
    assert ("custom_ar=off: converged in (0.747, 0.750] — 4 launches, bisection alone 9; the prediction it followed "
            "(0.748, from its runs' own numbers) held") in proc.stderr


def test_a_server_whose_log_lies_about_its_memory_is_searched_by_bisection_and_its_figures_said_to_disagree(
        tmp_path, sim_root):
    """The simulated server's fault injection (SIM_FAULT_AVAIL_OFFSET_GIB): its log prints 2 GiB more free memory
    after the weights than it has, while it sizes its KV pool from the truth. Its probes' figures then disagree —
    a failed one's break-even from the "Load weight" lines is ≈ 0.021 too low, a ready one's total from its pool is
    off by 2 GiB / (1 − fraction) — so the prediction is not followed (issue 38: before, a ready probe trusted the
    lie too, the guided probes failed and the search fell back to bisection); the search bisects to the true
    threshold and says why."""
    path = demo_search(tmp_path, "0.50", "0.95", "0.005", more=(('    "on": {}\n', ""),
                                                                 ("env: {}", 'env: {SIM_FAULT_AVAIL_OFFSET_GIB: "2"}')))
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    [row] = json.loads((run_dir / "verdict.json").read_text())["thresholds"]["strata"]
    assert row["state"] == "converged" and row["interval_low"] < sim_break_even(False) <= row["interval_high"]
    assert row["interval_high"] - row["interval_low"] <= 0.005 + 1e-9
    assert row["prediction_held"] is None and "disagrees with the stratum's other probes" in row["prediction_note"]
    assert "probe 0.50" in row["flagged_probes"] and "probe 0.95" in row["flagged_probes"]
    assert row["launches"] == row["blind_launches"]  # bisection alone, from the ends on
    manifest = json.loads((run_dir / "manifest.json").read_text())
    whys = [e["why"] for e in manifest["runs"]]
    assert whys[2:] and all(w.startswith("bisects (") and "the prediction is not followed: probe " in w
                            for w in whys[2:]), whys
    # the interval is one that probes on both sides established, never the prediction
    probed = {float(e["levels"]["mem_fraction_static"]) for e in manifest["runs"]}
    assert {row["interval_low"], row["interval_high"]} <= probed
    report = (run_dir / "report.md").read_text()
    assert "The prediction was not followed (the search bisected): probe " in report
    assert "SIMULATED FAULT" in (run_dir / "runs" / manifest["run_ids"][0] / "server.log").read_text()


# a server whose outcome depends on --mem-fraction-static: ready at or above READY, failed below FAIL, and in
# between a seeded coin per launch (its launches counted in a file) — or, without a coin, ready from READY on
SCRIPT_SERVER = """\
import random, sys, time
from pathlib import Path
value = float(sys.argv[sys.argv.index("--mem-fraction-static") + 1])
counter = Path(sys.argv[1])
launch = len(counter.read_text()) if counter.exists() else 0
counter.write_text("x" * (launch + 1))
time.sleep(1.5)
ready = value >= {ready} or (value >= {fail} and random.Random("{seed}:%d" % launch).random() < 0.5)
if not ready:
    print("Not enough memory at %s" % value, flush=True)
    sys.exit(1)
print("serving", flush=True)
time.sleep(600)
"""


def script_search(tmp_path: Path, ready: float, fail: float, seed: str, low: str, high: str, resolution: str,
                  repetitions: int) -> Path:
    script = tmp_path / "server.py"
    script.write_text(SCRIPT_SERVER.format(ready=ready, fail=fail, seed=seed))
    return write_params(tmp_path, f"""\
        experiment: script-threshold
        hosts:
          box: {{transport: sim, gpus: 1, workdir: {tmp_path / "w"}}}
        server:
          kind: generic
          command: [python3, {script}, {tmp_path / "launches"}]
          ready: {{timeout_s: 30, log_pattern: "serving"}}
          stop_grace_s: 2
        search: {{flag: --mem-fraction-static, low: "{low}", high: "{high}", resolution: "{resolution}",
                  repetitions: {repetitions}}}
        drain: {{timeout_s: 5, tolerance_mib: 64}}
        sampler: {{kind: none}}
        """)


def test_a_stratum_whose_outcome_near_the_threshold_is_random_is_reported_noisy_with_its_runs(tmp_path, sim_root):
    # every launch in the coin zone [0.70, 0.80) draws a seeded coin: with this seed the two repetitions at the
    # first midpoint (0.75, launches 5 and 6: the ends take 1-4) disagree
    seed = "noisy-3"
    coins = [random.Random(f"{seed}:{n}").random() < 0.5 for n in (4, 5)]
    assert coins[0] != coins[1], "the seed must make the two repetitions disagree"
    path = script_search(tmp_path, ready=0.80, fail=0.70, seed=seed, low="0.60", high="0.90", resolution="0.1",
                         repetitions=2)
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    [row] = json.loads((run_dir / "verdict.json").read_text())["thresholds"]["strata"]
    assert row["state"] == "noisy"
    assert row["interval_low"] is None and row["interval_high"] is None  # no threshold is claimed
    mixed = [e["run_id"] for e in json.loads((run_dir / "manifest.json").read_text())["runs"]
             if e["levels"]["mem_fraction_static"] == "0.75"]
    assert len(mixed) == 2 and all(r in row["note"] for r in mixed)
    assert "noisy" in (run_dir / "report.md").read_text()
    assert "baseline: noisy" in proc.stderr


def test_an_interrupted_search_resumes_without_repeating_a_decided_probe(tmp_path, sim_root):
    path = script_search(tmp_path, ready=0.63, fail=0.63, seed="-", low="0.00", high="1.00", resolution="0.1",
                         repetitions=1)
    proc = subprocess.Popen([*LAUNCHLAB, "run", "--no-html", str(path), "--out", str(tmp_path / "out")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    in_flight = None
    while time.monotonic() < deadline and in_flight is None:
        for manifest in (tmp_path / "out").glob("*/*/manifest.json"):
            ids = json.loads(manifest.read_text()).get("run_ids") or []
            if len(ids) >= 4:  # the ends and the first bisection are decided, the second bisection is launched
                folder = manifest.parent / "runs" / ids[3]
                if (folder / "processes.json").exists() and "server" in (folder / "processes.json").read_text():
                    in_flight = folder
        time.sleep(0.2)
    assert in_flight is not None, "the search never reached its second bisection"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    run_dir = in_flight.parent.parent
    assert "--resume" in err
    decided = {p.name: (p / "status.json").read_text() for p in sorted((run_dir / "runs").iterdir())[:3]}
    assert json.loads((in_flight / "status.json").read_text())["status"] == "error"
    # judged before the resume (4 probed values: the interrupted one among them), the record says what the
    # report's first line says: no threshold yet is not a conclusive verdict
    subprocess.run([*LAUNCHLAB, "report", "--no-html", str(run_dir)], capture_output=True, check=True, timeout=300)
    stopped = json.loads((run_dir / "verdict.json").read_text())
    assert not stopped["conclusive"] and [r for r in stopped["inconclusive_reasons"] if r.startswith(
        "the threshold search of --mem-fraction-static has no interval at baseline: not converged after 4 probed")]

    again = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), "--resume", str(run_dir)], capture_output=True, text=True,
                           timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    for run_id, status in decided.items():
        assert f"{run_id}  already done, skipped" in again.stderr
        assert (run_dir / "runs" / run_id / "status.json").read_text() == status, f"{run_id} was run again"
    assert json.loads((in_flight / "status.json").read_text())["status"] in ("ready", "failed")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    values = [e["levels"]["mem_fraction_static"] for e in manifest["runs"]]
    assert len(values) == len(set(values)), f"a probed value was launched twice: {values}"
    assert len(values) <= 2 + math.ceil(math.log2(1.0 / 0.1))
    [row] = json.loads((run_dir / "verdict.json").read_text())["thresholds"]["strata"]
    assert row["state"] == "converged" and row["interval_low"] < 0.63 <= row["interval_high"]
    assert row["interval_high"] - row["interval_low"] <= 0.1 + 1e-9
