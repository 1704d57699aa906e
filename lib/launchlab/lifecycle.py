"""One run, start to finish: preflight → sampler → server → watch → stop → drain → collect → parse → status.

Whatever happens (a failed launch, a kit error, Ctrl-C), the `finally` block stops the server's process
group, waits for the GPUs to drain, stops the sampler and collects the raw files; a second Ctrl-C during
that cleanup is deferred until it is done. The kit writes status.json from what it observed, never from
papermill's view of the notebook (which can report success for a run whose kernel died).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pandas as pd

from launchlab import __version__, logparse, outputs, params, provenance, telemetry
from launchlab.errors import HostError, LaunchlabError
from launchlab.hosts import Host, ProcessRef, commands
from launchlab.plan import Run

RUN_ID_ENV = "LAUNCHLAB_RUN_ID"
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASS|AUTH", re.IGNORECASE)
POLL_S = 0.2
FATAL_GRACE_S = 3.0  # after a fatal line, let the server finish writing its traceback before stopping it


@dataclass
class RunResult:
    """What the kit observed of one run; status.json and a row of runs.parquet."""

    run_id: str
    variant: str
    repetition: int
    host: str
    levels: dict[str, str]
    status: str = "error"  # ready | failed | timeout | degraded | error
    failure_reason: str | None = None
    failure_phase: str | None = None
    failure_message: str | None = None
    phase_reached: str | None = None
    startup_s: float | None = None
    peak_mem_used_mib: float | None = None
    server_started_at: str | None = None
    stopped_with: str | None = None
    drained: bool | None = None
    drain_s: float | None = None
    simulated: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Outcome:
    status: str
    reason: str | None
    message: str
    ready_after_s: float | None = None


def masked_env(env: dict[str, str]) -> dict[str, str]:
    return {k: ("****" if SECRET_NAME.search(k) else v) for k, v in env.items()}


def run_variant(experiment: str | Path, run_id: str, run_dir: str | Path) -> RunResult:
    """Run one planned run of a params file into run_dir/runs/<run_id>/ (what run_variant.ipynb calls)."""
    from launchlab import hosts
    from launchlab.plan import find_run, make_plan

    exp = params.load(experiment)
    run = find_run(make_plan(exp), run_id) if run_id else make_plan(exp)[0]
    return run_one(exp, run, Path(run_dir), hosts.connect(exp, run.host))


def run_one(exp: params.Experiment, run: Run, run_dir: Path, host: Host) -> RunResult:
    folder = outputs.run_folder(run_dir, run.run_id)
    folder.mkdir(parents=True, exist_ok=True)
    result = RunResult(run.run_id, run.variant.name, run.repetition, host.name, dict(run.variant.levels),
                       simulated=host.simulated)
    host_dir = _host_dir(host, exp, run_dir, run.run_id)
    started: list[ProcessRef] = []
    outcome: _Outcome | None = None
    t_start = time.monotonic()

    def state(name: str) -> None:
        outputs.write_json(folder / outputs.STATUS, {"run_id": run.run_id, "state": name,
                                                    "elapsed_s": round(time.monotonic() - t_start, 2)})

    try:
        state("preflight")
        host.make_dir(host_dir)
        preflight = _preflight(host)
        port = host.free_port()
        launch = params.render(exp, run.variant, port=port, run_id=run.run_id, host=host.name)
        _write_provenance(folder, exp, host, launch, preflight)

        state("starting")
        # The run id travels in the environment of everything the kit starts, so a process left behind by a
        # run that lost its host can be found again on that host (`leftovers`).
        tag = {RUN_ID_ENV: run_tag(exp, run_dir, run.run_id)}
        host.write_text(f"{host_dir}/sampler.env", commands.env_file_text(tag))
        started.append(host.start_detached("sampler", telemetry.sampler_argv(exp.sampler.interval_ms),
                                           cwd=host_dir, log_name=outputs.TELEMETRY_CSV, env_file="sampler.env"))
        _write_processes(folder, host, started)
        host.write_text(f"{host_dir}/server.env", commands.env_file_text({**launch.env, **tag}))
        result.server_started_at = host.clock()
        t_launch = time.monotonic()
        started.append(host.start_detached("server", launch.argv, cwd=host_dir, log_name=outputs.SERVER_LOG,
                                           env_file="server.env"))
        _write_processes(folder, host, started)

        state("watching")
        rules = logparse.rules_for(exp.server.kind, exp.server.ready.log_pattern, tuple(exp.server.ready.fatal_patterns))
        outcome = _watch(host, started[-1], host_dir, folder, rules, launch.health_url,
                         t_launch + exp.server.ready.timeout_s, t_launch)
    except KeyboardInterrupt:
        outcome = _Outcome("error", None, "interrupted by the user (Ctrl-C); the server was stopped")
        raise
    except LaunchlabError as exc:
        outcome = _Outcome("error", None, str(exc))
    finally:
        with _sigint_deferred():
            state("stopping")
            _cleanup(exp, host, started, folder, host_dir, result)
            state("collecting")
            _conclude(exp, result, outcome, folder)
            outputs.write_json(folder / outputs.STATUS, {**dataclasses.asdict(result), "state": "done",
                                                        "kit_version": __version__})
    return result


def run_tag(exp: params.Experiment, run_dir: Path, run_id: str) -> str:
    """The value of LAUNCHLAB_RUN_ID for a run: experiment/run-directory/run-id."""
    return f"{exp.experiment}/{Path(run_dir).name}/{run_id}"


def leftovers(host: Host) -> list[dict]:
    """Process groups on the host that a launchlab run started and nobody stopped: [{pgid, pids, run}]."""
    out = host.run(commands.find_tagged(RUN_ID_ENV), timeout=60, check=False).stdout
    groups: dict[int, dict] = {}
    for line in out.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
            continue
        pid, pgid, run = int(parts[0]), int(parts[1]), parts[2]
        groups.setdefault(pgid, {"pgid": pgid, "pids": [], "run": run})["pids"].append(pid)
    return list(groups.values())


def _host_dir(host: Host, exp: params.Experiment, run_dir: Path, run_id: str) -> str:
    """Where the run's raw files are written on the host before they are collected."""
    return f"{host.workdir}/{exp.experiment}/{run_dir.name}/{run_id}"


