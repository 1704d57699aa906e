"""vLLM's KV-cache budget as the report recomputes it from the figures its log states (ServerKind.budget of the
vLLM kind, logparse/vllm.py): one row per run that logged vLLM's memory profile, with the utilization any KV
cache needs (its break-even)."""

from __future__ import annotations

_PROFILE = ("total_gpu_gib", "non_torch_gib", "activation_peak_gib")  # the profile line's figures besides the weights


def kv_budget(events, runs, telemetry):
    """One row per run that logged vLLM's memory profile (reference/log-formats.md 3.2): V0's "Memory profiling
    takes …" lines, or V1's "Free memory on device (free/total GiB) on startup. Desired GPU memory utilization is
    (util, requested GiB). Actual usage is … for weight, … peak activation, … non-torch memory, and … CUDAGraph
    memory" (0.2x). kv = total × gpu_memory_utilization − (weights + non-torch + activation peak), recomputed,
    against "Available KV cache memory" (agrees); the utilization needed for any KV cache is
    (weights + non-torch + activation) / total. CUDA-graph memory (graph_gib) is shown beside it: vLLM 0.26 does not
    take it from the KV budget (its "Available KV cache memory" is the difference above). The profile's numbers
    suffice: no nvidia-smi comparison.

    A launch that failed at KV sizing (vLLM 0.26 raises before that line: "Available KV cache memory: -0.17 GiB")
    gets a row too, from its own utilization (its arguments), weights ("Model loading took") and logged KV memory,
    with the total, non-torch memory and activation peak of the runs on its host that printed the line and load
    the same weights — only where those runs agree on them; `borrowed_from` says which (empty: its own log)."""
    import pandas as pd  # loaded when a report asks, never to parse a log or validate params

    from launchlab.logparse import budgetrows as budget

    logged = list(budget.logged(events, runs))
    profiled = [(run, v) for run, v in logged if not budget.missing(*(v.get(f) for f in _PROFILE))]
    cards = budget.card_totals(telemetry)
    rows = []
    for run, v in logged:
        if not budget.missing(*(v.get(f) for f in _PROFILE)):
            figures, lenders = v, []
        elif (borrowed := _borrowed(run, v, profiled)) is not None:
            figures, lenders = borrowed
        elif (row := _card_row(run, v, cards, budget)) is not None:
            rows.append(row)
            continue
        else:
            continue
        if (row := _budget_row(run, figures, budget)) is not None:
            rows.append({**row, "borrowed_from": budget.borrowed_from(lenders)})
    return pd.DataFrame(rows)


def _weights(v) -> float | None:
    """The weights the profile counted, else "Model loading took" (a run's numbers hold NaN for what it never logged)."""
    from launchlab.logparse import budgetrows as budget

    profiled = v.get("profile_weights_gib")
    return v.get("weights_mem_gib") if budget.missing(profiled) else profiled


def _borrowed(run, v, profiled: list) -> tuple[dict, list[str]] | None:
    """A failed launch's figures with the profile its log lacks taken from `profiled` (run, numbers): the runs on
    its host with the same weights, when they agree on each figure; None when it has no KV line of its own,
    no utilization or weights, or no such runs."""
    from launchlab.logparse import budgetrows as budget

    own = {"gpu_memory_utilization": v.get("gpu_memory_utilization"), "kv_avail_gib": v.get("kv_avail_gib"),
           "profile_weights_gib": _weights(v)}
    if budget.missing(*own.values()):
        return None
    lenders = [(r, p) for r, p in profiled if r.get("host") == run.get("host") and r["run_id"] != run["run_id"]
               and abs(_weights(p) - own["profile_weights_gib"]) <= budget.DISAGREE_GIB]
    taken = budget.agreed({f: [float(p[f]) for _, p in lenders] for f in _PROFILE})
    return None if not lenders or taken is None else ({**own, **taken}, [r["run_id"] for r, _ in lenders])


def _card_row(run, v, cards, budget) -> dict | None:
    """A failed launch whose log gives only its utilization and its negative "Available KV cache memory" (vLLM 0.26
    raises before the profile line), with the card's total from nvidia-smi (a run's samples, or the total
    `launchlab diagnose --gpu-memory` was given): what it needed besides the KV cache is total × util − kv, so
    its break-even is util − kv / total."""
    util, kv = v.get("gpu_memory_utilization"), v.get("kv_avail_gib")
    if cards is None or run["run_id"] not in cards.index or budget.missing(util, kv, cards[run["run_id"]]):
        return None
    total = float(cards[run["run_id"]]) / 1024
    return {"run_id": run["run_id"], "variant": run["variant"], "status": run["status"], "total_gib": total,
            "total_from": "the card's memory.total", "utilization": util, "non_kv_gib": total * util - kv,
            "kv_gib": kv, "logged_kv_gib": kv, "agrees": None, "graph_gib": None,
            "break_even_utilization": util - kv / total, "borrowed_from": ""}


def _budget_row(run, v, budget) -> dict | None:
    total, util = v.get("total_gpu_gib"), v.get("gpu_memory_utilization")
    parts = [_weights(v), v.get("non_torch_gib"), v.get("activation_peak_gib")]
    if budget.missing(total, util, *parts):
        return None
    used = sum(parts)
    kv = total * util - used
    logged = v.get("kv_avail_gib")
    logged = None if budget.missing(logged) else logged
    graphs = v.get("cuda_graph_gib")
    return {"run_id": run["run_id"], "variant": run["variant"], "status": run["status"], "total_gib": total,
            "utilization": util, "non_kv_gib": used, "kv_gib": kv, "logged_kv_gib": logged,
            "agrees": None if logged is None else abs(logged - kv) <= budget.DISAGREE_GIB,
            "graph_gib": None if budget.missing(graphs) else graphs,
            "break_even_utilization": used / total}
