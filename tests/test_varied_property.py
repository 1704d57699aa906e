"""Issue 63: the manipulation check, held over generated designs (hypothesis). One to three factors of two or three
levels, one to three runs a variant; one factor, `x`, is made indistinguishable in every run — the same argument dump,
the same memory figures, the same outcomes and startup times at each of its levels, no level check that shows it, and
the same peak GPU memory where a server stood ready (a failed launch's sampled peak is whatever the sampler caught) —
while every other factor's level is in the server's argument dump. The verdict never calls `x` neutral (it was not
shown to vary), and never says that of a factor its runs' dumps tell apart. The truth is by construction here, not
computed by the kit."""

from __future__ import annotations

import itertools

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launchlab.store.manifest import ManifestEntry
from launchlab.verdicts import ledger, verdict
from launchlab.verdicts.evidence import Evidence

ENDS = ["ready", "failed-kv", "failed-oom", "degraded", "error", "missing"]
EVENTS = pd.DataFrame(columns=["run_id", "t_s", "rank", "field", "value"])


@st.composite
def designs(draw):
    """(factors {name: levels} with `x` among them, runs [(levels, end, startup_s, peak_mib)]): per combination of
    the other factors, one list of ends (and startup times) that every level of x repeats; a launch that failed has
    the peak its sampler happened to catch before the server freed its memory (drawn anew for each run)."""
    others = {f"f{i}": [f"l{j}" for j in range(draw(st.integers(2, 3)))] for i in range(draw(st.integers(0, 2)))}
    x = [f"x{j}" for j in range(draw(st.integers(2, 3)))]
    factors = {**others, "x": x}
    runs = []
    for combo in itertools.product(*others.values()):
        held = dict(zip(others, combo, strict=True))
        ends = draw(st.lists(st.tuples(st.sampled_from(ENDS), st.floats(1, 90)), min_size=1, max_size=3))
        for level in x:  # a peak in whole MiB, as nvidia-smi says it
            runs += [({**held, "x": level}, end, startup,
                      1.0 if end in ("ready", "degraded") else float(draw(st.integers(0, 80_000)))) for end, startup in ends]
    return factors, runs


def evidence_of(factors: dict[str, list[str]], runs: list[tuple[dict, str, float, float]]) -> Evidence:
    rows, planned, parsed = [], [], {}
    for i, (levels, end, startup, peak) in enumerate(runs, 1):
        run_id = f"{i:02d}_" + ".".join(f"{k}-{v}" for k, v in levels.items())
        variant = ", ".join(f"{k}={v}" for k, v in levels.items())
        planned.append(ManifestEntry(run_id, i, variant, levels, 1, "box"))
        if end == "missing":
            continue
        status = {"failed-kv": "failed", "failed-oom": "failed"}.get(end, end)
        reason = {"failed-kv": "kv_cache_no_memory", "failed-oom": "cuda_oom"}.get(end)
        rows.append({"run_id": run_id, "variant": variant, "repetition": 1, "host": "box", "status": status,
                     "failure_reason": reason, "failure_phase": "kv_cache" if reason else None,
                     "failure_message": None, "startup_s": startup if status == "ready" else None,
                     "peak_mem_used_mib": peak, "phase_reached": "kv_cache" if reason else "ready", **levels})
        # the server's dump states every factor's level but x's; x leaves no trace in any figure
        args = {f"{f}_arg": levels[f] for f in factors if f != "x"} | {"tp_size": "2"}
        parsed[run_id] = {"server": "sglang", "args": args, "log_sha256": run_id,
                          "ranks": {"0": {"dist_init_mem_gib": 1.62, "weights_mem_gib": 70.0}}}
    frame = pd.DataFrame(rows, columns=["run_id", "variant", "repetition", "host", "status", "failure_reason",
                                        "failure_phase", "failure_message", "startup_s", "peak_mem_used_mib",
                                        "phase_reached", *factors])  # runs.parquet's columns, as frames.build writes
    led = ledger.build(frame, list(factors), planned=planned, parsed=parsed)
    baseline = {f: levels[0] for f, levels in factors.items()}
    return Evidence(led, frame, EVENTS, baseline, baseline_variant=", ".join(f"{k}={v}" for k, v in baseline.items()),
                    kind="sglang", parsed=parsed)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(designs())
def test_a_factor_whose_levels_look_alike_in_every_run_is_never_called_neutral(design):
    factors, runs = design
    v = verdict.build(evidence_of(factors, runs))
    x = v.factors["x"]
    assert x.status != "neutral" and "x" not in v.neutral_factors, x.summary
    if x.status == "not_shown_to_vary":
        assert "x" in v.not_varied_factors and not v.conclusive and "what would show it" in x.summary
    for name in factors:
        if name != "x":  # its dump tells its levels apart: what the runs did is judged, never "not shown to vary"
            assert v.factors[name].status != "not_shown_to_vary", v.factors[name].summary


def test_the_property_holds_because_x_would_read_neutral_without_the_check():
    """The condition the property tests is real: the same design's counts alone say "no change" of x."""
    factors = {"x": ["x0", "x1"]}
    runs = [({"x": level}, end, 5.0, 1.0) for level in ("x0", "x1") for end in ("ready", "ready", "ready", "ready")]
    v = verdict.build(evidence_of(factors, runs))
    assert v.factors["x"].status == "not_shown_to_vary" and v.factors["x"].would_be == "neutral"