def stop_recorded(exp: params.Experiment, run: Run, run_dir: Path, host: Host) -> None:
    """Stop every process group a run recorded (used when its notebook cannot be trusted to do it)."""
    try:
        recorded = outputs.read_json(outputs.run_folder(run_dir, run.run_id) / outputs.PROCESSES)
    except LaunchlabError:
        return
    for p in recorded:
        try:
            host.kill_group(p["pgid"], exp.server.stop_grace_s)
        except LaunchlabError:
            pass  # recover() tries again and records what failed


def recover(exp: params.Experiment, run: Run, run_dir: Path, host: Host, message: str) -> RunResult:
    """Finish a run whose kernel died or was killed: stop every process group it recorded, collect its files
    and write its status as `error` with the reason. Safe to call on a run that already finished."""
    folder = outputs.run_folder(run_dir, run.run_id)
    result = RunResult(run.run_id, run.variant.name, run.repetition, host.name, dict(run.variant.levels),
                       simulated=host.simulated)
    try:
        status = outputs.read_json(folder / outputs.STATUS)
    except LaunchlabError:
        status = {}
    result.server_started_at = status.get("server_started_at")
    try:
        recorded = outputs.read_json(folder / outputs.PROCESSES)
    except LaunchlabError:
        recorded = []
    refs = [ProcessRef(p["role"], p["pid"], p["pgid"]) for p in recorded]
    host_dir = _host_dir(host, exp, run_dir, run.run_id)
    with _sigint_deferred():
        # a run whose notebook finished already collected its files (and removed them from the host)
        _cleanup(exp, host, refs, folder, host_dir, result, collect=status.get("state") != "done")
        _conclude(exp, result, _Outcome("error", None, message), folder)
        outputs.write_json(folder / outputs.STATUS, {**dataclasses.asdict(result), "state": "done",
                                                    "kit_version": __version__})
    return result


def _preflight(host: Host) -> dict:
    """GPU memory in use and compute processes before launch: evidence of a dirty start, kept with the run."""
    gpus = telemetry.parse_snapshot(host.run(telemetry.snapshot_command(), timeout=60).stdout)
    apps = telemetry.parse_apps(host.run(telemetry.apps_command(), timeout=60).stdout)
    return {"gpus": [dataclasses.asdict(g) for g in gpus], "compute_apps": apps}


def _write_provenance(folder: Path, exp: params.Experiment, host: Host, launch: params.LaunchSpec,
                      preflight: dict) -> None:
    facts = provenance.host_facts(host)
    outputs.write_json(folder / outputs.PROVENANCE, {
        "kit_version": __version__,
        "host": host.name,
        "transport": host.transport,
        "simulated": host.simulated,
        "hostname": facts["hostname"],
        "host_facts": facts,
        "interpreter": provenance.interpreter_facts(host, launch.argv),
        "server_kind": exp.server.kind,
        "argv": list(launch.argv),
        "env": masked_env(launch.env),
        "health_url": launch.health_url,
        "preflight": preflight,
    })


