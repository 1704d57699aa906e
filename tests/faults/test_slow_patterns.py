"""A ready or fatal pattern from the params that backtracks catastrophically cannot stall the watcher or the
log parser: its search is cut off, counts as not matching, is noted once, and the ready timeout holds."""

import json
import subprocess
import sys
import time

import pytest

from conftest import write_params
from launchlab import params
from launchlab.logparse import generic, patterns
from launchlab.runner.plan import make_plan
from launchlab.store import rundir

# `re` needs minutes to hours on each of these lines (2^n ways to split the run of letters), holding the GIL
LINES = "print('a' * 5000 + 'b', flush=True); print('x' * 5000, flush=True); print('still starting', flush=True)"
SERVER = f"import time; {LINES}; time.sleep(600)"


@pytest.mark.slow
def test_a_catastrophic_ready_pattern_cannot_stall_the_watcher_and_the_run_times_out_on_time(tmp_path, sim_root):
    path = write_params(tmp_path, f"""\
        experiment: slow-patterns
        hosts:
          box: {{transport: sim, gpus: 1, workdir: {tmp_path / "w"}}}
        server:
          kind: generic
          command: [python3, -c, "{SERVER}"]
          ready: {{timeout_s: 4, log_pattern: "(a+)+$", fatal_patterns: ["(x+x+)+y"]}}
          stop_grace_s: 2
        """)
    code = ("import sys; from launchlab.runner import runview; rd = runview.ensure_run_dir(sys.argv[1]); "
            "print(rd, flush=True); runview.run_variant(sys.argv[1], '', rd)")
    tic = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()  # what it started is stopped by the sim_root fixture
        out, err = proc.communicate()
        pytest.fail("the run was still going 90 s after a 4 s ready timeout: a pattern stalled the watcher")
    took_s = time.monotonic() - tic
    assert proc.returncode == 0, err[-2000:]
    folder = rundir.RunDir(out.splitlines()[0]).run(make_plan(params.load(path))[0].run_id).path
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "done" and status["status"] == "timeout"
    assert status["failure_message"] == "not ready after 4 s"
    assert took_s < 4 + 20, f"the whole run (start-up, watch, stop, parse) took {took_s:.0f} s"
    slow = [n for n in status["notes"] if "may backtrack catastrophically" in n]
    assert slow == [
        "pattern '(a+)+$' took over 50 ms on line 1 of server.log; it may backtrack catastrophically (nested repeats "
        "such as `(a+)+`), so it counted as not matching there",
        "pattern '(x+x+)+y' took over 50 ms on line 2 of server.log; it may backtrack catastrophically (nested "
        "repeats such as `(a+)+`), so it counted as not matching there",
    ]


class CountedSearches:
    """The real compiled pattern, with its searches counted (what the parser asks of it, not what it takes)."""

    def __init__(self, rx):
        self.rx, self.searches = rx, 0

    def search(self, *args, **kwargs):
        self.searches += 1
        return self.rx.search(*args, **kwargs)


def test_the_generic_parser_gives_up_on_a_pattern_after_a_few_slow_lines_and_still_reads_the_rest(monkeypatch):
    lines = ["a" * 5000 + "b\n"] * 50 + ["serving on :8000\n", "RuntimeError: boom\n"]
    compiled: dict[str, list[CountedSearches]] = {}
    real_compile = patterns.regex.compile

    def counted(pattern, *args, **kwargs):
        compiled.setdefault(pattern, []).append(CountedSearches(real_compile(pattern, *args, **kwargs)))
        return compiled[pattern][-1]

    monkeypatch.setattr(patterns.regex, "compile", counted)
    parsed = generic.parse(lines, ready_pattern=r"(a+)+$|serving", fatal_patterns=[r"boom"])
    # what bounds the cost, whatever the machine's load: after MAX_SLOW_LINES searches over budget, the pattern is
    # never searched again (a pattern tried on every line would be searched 52 times)
    assert sum(c.searches for c in compiled[r"(a+)+$|serving"]) == patterns.MAX_SLOW_LINES
    # no wall-clock bound here: a loaded machine (a newcomer check beside other work, 2026-12-05) took 3.0 s where a
    # quiet one takes under 1; the count above is what bounds the cost, and bench/ measures the time
    assert [(s.pattern, s.line, s.given_up) for s in parsed.slow_patterns] == [(r"(a+)+$|serving", 1, True)]
    assert "after 5 such lines it was no longer tried" in parsed.slow_patterns[0].note()
    assert parsed.failure.message == "RuntimeError: boom"


def test_a_pattern_searches_like_re_when_it_is_fast():
    rx = patterns.BudgetedPattern(r"Uvicorn running on (?P<url>\S+)")
    assert rx.search("INFO: Uvicorn running on http://0.0.0.0:8000", 1)
    assert not rx.search("INFO: starting", 2)
    assert rx.slow() is None
