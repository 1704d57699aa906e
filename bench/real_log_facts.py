"""How many of the real-log oracle facts the parser reads, per fixture set: the figure issue 51's held-out sets are
judged by (a held-out set of 29 logs was read at 88 %; the goal is 97 % on sets the parsers never saw).

    .venv/bin/python bench/real_log_facts.py [--misses] [FOLDER …]

A fact is one checked value of an INDEX.md entry, checked exactly as tests/test_real_logs.py checks it (its CHECKS):
one `failure` sub-key, one `ranks.<r>.<field>`, one `phase_lines` / `draft_phase_lines` / `figures` entry, or one
other top-level key (the counting of issue 51's list of misses). `--misses` lists each fact not read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETS = ("real-logs", "real-logs-more", "real-logs-round3", "real-logs-tp2", "real-logs-4")
PER_ENTRY = ("phase_lines", "draft_phase_lines", "figures")  # keys whose every entry is a fact of its own


def facts(oracle: dict) -> list[tuple[str, dict]]:
    """(name, the one-fact oracle that checks it) for every fact of an INDEX entry."""
    out = []
    for key, want in oracle.items():
        if key == "failure" and isinstance(want, dict):
            source = {"source": want["source"]} if "source" in want else {}
            out += [(f"failure.{sub}", {key: {**source, sub: value}}) for sub, value in want.items() if sub != "source"]
        elif key == "ranks":
            out += [(f"ranks.{rank}.{field}", {key: {rank: {field: value}}})
                    for rank, fields in want.items() for field, value in fields.items()]
        elif key in PER_ENTRY and isinstance(want, dict):
            out += [(f"{key}.{sub}", {key: {sub: value}}) for sub, value in want.items()]
        elif key in ("dead_worker_pid", "dead_worker_exit_code"):  # checked as a pair from the whole oracle
            out.append((key, {key: want, **{k: oracle[k] for k in ("dead_worker_pid", "dead_worker_exit_code")
                                            if k in oracle}}))
        else:
            out.append((key, {key: want}))
    return out


def count(folder: Path, misses: list[str]) -> tuple[int, int]:
    import pytest

    import test_real_logs as t
    from launchlab import logparse

    read = total = 0
    own = t.oracles(folder)
    for path in sorted(folder.glob("*.log")):
        name = path.name
        oracle = t.ORACLES.get(name, own.get(name))  # as the test reads it: a later folder's entry wins
        parsed = logparse.parse_file(folder / name)
        data = parsed.to_json()
        for fact, sub in facts(oracle):
            total += 1
            case = t.Case(name, oracle, parsed, data)
            try:
                for key, want in sub.items():
                    t.CHECKS.get(key, t.no_check(key))(case, want)
            except (Exception, pytest.fail.Exception) as e:  # an assertion, a missing field, or "no check" (pytest.fail)
                misses.append(f"{folder.name}/{name}: {fact}: {str(e).splitlines()[0][:160] if str(e) else type(e).__name__}")
                continue
            read += 1
    return read, total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folders", nargs="*", default=SETS)
    ap.add_argument("--misses", action="store_true", help="list each fact not read")
    args = ap.parse_args()
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "lib")]
    misses: list[str] = []
    all_read = all_total = 0
    for name in args.folders:
        read, total = count(ROOT / "tests/fixtures" / name, misses)
        all_read, all_total = all_read + read, all_total + total
        print(f"{name:18} {read:4d} / {total:4d} facts read ({100 * read / total:5.1f} %)")
    print(f"{'all':18} {all_read:4d} / {all_total:4d} facts read ({100 * all_read / all_total:5.1f} %)")
    if args.misses:
        print("\n".join(misses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
