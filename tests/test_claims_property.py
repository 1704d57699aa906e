"""Issue 47: the verdict's claims, held to their evidence over generated run directories (hypothesis). Designs of one
to three factors of two or three levels, one to three runs a variant, each run ready, failed (two reasons),
degraded, not ready in time without an error (censored), a kit error, missing, or the same log as another run: the
ledger and the decisions built from them never state a claim their own evidence contradicts, and never a
universal ("every", "only", a place-less "decides" or "does not change") over a stratum they have no observation
for — that stratum is named as not compared, with why. The truth each property is checked against is computed here
from the generated runs, not by the kit."""

from __future__ import annotations

import itertools

import pandas as pd
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launchlab.store.manifest import ManifestEntry
from launchlab.verdicts import analysis, claims, ledger

ENDS = ["ready", "failed-kv", "failed-oom", "degraded", "censored", "error", "missing", "duplicate"]
VALID_ENDS = {"ready", "failed-kv", "failed-oom", "degraded"}


def universal_ok(claim, n_strata: int) -> bool:
    """A claim may use a universal word only when it rests on every stratum there is and names none as not
    compared (the rule every generated verdict is held to)."""
    if not any(word in claim.text for word in claims.UNIVERSAL):
        return True
    return not claim.not_observed and len(claim.strata) == n_strata


@st.composite
def designs(draw):
    """(factors {name: levels}, runs [(levels, end)]) of a full factorial, every variant with 1-3 runs."""
    n = draw(st.integers(1, 3))
    factors = {f"f{i}": [f"l{j}" for j in range(draw(st.integers(2, 3)))] for i in range(n)}
    runs = []
    for combo in itertools.product(*factors.values()):
        levels = dict(zip(factors, combo, strict=True))
        for _ in range(draw(st.integers(1, 3))):
            runs.append((levels, draw(st.sampled_from(ENDS))))
    return factors, runs


def frames_of(factors: dict[str, list[str]], runs: list[tuple[dict, str]]):
    """(runs frame, planned entries, parsed by run id) as a run directory's would be; a duplicate repeats the first
    finished run's log (and so its outcome), whatever levels it was filed under."""
    rows, planned, parsed = [], [], {}
    for i, (levels, end) in enumerate(runs, 1):
        run_id = f"{i:02d}_" + ".".join(f"{k}-{v}" for k, v in levels.items())
        variant = ", ".join(f"{k}={v}" for k, v in levels.items())
        planned.append(ManifestEntry(run_id, i, variant, levels, 1, "box"))
        if end == "missing":
            continue
        status = {"failed-kv": "failed", "failed-oom": "failed", "censored": "timeout"}.get(end, end)
        reason = {"failed-kv": "kv_cache_no_memory", "failed-oom": "cuda_oom"}.get(end)
        row = {"run_id": run_id, "variant": variant, "repetition": 1, "host": "box", "status": status,
               "failure_reason": reason, "failure_phase": "kv_cache" if reason else None,
               "failure_message": "not ready after 5 s" if status == "timeout" else None,
               "startup_s": 1.0, "peak_mem_used_mib": 1.0, "phase_reached": "ready", **levels}
        parsed[run_id] = {"log_sha256": run_id}
        if end == "duplicate":
            if not rows:  # nothing to repeat yet: a run of its own that started
                row["status"] = "ready"
            else:
                first = rows[0]
                row.update({k: first[k] for k in ("status", "failure_reason", "failure_phase", "failure_message")})
                parsed[run_id] = {"log_sha256": first["run_id"]}
        rows.append(row)
    return pd.DataFrame(rows), planned, parsed


def truth(factors, runs_frame, parsed, factor: str):
    """Per stratum (the other factors' levels): per level (ready, valid) counted here from the generated runs."""
    seen, valid = set(), []
    for r in runs_frame.to_dict("records"):
        sha = parsed[r["run_id"]]["log_sha256"]
        if sha in seen:
            continue
        seen.add(sha)
        if r["status"] in ("ready", "failed", "degraded"):
            valid.append(r)
    others = [f for f in factors if f != factor]
    out: dict[tuple, dict[str, tuple[int, int]]] = {}
    for combo in itertools.product(*(factors[f] for f in others)):
        held = dict(zip(others, combo, strict=True))
        mine = [r for r in valid if all(r[f] == v for f, v in held.items())]
        out[tuple(held.items())] = {lv: (sum(r["status"] == "ready" for r in mine if r[factor] == lv),
                                         sum(r[factor] == lv for r in mine)) for lv in factors[factor]}
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(designs())
def test_no_claim_is_contradicted_by_its_evidence_or_universal_over_a_stratum_never_observed(design):
    factors, runs = design
    runs_frame, planned, parsed = frames_of(factors, runs)
    led = ledger.build(runs_frame, list(factors), planned=planned, parsed=parsed)
    for factor, levels in factors.items():
        d = analysis.decide(led.for_factor(factor, runs_frame), factor, list(factors), reference=levels[0])
        said = [claims.Claim(**c) for c in d.claims]
        counts = truth(factors, runs_frame, parsed, factor)
        n_strata = len(d.strata)
        assert n_strata == len(counts)
        # the words: no "only" ever; a universal only over every stratum, each observed
        assert " only " not in d.summary, d.summary
        for claim in said:
            assert universal_ok(claim, n_strata), (claim.text, claim.strata, claim.not_observed)
        for s in d.strata:
            held = tuple(s.held.items())
            per = counts[held]
            observed = [lv for lv, (_, n) in per.items() if n]
            shares = {per[lv][0] / per[lv][1] for lv in observed}
            # each stratum's counts are the runs' own
            assert {lv: (p["ready"], p["valid"]) for lv, p in s.levels.items()} == \
                {lv: per[lv] for lv in s.levels}, (s.levels, per)
            label = claims.label(s.held)
            named = {n["stratum"] for c in said for n in c.not_observed}
            if len(observed) < 2:  # never compared: named so, with why, and no claim rests on it
                assert s.state == "not compared" and label in named and s.why, s
                assert not any(label in c.strata for c in said)
            elif s.state in ("changes",) and not s.fails_differently:
                assert len(shares) > 1  # "decides" only where the share of ready runs differs
            elif s.state == "no change":
                assert len(shares) == 1
        if d.status == "neutral":  # "does not change" only where every stratum compared every level
            assert all(s.state == "no change" and s.complete for s in d.strata)
        if d.status in ("decides", "decides_in_some"):
            assert any(len({p[0] / p[1] for p in counts[tuple(s.held.items())].values() if p[1]}) > 1
                       for s in d.strata)
        if "not compared" in {s.state for s in d.strata}:
            assert "not compared" in d.summary, d.summary


def test_the_universal_rule_catches_a_claim_past_its_data():
    """The rule the property holds: a claim that says "every level of" while a stratum was never compared breaks it."""
    claim = claims.Claim("decides the launch", "f0", ["f1=l0"], [{"stratum": "f1=l1", "why": "no valid run"}],
                         text="f0 decides the launch at every level of f1")
    assert not universal_ok(claim, 2)
    assert universal_ok(claims.Claim("decides the launch", "f0", ["f1=l0", "f1=l1"],
                                            text="f0 decides the launch at every level of f1"), 2)
