"""Issue 40: verdict truth, round 3 — real batches on the simulated host, where the truth is known by construction.

Point 1: failure reasons are part of the outcome. On 96 GB cards with 70 GiB of weights per rank, SGLang fails at
--mem-fraction-static 0.55 in KV sizing (no room for a pool) and at 0.99 in CUDA-graph capture (the pool left the
graphs no room): both levels fail, differently. The kit before said "mem_fraction does not change the launch
outcome", the difference only in the Outcomes table."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import LAUNCHLAB, write_params

FAILS_DIFFERENTLY = """\
experiment: fails-differently
hosts:
  box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: 0.05, workdir: {work}}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}"]
  ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 5
factors:
  mem_fraction:
    "0.55": {{flags: {{--mem-fraction-static: "0.55"}}}}
    "0.99": {{flags: {{--mem-fraction-static: "0.99"}}}}
baseline: {{mem_fraction: "0.55"}}
repetitions: 2
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


def run_batch(params: Path) -> Path:
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(params)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_two_levels_that_both_fail_but_differently_are_a_change_said_in_the_verdicts_sentence(tmp_path, sim_root):
    run_dir = run_batch(write_params(tmp_path, FAILS_DIFFERENTLY.format(work=tmp_path / "work")))
    verdict = json.loads((run_dir / "verdict.json").read_text())
    decision = verdict["factors"]["mem_fraction"]
    # it changes how the launch fails, not whether it starts (issue 47): a status of its own — and a field of its own
    # (issue 63), never among the outcome factors `ls`, `compare` and scripts read as "decides the launch"
    assert decision["status"] == "changes_how_it_fails" and verdict["outcome_factors"] == []
    assert verdict["failure_mode_factors"] == ["mem_fraction"]
    assert verdict["neutral_factors"] == []
    summary = decision["summary"]
    assert summary.startswith("mem_fraction changes how the launch fails — both fail, differently")
    assert "mem_fraction=0.55: fails: kv_cache_no_memory in kv_cache" in summary
    assert "mem_fraction=0.99: fails: cuda_oom in cuda_graph" in summary
    [stratum] = decision["strata"]
    [comparison] = stratum["comparisons"]
    assert stratum["fails_differently"] is True and comparison["tested"] == "fails: kv_cache_no_memory in kv_cache"
    assert comparison["p_value"] == pytest.approx(1 / 3) and comparison["repetitions_to_settle"] == 4
    report = (run_dir / "report.md").read_text()
    assert "does not change the launch outcome" not in report and "both fail, differently" in report


@pytest.mark.slow
def test_a_signal_after_a_runs_final_status_leaves_it_finished(tmp_path, small_params):
    """Point 6: SIGTERM after a run's final status is written, before its notebook returns: the batch's interrupt
    leaves that run as it ended (it re-recorded it as interrupted, and --resume ran it again)."""
    from launchlab import hosts, params
    from launchlab.runner import batch
    from launchlab.runner.plan import make_plan
    from launchlab.store import records, rundir

    path = small_params(pace=0.05)
    run_dir = run_batch(path)
    exp = params.load(path)
    [run] = [r for r in make_plan(exp) if r.run_id.startswith("02_")]
    folder = rundir.RunDir(run_dir).run(run.run_id)
    before = folder.status.read_text()
    said = []
    workers = batch._Workers(exp, [run], run_dir, {"box": hosts.connect("box", exp.hosts["box"])}, total=2,
                             say=said.append, params_file=path, server=None)
    workers.in_flight[("box", 0)] = run  # its notebook is still returning when the signal comes
    for done in workers.finished.values():
        done.set()
    workers.interrupt("interrupted by SIGTERM")
    assert folder.status.read_text() == before and records.finished(folder)
    [line] = said
    assert line.startswith(f"{run.run_id}  ready at ")
    assert line.endswith("(it had ended before the batch was interrupted by SIGTERM)")


