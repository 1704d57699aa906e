"""Order effects: a run slowed by its place in the batch rather than by its variant — the first start on a host
fills cold caches (a compile cache, the page cache holding the weights) and can take far longer than its repeats
(hyperfine warns of the same; its cure, warm-up runs, is params' `warmup:`)."""

from __future__ import annotations

import pandas as pd

COLD_RATIO = 1.5  # a first run slower than this × the median of its variant's other runs on its host is named


def cold_first_runs(runs: pd.DataFrame) -> list[str]:
    """A warning for each host whose first run (in plan order: the order of runs.parquet), or first ready run,
    started more than COLD_RATIO × slower than the median of the other runs of its variant with its outcome on
    that host. The first ready run is looked at too: a run that fails early (before a compile step) leaves the
    cache cold for the first that gets that far. Hosts where the first run has no repeat to compare with say
    nothing."""
    found = []
    if "startup_s" not in runs:
        return found
    for host, on_host in runs.groupby("host", sort=False):
        firsts = [("first", on_host.iloc[0])]
        ready = on_host[on_host["status"] == "ready"]
        if len(ready) and ready.iloc[0]["run_id"] != on_host.iloc[0]["run_id"]:
            firsts.append(("first ready", ready.iloc[0]))
        on_host = on_host[on_host["startup_s"].notna()]
        for which, first in firsts:
            others = on_host[(on_host["variant"] == first["variant"]) & (on_host["status"] == first["status"])
                             & (on_host["run_id"] != first["run_id"])]
            if others.empty or pd.isna(first["startup_s"]):
                continue
            median = float(others["startup_s"].median())
            if median > 0 and first["startup_s"] > COLD_RATIO * median:
                found.append(f"cold caches: run {first['run_id']}, the {which} run on host {host}, took "
                             f"{first['startup_s']:.1f} s to start against a median of {median:.1f} s for the "
                             f"{len(others)} other {first['status']} run(s) of {first['variant']} there "
                             f"({first['startup_s'] / median:.1f}×): its startup time reflects its place in the batch "
                             "(a cold compile or page cache), not its variant; add `warmup: 1` to the params to "
                             "launch the baseline once first, uncompared")
    return found
