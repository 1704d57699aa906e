"""The verdict answers the experiment's question where the measurements allow — on the real H200 run directory
of examples/ ("how much GPU memory at 0.5 vs 0.9?") — and report.md prints no Python None."""

import dataclasses
import shutil

from conftest import ROOT
from launchlab.reporting import reportmd
from launchlab.store.verdictrecord import Effect
from launchlab.verdicts import question

H200 = ROOT / "examples" / "h200-transformers-kv" / "20261129-232709"


def test_the_h200_verdict_answers_how_much_memory_each_memory_percent_took(tmp_path):
    run_dir = tmp_path / "h200"
    shutil.copytree(H200, run_dir)
    reportmd.write_verdict(run_dir)
    text = (run_dir / "report.md").read_text()
    verdict_part = text.split("\n## Verdict\n")[1].split("\n## ")[0]
    # 124,197 MiB against 70,049 MiB of nvidia-smi's peak, matched runs, n=2 each side
    assert "- peak GPU memory (nvidia-smi every 100 ms) at batching=continuous, num\\_blocks=auto: `memory_percent=0.9` " \
           "121.3 GiB vs `memory_percent=0.5` 68.4 GiB (+52.9 GiB, 1.77×; n=2 vs 2" in verdict_part
    assert "None" not in text
    outcomes = text.split("## Outcomes")[1].split("\n## ")[0]
    assert "ready\\_peak\\_mem\\_used\\_gib\\_max" in outcomes and "| 121.286 |" in outcomes, "memory in GiB, as in the plots"


def test_a_question_about_nothing_measured_gets_no_answer_section():
    effects = [Effect(factor="a", level="2", metric="peak_mem_used_mib", mean=2048.0, baseline_mean=1024.0, sd=0.0,
                      diff=1024.0, ratio=2.0, n=3, baseline_n=3, strata=["alone"], signs_disagree=False)]
    assert question.markdown("Which flag makes the launch fail?", effects, {"a": "1"}) == ""
    assert question.markdown("", effects, {"a": "1"}) == ""
    said = question.markdown("How much memory does a=2 take?", effects, {"a": "1"})
    assert "`a=2` 2.0 GiB vs `a=1` 1.0 GiB (+1.0 GiB, 2.00×; n=3 vs 3)" in said
    disagreeing = [dataclasses.replace(effects[0], signs_disagree=True)]
    assert question.markdown("How much memory does a=2 take?", disagreeing, {"a": "1"}) == "", \
        "an effect whose sign differs between strata is not summed up in one line"


def test_an_effect_over_several_strata_gives_each_strata_means_not_a_mean_no_run_was_near():
    """graphs=eager vs cuda in the real vLLM example: 1.4 vs 1.5 GiB at utilization 0.004 and 43.1 vs 43.3 GiB at
    0.3; the mean of those means (22 GiB) is no run's value and must not be shown as one."""
    strata = [{"stratum": "u=0.004", "n": 3, "baseline_n": 3, "mean": 1440.0, "baseline_mean": 1536.0, "diff": -96.0},
              {"stratum": "u=0.3", "n": 3, "baseline_n": 3, "mean": 44134.0, "baseline_mean": 44237.0, "diff": -103.0}]
    effect = Effect(factor="graphs", level="eager", metric="peak_mem_used_mib", mean=22787.0, baseline_mean=22886.5,
                    diff=-99.5, ratio=0.996, n=6, baseline_n=6, strata=["u=0.004", "u=0.3"], stratum_diffs=strata)
    said = question.markdown("How much GPU memory does graphs take?", [effect], {"graphs": "cuda"})
    assert "`graphs=eager` vs `graphs=cuda`: 1.4 GiB vs 1.5 GiB at u=0.004; 43.1 GiB vs 43.2 GiB at u=0.3 " \
           "(-0.1 GiB on average; n=6 vs 6" in said
    assert "22." not in said and "×" not in said