STARTS_THEN_BREAKS = """\
experiment: starts-then-breaks
hosts:
  box: {{transport: sim, gpus: 2, mem_total_mib: 97887, weights_gib_per_rank: 70.0, pace: 0.05, workdir: {work}}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}",
            --mem-fraction-static, "0.85"]
  ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{{port}}/health"}}
  smoke: {{url: "http://127.0.0.1:{{port}}/generate", body: {{text: hi}}, timeout_s: 10}}
  stop_grace_s: 5
factors:
  kernel:
    "ok": {{}}
    "request-oom": {{env: {{SIM_FAULT_REQUEST_OOM: "1"}}}}
    "crashes": {{env: {{SIM_FAULT_CRASH_AFTER_READY: "1"}}}}
baseline: {{kernel: "ok"}}
repetitions: 2
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


@pytest.mark.slow
def test_a_server_that_starts_and_then_breaks_is_said_so_never_ready_nor_not_started(tmp_path, sim_root):
    """Point 3: one level's servers answer health and die on the first request (smoke on), another's become ready
    and then exit by themselves before the kit stops them (an illegal memory access after the first health
    answer). Before, the second counted as ready, and the sentence said only "0/2 vs 2/2 ready"."""
    run_dir = run_batch(write_params(tmp_path, STARTS_THEN_BREAKS.format(work=tmp_path / "work")))
    status = {p.parent.name: json.loads(p.read_text()) for p in run_dir.glob("runs/*/status.json")}
    crashed = [s for name, s in status.items() if "crashes" in name]
    assert [s["status"] for s in crashed] == ["degraded", "degraded"]
    assert all(s["failure_reason"] == "exited_after_ready" and s["stopped_with"] == "gone" for s in crashed)
    assert all("then exited by itself before the kit stopped it: RuntimeError: CUDA error: an illegal memory access"
               in s["failure_message"] for s in crashed)
    summary = json.loads((run_dir / "verdict.json").read_text())["factors"]["kernel"]["summary"]
    assert summary.startswith("kernel decides the launch — ")
    assert "kernel=ok: starts;" in summary and "kernel=crashes: starts, then exits by itself" in summary
    assert "kernel=request-oom: starts but its first request fails" in summary


@pytest.mark.slow
def test_what_the_params_changed_before_a_resume_is_named_as_changed_at_the_resume(tmp_path, small_params):
    """Point 4: half a batch runs; its params file gains a server environment variable (one that disables custom
    all-reduce); --resume runs the other half. Before: "Controlled comparison". Now each run records the batch
    that ran it, the variable the params set is compared within each variant, and the difference is said to have
    changed at the resume, naming the resumed runs."""
    path = small_params(pace=0.05)
    path.write_text(path.read_text().replace("repetitions: 1", "repetitions: 2"))
    run_dir = run_batch(path)
    later = sorted(p for p in (run_dir / "runs").iterdir() if p.name.endswith("_rep2"))
    for folder in later:  # as if the batch had been stopped before them
        shutil.rmtree(folder)
    path.write_text(path.read_text().replace("server:\n", "server:\n  env: {SGLANG_DISABLE_CUSTOM_AR: \"1\"}\n", 1))
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), "--resume", str(run_dir)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["controlled"] is False
    [changed] = [c for c in verdict["confounds"] if "SGLANG_DISABLE_CUSTOM_AR" in c["detail"]]
    assert changed["runs"] == [f.name for f in later]
    assert changed["detail"].startswith(f"changed at the resume (runs resumed: {', '.join(f.name for f in later)}): "
                                        "environment variable SGLANG_DISABLE_CUSTOM_AR, which the params set, differs")
    batches = {json.loads((p / "provenance.json").read_text())["batch"] for p in (run_dir / "runs").iterdir()}
    assert len(batches) == 2


@pytest.mark.slow
def test_other_weights_at_the_same_model_path_are_a_confound(tmp_path, small_params):
    """Point 5: the weights at the model path were replaced between repetitions (another build). The kit recorded
    the model's path only: "Controlled comparison". Now the provenance records what the path holds (config.json's
    digest, each weight file's name, size and time; nothing read) and a difference is a confound."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"num_hidden_layers": 61}')
    (model / "model-00001.safetensors").write_bytes(b"\0" * 70_000)
    path = small_params(pace=0.05)
    text = path.read_text().replace("repetitions: 1", "repetitions: 2")
    assert '--tp, "2",' in text
    path.write_text(text.replace('--tp, "2",', f'--tp, "2", --model-path, "{model}",'))
    run_dir = run_batch(path)
    later = sorted(p for p in (run_dir / "runs").iterdir() if p.name.endswith("_rep2"))
    for folder in later:
        shutil.rmtree(folder)
    (model / "config.json").write_text('{"num_hidden_layers": 62}')  # a rebuilt checkpoint, one layer more
    (model / "model-00001.safetensors").write_bytes(b"\0" * 72_000)
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), "--resume", str(run_dir)], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = json.loads(next((run_dir / "runs").glob("01_*/provenance.json")).read_text())["model"]
    assert first["path"] == str(model) and first["kind"] == "dir" and len(first["config_sha256"]) == 64
    assert [f[:2] for f in first["files"]] == [["model-00001.safetensors", 70_000]]
    verdict = json.loads((run_dir / "verdict.json").read_text())
    [changed] = [c for c in verdict["confounds"] if c["kind"] == "model"]
    assert changed["runs"] == [f.name for f in later] and verdict["controlled"] is False
    assert f"what the model path {model} holds differs between runs" in changed["detail"]
    assert changed["detail"].startswith("changed at the resume")
    # the budget never averages over the two builds: a row per variant and weights
    rows = [(r["variant"], r["weights"], r["n"]) for r in verdict["budget"]]
    assert len(rows) == 4 and {n for *_, n in rows} == {1}
    assert len({w for _, w, _ in rows}) == 2 and all(w.startswith("as in 0") for _, w, _ in rows)


