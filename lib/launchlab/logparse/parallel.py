"""The parallel sizes a server log shows: tensor, pipeline and data parallel, from everything it states — the kind's
argument dump (`tp_size=8`, `tensor_parallel_size`), and where a dump is not in the log, the ranks its lines are
tagged with (`[… TP7]`, `(VllmWorker TP3 pid=…)`, `(VllmWorker rank=3 pid=…)`, `DP1 TP1`, `PP1 TP0`) or the
process group's size a line states (`world_size=8`, NCCL's `nranks 8`). A size read from the ranks is a lower
bound — the log shows at least those ranks — and is said as such ("at least 8: ranks 0–7 in the log"). A size the
server states outside the dump (SGLang's `DSA with TP mode is active, dp_size=1, tp_size=8`) counts as stated.

Pure: a ParsedLog in, its `parallel` record out ({tp, tp_at_least, pp, dp, gpus, said}); `launchlab parse`, `import`,
`diagnose` and the runs' parsed.json all read it (logparse.parse_file fills it).
"""

from __future__ import annotations

import re

from launchlab.logparse.kinds import KINDS
from launchlab.logparse.parsedlog import ParsedLog
from launchlab.logparse.serverkind import LogFacts


def _arg(parsed: ParsedLog, name: str | None) -> int | None:
    value = str(parsed.args.get(name or "", "")).strip("'\"")
    return int(value) if value.isdigit() and int(value) > 0 else None  # as stated: the draft says what no host holds


_WORKER = re.compile(r"\bVllmWorker-(\d+)\b")  # vLLM's dead worker ("Worker proc VllmWorker-1 died …"): its rank


def _ranks(parsed: ParsedLog) -> tuple[list[int], list[int]]:
    """(the TP ranks, the pipeline stages) the log's rank keys name (`"3"`, `"pp1.2"`), and the workers it says died."""
    keys = parsed.seen_ranks | set(parsed.ranks) | set(parsed.custom_ar) | set(parsed.rank_pids)
    keys |= {m.group(1) for death in parsed.worker_deaths if (m := _WORKER.search(death.name or ""))}
    tp, pp = [], []
    for key in keys:
        if key.startswith("dp"):  # `dp1.1`: a TP rank's DP rank (sglang.py), counted as its TP rank's own key
            continue
        stage, _, rank = key.rpartition(".")
        if rank.isdigit():
            tp.append(int(rank))
        if stage.startswith("pp") and stage[2:].isdigit():
            pp.append(int(stage[2:]))
    return tp, pp


def _span(values: list[int]) -> str:
    low, high = min(values), max(values)
    return f"rank {low}" if low == high else f"ranks {low}–{high}"


def read(parsed: ParsedLog) -> dict:
    """The record: `tp`, `pp`, `dp` (1 where nothing shows more), `tp_at_least` (the log shows at least `tp` TP
    ranks but states no size), `said`: where `tp` comes from, in words; and `nodes` where the arguments name more
    than one (SGLang's `nnodes`)."""
    sizes = _read(parsed)
    if (nodes := _arg(parsed, "nnodes")) is not None and nodes > 1:
        sizes["nodes"] = nodes
    # SGLang's DP attention splits the TP group's own GPUs among DP ranks: the launch uses tp × pp GPUs; otherwise
    # each DP rank is a replica with a TP group of its own (SGLang's data-parallel controller, vLLM): tp × pp × dp
    shared = sizes["dp"] > 1 and parsed.server == "sglang" and _dp_attention(parsed)
    sizes["gpus"] = sizes["tp"] * sizes["pp"] * (1 if shared else sizes["dp"])
    return sizes


def _dp_attention(parsed: ParsedLog) -> bool:
    """SGLang's DP attention: its argument says so, or, without the dump, no TP rank is tagged with two DP ranks
    (under DP attention `DP1 TP1` — DP rank d holds its share of TP ranks; replicas each have a TP rank 0:
    `DP0 TP0`, `DP1 TP0`)."""
    if "enable_dp_attention" in parsed.args:
        return parsed.args["enable_dp_attention"] == "True"
    in_dp: dict[str, set[str]] = {}
    for key in parsed.seen_ranks:
        if key.startswith("dp"):
            dp, _, rank = key.partition(".")
            in_dp.setdefault(rank, set()).add(dp)
    return bool(in_dp) and all(len(dps) == 1 for dps in in_dp.values())


def _read(parsed: ParsedLog) -> dict:
    facts = KINDS[parsed.server].log_facts if parsed.server in KINDS else LogFacts()
    ranks, stages = _ranks(parsed)
    dp_seen = [int(d) for d in parsed.dp_ranks if d.isdigit()]
    stated = parsed.stated_sizes
    pp = _arg(parsed, facts.pp_size) or stated.get("pp") or (max(stages) + 1 if stages else 1)
    dp = _arg(parsed, facts.dp_size) or stated.get("dp") or (max(dp_seen) + 1 if dp_seen else 1)
    if (tp := _arg(parsed, facts.tp_size)) is not None:
        return {"tp": tp, "tp_at_least": False, "pp": pp, "dp": dp,
                "said": f"{facts.tp_size}={tp} in the server's argument dump"}
    if (tp := stated.get("tp")) is not None:
        return {"tp": tp, "tp_at_least": False, "pp": pp, "dp": dp, "said": f"tp_size={tp} stated in the log"}
    lowest = max(ranks) + 1 if ranks else 1
    # a process group's stated size, where it holds every rank seen (V0 and Ray workers are numbered by order of
    # appearance, not by their rank: the group's size is the better word)
    if parsed.world_size is not None and (tp := parsed.world_size // (pp * dp)) > 1 and tp >= lowest:
        return {"tp": tp, "tp_at_least": False, "pp": pp, "dp": dp,
                "said": f"a process group of {parsed.world_size} in the log (world size, NCCL's nranks)"}
    if lowest > 1:
        return {"tp": lowest, "tp_at_least": True, "pp": pp, "dp": dp,
                "said": f"at least {lowest}: {_span(ranks)} in the log"}
    return {"tp": 1, "tp_at_least": True, "pp": pp, "dp": dp,
            "said": "no argument dump and no rank tag beyond 0 in the log: one GPU as far as it shows"}