def _write_processes(folder: Path, host: Host, refs: list[ProcessRef], stopped: dict[int, str] | None = None) -> None:
    outputs.write_json(folder / outputs.PROCESSES, [
        {"role": r.role, "pid": r.pid, "pgid": r.pgid, "host": host.name, "stopped_with": (stopped or {}).get(r.pgid)}
        for r in refs
    ])


class _Mirror:
    """Follows a growing file on the host: returns its new complete lines and appends every new byte to a
    local copy, so what was seen survives a host or connection that goes away mid-run."""

    def __init__(self, host: Host, remote: str, local: Path):
        self.host, self.remote, self.local, self.offset, self.partial = host, remote, local, 0, ""
        local.write_bytes(b"")

    def new_lines(self) -> list[str]:
        chunk = self.host.read_bytes(self.remote, self.offset)
        if not chunk:
            return []
        self.offset += len(chunk)
        with open(self.local, "ab") as fh:
            fh.write(chunk)
        text = self.partial + chunk.decode("utf-8", errors="replace")
        lines = re.split(r"[\r\n]", text)
        self.partial = lines.pop()
        return lines


def _watch(host: Host, server: ProcessRef, host_dir: str, folder: Path, rules: logparse.ReadyRules,
           health_url: str | None, deadline: float, t_launch: float) -> _Outcome:
    """Poll until ready, failed (fatal line or exit) or the deadline. Ready means: alive, the ready line seen
    (when the kind has one) and the health URL answering 200 (when one is given)."""
    ready_rx = re.compile(rules.ready_pattern) if rules.ready_pattern else None
    fatal_rx = re.compile("|".join(f"(?:{p})" for p in rules.fatal_patterns)) if rules.fatal_patterns else None
    log = _Mirror(host, f"{host_dir}/{outputs.SERVER_LOG}", folder / outputs.SERVER_LOG)
    samples = _Mirror(host, f"{host_dir}/{outputs.TELEMETRY_CSV}", folder / outputs.TELEMETRY_CSV)
    ready_line = ready_rx is None
    fatal_line, fatal_at = None, None
    polls = 0
    while True:
        for line in log.new_lines():
            if ready_rx is not None and ready_rx.search(line):
                ready_line = True
            if fatal_line is None and fatal_rx is not None and fatal_rx.search(line):
                fatal_line, fatal_at = line.strip(), time.monotonic()
        polls += 1
        if polls % 5 == 0:
            samples.new_lines()
        alive = host.group_alive(server.pgid)
        if fatal_line is not None and (not alive or time.monotonic() - fatal_at > FATAL_GRACE_S):
            return _Outcome("failed", None, fatal_line)
        if not alive:
            log.new_lines()
            return _Outcome("failed", "process_exited", "the server exited before it was ready")
        if fatal_line is None and ready_line and (health_url is None or host.http_status(health_url) == 200):
            return _Outcome("ready", None, "", time.monotonic() - t_launch)
        if time.monotonic() > deadline:
            return _Outcome("timeout", None, f"not ready after {deadline - t_launch:.0f} s")
        time.sleep(POLL_S)


def _cleanup(exp: params.Experiment, host: Host, started: list[ProcessRef], folder: Path, host_dir: str,
             result: RunResult, collect: bool = True) -> None:
    """Stop the server, wait for the GPUs to drain, stop the sampler, fetch the raw files. Every step runs
    even when an earlier one failed; failures become notes on the run."""
    stopped: dict[int, str] = {}
    for ref in [r for r in started if r.role != "sampler"] + [r for r in started if r.role == "sampler"]:
        if ref.role == "sampler":
            _drain(exp, host, folder, result)
        try:
            stopped[ref.pgid] = host.kill_group(ref.pgid, exp.server.stop_grace_s)
            if ref.role == "server":
                result.stopped_with = stopped[ref.pgid]
        except LaunchlabError as exc:
            result.notes.append(f"stopping the {ref.role} failed: {exc}")
    if started:
        _write_processes(folder, host, started, stopped)
    if not collect:
        return
    collected = 0
    for name in (outputs.SERVER_LOG, outputs.TELEMETRY_CSV):
        partial = folder / f".{name}.fetching"
        try:
            host.fetch(f"{host_dir}/{name}", str(partial))
            partial.replace(folder / name)  # only a complete copy replaces what was mirrored during the run
            collected += 1
        except (OSError, LaunchlabError) as exc:
            partial.unlink(missing_ok=True)
            kept = " (the part seen during the run is kept)" if (folder / name).exists() else ""
            result.notes.append(f"could not collect {name}{kept}: {exc}")
    if collected == 2:
        try:
            host.remove_dir(host_dir)
        except LaunchlabError as exc:
            result.notes.append(f"could not remove the run folder on the host: {exc}")