CARD = """\
experiment: card-{name}
hosts:
  box: {{transport: sim, gpus: 2, mem_total_mib: {mib}, weights_gib_per_rank: 70.0, pace: 0.05, workdir: {work}}}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "2", --host, 127.0.0.1, --port, "{{port}}",
            --mem-fraction-static, "0.85"]
  ready: {{timeout_s: 60, health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 5
factors:
  custom_ar:
    "on": {{}}
    "off": {{flags: {{--disable-custom-all-reduce: true}}}}
baseline: {{custom_ar: "off"}}
repetitions: 2
drain: {{timeout_s: 10, tolerance_mib: 64}}
"""


@pytest.mark.slow
def test_logs_from_other_cards_are_a_confound_with_the_budgets_break_evens(tmp_path, sim_root):
    """Point 2: an import of one level's logs from a box of 96 GB cards and the other's from 80 GB cards, at one
    fraction. Before: "Controlled comparison. Decides the launch: custom_ar", while the kit's own budget showed
    93.5 against 77 GiB before the weights. Now the memory each server measured before its weights is compared
    across the runs: the 80 GB runs are named, with the break-even per variant."""
    runs = {}
    for name, mib in (("96", 97887), ("80", 81559)):
        run_dir = run_batch(write_params(tmp_path, CARD.format(name=name, mib=mib, work=tmp_path / f"work{name}"),
                                         name=f"card{name}.yaml"))
        runs[name] = sorted(run_dir.glob("runs/*/server.log"))
    logs = [(p, "off") for p in runs["96"] if "custom_ar-off" in p.parent.name] + \
           [(p, "on") for p in runs["80"] if "custom_ar-on" in p.parent.name]
    imports = tmp_path / "imports.yaml"
    imports.write_text(yaml.safe_dump({
        "experiment": "two-boxes", "server": {"kind": "sglang"},
        "factors": {"custom_ar": {"on": {}, "off": {"flags": {"--disable-custom-all-reduce": True}}}},
        "baseline": {"custom_ar": "off"},
        "runs": [{"levels": {"custom_ar": level}, "log": str(p)} for p, level in logs]}))
    proc = subprocess.run([*LAUNCHLAB, "import", str(imports), "--out", str(tmp_path / "imported")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip().splitlines()[-1])
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["controlled"] is False and verdict["factors"]["custom_ar"]["status"] == "confounded"
    [card] = [c for c in verdict["confounds"] if "before the weights" in c["detail"]]
    assert card["kind"] == "host" and all("custom_ar-on" in r for r in card["runs"]) and len(card["runs"]) == 2
    assert "differs by more than 5%: 93.5 GiB: 01_custom_ar-off" in card["detail"]
    assert "the budget's break-even per variant: custom_ar=off: 0.748; custom_ar=on: 0.909" in card["detail"]