def _drain(exp: params.Experiment, host: Host, folder: Path, result: RunResult) -> None:
    """Wait (bounded) until every GPU's memory.used is back near its preflight value."""
    try:
        before = {g["index"]: g["mem_used_mib"] for g in outputs.read_json(folder / outputs.PROVENANCE)["preflight"]["gpus"]}
    except LaunchlabError:
        return
    tic = time.monotonic()
    while True:
        try:
            now = {g.index: g.mem_used_mib for g in telemetry.parse_snapshot(
                host.run(telemetry.snapshot_command(), timeout=30).stdout)}
        except HostError as exc:
            result.notes.append(f"drain check failed: {exc}")
            return
        over = {i: now[i] - before.get(i, 0) for i in now if now[i] - before.get(i, 0) > exp.drain.tolerance_mib}
        if not over:
            result.drained, result.drain_s = True, round(time.monotonic() - tic, 2)
            return
        if time.monotonic() - tic > exp.drain.timeout_s:
            result.drained, result.drain_s = False, round(time.monotonic() - tic, 2)
            result.notes.append("GPU memory did not return to its preflight level within "
                                f"{exp.drain.timeout_s:.0f} s: " + ", ".join(f"GPU {i} +{v:.0f} MiB" for i, v in over.items()))
            return
        time.sleep(0.25)


def _conclude(exp: params.Experiment, result: RunResult, outcome: _Outcome | None, folder: Path) -> None:
    """Status, failure and figures from the outcome and the collected files."""
    parsed = None
    if (folder / outputs.SERVER_LOG).exists():
        try:
            rules = logparse.rules_for(exp.server.kind, exp.server.ready.log_pattern,
                                       tuple(exp.server.ready.fatal_patterns))
            parsed = logparse.parse_file(folder / outputs.SERVER_LOG, exp.server.kind, rules)
            outputs.write_json(folder / outputs.PARSED, parsed.to_json())
            result.phase_reached = parsed.phase_reached
        except LaunchlabError as exc:
            result.notes.append(f"parsing the server log failed: {exc}")
    if (folder / outputs.TELEMETRY_CSV).exists():
        frame = telemetry.read_query_csv(folder / outputs.TELEMETRY_CSV)
        if "memory.used" in frame and frame["memory.used"].notna().any():
            result.peak_mem_used_mib = float(frame["memory.used"].max())
    if outcome is None:
        result.status, result.failure_message = "error", "the run stopped before the server was watched"
        return
    result.status = outcome.status
    if outcome.status == "ready":
        result.startup_s = round(outcome.ready_after_s, 2)
    elif outcome.status == "failed":
        if parsed is not None and parsed.failure is not None:
            result.failure_reason = parsed.failure.reason
            result.failure_phase = parsed.failure.phase
            result.failure_message = parsed.failure.message
        else:
            result.failure_reason = outcome.reason or "exception"
            result.failure_phase = parsed.phase_reached if parsed else None
            result.failure_message = outcome.message
    else:
        result.failure_message = outcome.message
        if parsed is not None and outcome.status == "timeout":
            result.failure_phase = parsed.phase_reached


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Hold Ctrl-C while cleaning up, so a second press cannot leave a server running; re-raise after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pressed: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: pressed.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        raise KeyboardInterrupt


def started_at(result: RunResult) -> datetime | None:
    return datetime.fromisoformat(result.server_started_at[:26]) if result.server_started_at else None


def summary_table(result: RunResult) -> pd.DataFrame:
    """The run's result as a two-column table for a notebook."""
    rows = {k: v for k, v in dataclasses.asdict(result).items() if v not in (None, [], {})}
    return pd.DataFrame({"value": [str(v) for v in rows.values()]}, index=list(rows))


def rank_table(run_dir: str | Path, run_id: str) -> pd.DataFrame:
    """Per-rank fields parsed from a run's server log (one row per TP rank)."""
    parsed = outputs.read_json(outputs.run_folder(Path(run_dir), run_id) / outputs.PARSED)
    return pd.DataFrame.from_dict(parsed["ranks"], orient="index").rename_axis("rank")


def log_tail(run_dir: str | Path, run_id: str, lines: int = 15) -> str:
    path = outputs.run_folder(Path(run_dir), run_id) / outputs.SERVER_LOG
    if not path.exists():
        return "(no server log was collected)"
    with open(path, "rb") as fh:
        fh.seek(max(0, path.stat().st_size - 64 * 1024))
        return "\n".join(fh.read().decode("utf-8", errors="replace").splitlines()[-lines:])
