"""Runs a plan: papermill executes run_variant.ipynb once per run, then summary.ipynb, then the HTML export.

The batch validates everything and reaches the host before anything is launched. After each run it checks
the kit's own status.json (papermill's view can say "success" for a kernel that died) and stops any process
group the run left behind, which is also what happens when the user presses Ctrl-C mid-run.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import papermill

from launchlab import __version__, export, frames, hosts, lifecycle, locks, masking, outputs, params, patching
from launchlab import report as report_md
from launchlab.errors import HostError, LaunchlabError, NotebookFailed, ParamsError, RunDirError
from launchlab.hosts import commands, sim
from launchlab.plan import Run, make_plan

NOTEBOOKS_ENV = "LAUNCHLAB_NOTEBOOKS"
Say = Callable[[str], None]
Confirm = Callable[[str], bool]  # asks the user a yes/no question (the CLI: on its terminal)


def notebooks_dir() -> Path:
    if os.environ.get(NOTEBOOKS_ENV):
        return Path(os.environ[NOTEBOOKS_ENV])
    here = Path(__file__).resolve().parents[2] / "notebooks"  # lib/launchlab/batch.py → checkout root
    if (here / "run_variant.ipynb").is_file():
        return here
    raise RunDirError(f"cannot find the notebooks folder (looked in {here}); set {NOTEBOOKS_ENV}")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def planned(params_path: str | Path, only: tuple[str, ...] = (), repetitions: int | None = None
            ) -> tuple[params.Experiment, list[Run]]:
    """The experiment and its plan, optionally with other repetitions and only some variants: `only` holds
    levels (`0.85`), factor=level pairs (`mem_fraction=0.85`) or variant names; a run is kept when each of
    its factors that `only` mentions is at one of the levels given."""
    exp = params.load(params_path)
    if repetitions is not None:
        exp = exp.model_copy(update={"repetitions": repetitions})
    plan = make_plan(exp)
    if not only:
        return exp, plan
    wanted: dict[str, set[str]] = {}
    for token in only:
        factor, _, level = token.partition("=") if "=" in token else ("", "", token)
        matches = [(f, lv) for f, levels in exp.factors.items() for lv in levels
                   if lv == level and (not factor or f == factor)]
        variants = [v for v in params.expand(exp) if token in (v.name, v.slug)]
        for v in variants:
            for f, lv in v.levels.items():
                wanted.setdefault(f, set()).add(lv)
        if not matches and not variants:
            known = ", ".join(f"{f}={lv}" for f, levels in exp.factors.items() for lv in levels)
            raise ParamsError(str(params_path), [f"--only {token}: no such level or variant (levels: {known})"])
        for f, lv in matches:
            wanted.setdefault(f, set()).add(lv)
    return exp, [r for r in plan if all(r.variant.levels.get(f) in lvs for f, lvs in wanted.items())]


def dry_run(params_path: str | Path, only: tuple[str, ...] = (), repetitions: int | None = None) -> str:
    """The plan as text: every run in order, and each variant's exact command and environment (secrets
    masked). Nothing is connected to or launched."""
    exp, plan = planned(params_path, only, repetitions)
    masker = masking.for_experiment(exp)
    extra = exp.secrets
    lines = [f"{exp.experiment}: {len(plan)} runs, interleaved, on host(s) {', '.join(exp.host_names)}"
             f"{' (SIMULATED)' if exp.simulated else ''} — nothing is launched (--dry-run)", ""]
    lines += [f"  [{r.seq}] {r.run_id}  host {r.host}" for r in plan]
    for variant in {r.variant.name: r.variant for r in plan}.values():
        launch = params.render(exp, variant, port=0, run_id="RUN_ID", host=exp.host_name)
        lines += ["", f"{variant.name}:", "  argv: " + shlex.join(masker.argv(launch.argv, extra))]
        lines += [f"  env:  {k}={v}" for k, v in masker.env(launch.env, extra).items()]
        lines += [f"  patch: {p}" for p in variant.patches]
    lines += ["", "({port} is chosen per run; shown as 0)"]
    return "\n".join(lines)


def run_batch(params_path: str | Path, out_root: Path | None = None, resume: Path | None = None,
              say: Say = _stderr, stop_leftovers: bool = False, wait: bool = False, only: tuple[str, ...] = (),
              repetitions: int | None = None, confirm: Confirm | None = None) -> Path:
    """Run every planned run of a params file; return the run directory.

    Before anything is launched: every host answers, the run directory exists, this batch holds the lock of
    every GPU it will use on every host (waiting for another batch with `wait`, else refusing and naming it),
    no process of a dead batch is left on them (one found is stopped with `stop_leftovers`, or when `confirm`
    says yes; else the batch refuses), and every patch applies. A simulated host is a box of this batch's own,
    removed at the end; every host the batch opened is closed at the end."""
    exp, plan = planned(params_path, only, repetitions)
    box = sim.new_box() if any(exp.hosts[h].transport == "sim" for h in exp.host_names) else None
    opened = contextlib.ExitStack()  # closes every host opened below (an SSH connection) when the batch ends
    try:
        connected = {name: opened.enter_context(contextlib.closing(hosts.connect(exp, name, sim_box=box)))
                     for name in exp.host_names}
        for host in connected.values():
            _check_reachable(host, exp.sampler.kind)
        fresh = [p for p in _new_folders(exp, out_root) if not p.exists()] if resume is None else []
        run_dir, _ = _open_run_dir(exp, plan, params_path, out_root, resume, box)
        owner = locks.Owner.me(exp.experiment, str(run_dir))
        outputs.update_json(run_dir / outputs.MANIFEST, {"batch": owner.batch, "sim_box": str(box) if box else None})
        try:
            held = _lock_hosts(exp, connected, owner, wait, say)
        except BaseException:
            _discard(run_dir if resume is None else None, fresh)
            raise
        with locks.Heartbeat(held):
            try:
                for host in connected.values():
                    _handle_leftovers(host, stop_leftovers, say, owner.batch, confirm)
                _check_patches(exp, connected)
            except BaseException:
                _discard(run_dir if resume is None else None, fresh)
                raise
            say(f"launchlab: {exp.experiment}: {len(plan)} runs on host(s) {', '.join(repr(h) for h in connected)}"
                f"{' (SIMULATED)' if exp.simulated else ''} → {run_dir}")
            todo = []
            for run in plan:
                if resume and _finished(outputs.run_folder(run_dir, run.run_id)):
                    say(f"[{run.seq}/{len(plan)}] {run.run_id}  already done, skipped")
                else:
                    todo.append(run)
            try:
                _run_all(exp, todo, run_dir, connected, len(plan), say, Path(params_path).resolve())
            except KeyboardInterrupt:
                say(f"launchlab: interrupted; every process the current run started was stopped. Continue with "
                    f"`launchlab run {shlex.quote(str(params_path))} --resume {shlex.quote(str(run_dir))}`"
                    + "".join(f" --only {shlex.quote(t)}" for t in only)
                    + (f" --repetitions {repetitions}" if repetitions is not None else ""))
                raise
    finally:
        opened.close()
        if box is not None:
            shutil.rmtree(box, ignore_errors=True)
            with contextlib.suppress(OSError):
                box.parent.rmdir()  # the boxes' folder, when no other batch has one there
    report(run_dir, say)
    return run_dir


def _new_folders(exp: params.Experiment, out_root: Path | None) -> list[Path]:
    """The folders a new run directory may create above itself: the outputs root and the experiment's."""
    root = (Path(out_root) if out_root else outputs.default_root()).resolve()
    return [root / exp.experiment, root]


def _discard(run_dir: Path | None, fresh: list[Path]) -> None:
    """Nothing was launched: remove the run directory made for it, and the folders made for that."""
    if run_dir is None:
        return
    shutil.rmtree(run_dir, ignore_errors=True)
    for folder in fresh:  # deepest first; only if empty
        with contextlib.suppress(OSError):
            folder.rmdir()


def _check_reachable(host, sampler: str) -> None:
    """The host answers, and has what the sampler needs (said before anything is launched)."""
    try:
        host.run(commands.answer(), timeout=30)
    except HostError as exc:
        raise HostError(host.name, f"cannot run commands on the host, nothing was launched: {exc}") from None
    if sampler == "none":
        return
    found = host.run(commands.which("nvidia-smi"), timeout=30, check=False)
    if found.exit_code != 0:
        path = host.run(commands.env_value("PATH"), timeout=30, check=False).stdout.strip()
        raise HostError(host.name, f"nvidia-smi not found on PATH={path} (the PATH of a non-interactive shell "
                                   "there); nothing was launched. Install the NVIDIA driver utilities, make "
                                   "nvidia-smi reachable for non-interactive shells, or set `sampler: {kind: none}` "
                                   "to run without a GPU trace")


def _lock_hosts(exp: params.Experiment, connected: dict, owner: locks.Owner, wait: bool, say: Say) -> list:
    """The lock of every GPU the batch uses on each host (all of a host's GPUs, or its slots' GPUs)."""
    held: list[locks.HostLock] = []
    try:
        for name, host in connected.items():
            lock = locks.HostLock(host, locks.gpu_lock_names(host, exp.hosts[name].gpu_slots), owner,
                                  locks.lock_dir(host))
            lock.acquire(wait, say)
            held.append(lock)
    except BaseException:
        for lock in held:
            lock.release()
        raise
    return held


def _run_all(exp: params.Experiment, runs: list[Run], run_dir: Path, connected: dict, total: int, say: Say,
             params_file: Path) -> None:
    """One worker thread per host, each running its host's runs in plan order: hosts proceed in parallel, and
    a slow or failing host does not hold the others up. Ctrl-C (which only the main thread sees) stops the
    servers of the runs in flight, lets their notebooks finish, and marks those runs interrupted."""
    lock = threading.Lock()
    in_flight: dict[tuple[str, int], Run] = {}
    stop = threading.Event()
    broken: list[str] = []  # kit errors that stop the batch (a full disk): no further run is started
    # One worker per host, or per GPU slot of a host that has `gpu_slots`: the slots of a host take that
    # host's runs in plan order, one each at a time. A multi-node run belongs to the worker of its node 0.
    queues = {name: [r for r in runs if r.host == name] for name in dict.fromkeys(r.host for r in runs)}
    slots = {name: exp.hosts[name].gpu_slots or [None] for name in queues}
    finished = {(name, i): threading.Event() for name in queues for i in range(len(slots[name]))}

    def next_run(name: str) -> Run | None:
        with lock:
            return queues[name].pop(0) if queues[name] and not stop.is_set() else None

    def worker(name: str, slot: int) -> None:
        gpus = slots[name][slot]
        try:
            while (run := next_run(name)) is not None:
                with lock:
                    in_flight[(name, slot)] = run
                try:
                    _run_notebook(exp, run, run_dir, connected, total, say, params_file, gpus)
                except (LaunchlabError, OSError) as exc:
                    say(f"[{run.seq}/{total}] {run.run_id}  kit error: {exc}")
                    with lock:
                        broken.append(f"{run.run_id}: {exc}")
                    stop.set()
                finally:
                    with lock:
                        in_flight.pop((name, slot), None)
        finally:
            finished[(name, slot)].set()

    def wait_all() -> None:
        # Polling with sleep, not Thread.join: a join interrupted by Ctrl-C can make the next join return
        # while the thread still runs (CPython < 3.13), and the interrupted runs must be waited for.
        while not all(e.is_set() for e in finished.values()):
            time.sleep(0.2)

    for name, slot in finished:
        threading.Thread(target=worker, args=(name, slot), name=f"host-{name}-{slot}", daemon=True).start()
    try:
        wait_all()
    except KeyboardInterrupt:
        stop.set()
        with lock:
            current = dict(in_flight)
        for run in current.values():
            say(f"[{run.seq}/{total}] {run.run_id}  interrupted: stopping what the run started")
            lifecycle.stop_recorded(exp, run, run_dir, connected)
        wait_all()  # the notebooks end quickly once their servers are gone
        for run in current.values():
            lifecycle.recover(exp, run, run_dir, connected, "interrupted by the user (Ctrl-C); the server was stopped")
        raise
    if broken:
        raise RunDirError("the batch stopped: " + "; ".join(broken) + ". Every run that had started was stopped; "
                          "once the cause is fixed, `launchlab run PARAMS --resume RUN_DIR` repeats what did not finish")


def ensure_run_dir(params_path: str | Path, run_dir: str | Path = "") -> Path:
    """The run directory a single run notebook writes into: the given one, or a new one for its params."""
    if run_dir:
        return outputs.check_run_dir(Path(run_dir))
    exp = params.load(params_path)
    return _open_run_dir(exp, make_plan(exp), params_path, None, None)[0]


def _check_patches(exp: params.Experiment, connected: dict) -> None:
    """Every patch of every variant must apply on every host before anything is launched."""
    for variant in params.expand(exp):
        if not variant.patches:
            continue
        for host in connected.values():
            argv = params.render(exp, variant, port=0, run_id="check", host=host.name).argv
            patching.check(host, argv, variant.patches, f"{host.workdir}/.patch-check")


def _handle_leftovers(host, stop: bool, say: Say, batch: str, confirm: Confirm | None) -> None:
    """Processes an earlier run left on the host (its batch lost the host, or died) would skew this
    experiment's memory figures: stop them when told to (`stop`) or when `confirm` says yes, otherwise refuse
    to launch and say how. Only this user's processes of batches that no live lock accounts for are leftovers."""
    left = lifecycle.leftovers(host, locks.live_batches(locks.holders(host)) | {batch})
    if not left:
        return
    listing = "; ".join(f"pgid {g['pgid']} (pids {', '.join(map(str, g['pids']))}) from run {g['run']} of a batch "
                        "that is no longer running" for g in left)
    if not stop and confirm is not None:
        stop = confirm(f"launchlab: host {host.name!r} still runs processes of earlier runs: {listing}. Stop them? [y/N] ")
    if not stop:
        raise HostError(host.name, f"processes of earlier launchlab runs are still running there: {listing}. "
                                   "Nothing was launched. Stop them with `launchlab run PARAMS --stop-leftovers`, "
                                   "or by hand with kill -TERM -- -PGID.")
    for group in left:
        signal = host.kill_group(group["pgid"], 10)
        say(f"launchlab: stopped leftover process group {group['pgid']} of run {group['run']} ({signal})")


def _open_run_dir(exp: params.Experiment, plan: list[Run], params_path, out_root, resume,
                  box: Path | None = None) -> tuple[Path, bool]:
    """The run directory (absolute) and whether this call created it."""
    if resume is not None:
        run_dir = outputs.check_run_dir(Path(resume)).resolve()
        manifest = outputs.read_json(run_dir / outputs.MANIFEST)
        if manifest["run_ids"] != [r.run_id for r in plan] or manifest["experiment"] != exp.experiment:
            raise RunDirError(f"{run_dir} was made from a different plan than {params_path}; "
                              "resume it with the params it was run with")
        return run_dir, False
    run_dir = outputs.new_run_dir(Path(out_root) if out_root else outputs.default_root(), exp.experiment).resolve()
    outputs.write_text(run_dir / outputs.EXPERIMENT_FILE, params.dump_resolved(exp, masked=True))
    outputs.write_json(run_dir / outputs.MANIFEST, {
        "experiment": exp.experiment,
        "question": exp.question,
        "params_file": str(Path(params_path).resolve()),
        "params_sha256": params.digest(params_path),
        "created_at": datetime.now().isoformat(timespec="seconds"),
        "kit_version": __version__,
        "simulated": exp.simulated,
        "host": exp.host_name,
        "hosts": exp.host_names,
        "factors": {f: list(levels) for f, levels in exp.factors.items()},
        "baseline": params.baseline_variant(exp).name,
        "order": "interleaved",
        "run_ids": [r.run_id for r in plan],
        "runs": [{"run_id": r.run_id, "seq": r.seq, "variant": r.variant.name, "levels": r.variant.levels,
                  "repetition": r.repetition, "host": r.host} for r in plan],
        "batch": None,  # the batch running it now: its lock owner id and simulated box (run_batch fills them)
        "sim_box": str(box) if box else None,
    })
    return run_dir, True


def _finished(folder: Path) -> bool:
    try:
        status = outputs.read_json(folder / outputs.STATUS)
    except RunDirError:
        return False
    return status.get("state") == "done" and status.get("status") != "error"


class _Progress(threading.Thread):
    """Prints a line whenever the run's state changes (from the status.json the lifecycle keeps current)."""

    def __init__(self, label: str, folder: Path, say: Say):
        super().__init__(daemon=True)
        self.label, self.folder, self.say = label, folder, say
        self.stop_event = threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        last = None
        while not self.stop_event.wait(0.5):
            try:
                state = outputs.read_json(self.folder / outputs.STATUS).get("state")
            except RunDirError:
                state = "kernel starting"
            if state != last and state != "done":
                self.say(f"{self.label}  {state}  {time.monotonic() - self.t0:.1f} s")
                last = state


def _papermill(template: str, output: Path, parameters: dict) -> None:
    """papermill with the project's kernel; the kernel's own log (a TCP-transport warning per start) is
    silenced so the progress lines stay readable. Cell errors still land in the executed notebook."""
    papermill.execute_notebook(str(notebooks_dir() / template), str(output), parameters=parameters,
                               kernel_name="python3", progress_bar=False, cwd=str(notebooks_dir()),
                               extra_arguments=["--IPKernelApp.log_level=CRITICAL"])


def _run_notebook(exp: params.Experiment, run: Run, run_dir: Path, hosts: dict, total: int, say: Say,
                  params_file: Path, gpus: list[int] | None = None) -> None:
    folder = outputs.run_folder(run_dir, run.run_id)
    folder.mkdir(parents=True, exist_ok=True)
    outputs.archive_attempt(folder)  # a repeated run (--resume) keeps the earlier attempt's raw files
    label = f"[{run.seq}/{total}] {run.run_id}" + (f" (GPUs {','.join(map(str, gpus))})" if gpus else "")
    progress = _Progress(label, folder, say)
    progress.start()
    problem = None
    try:
        _papermill("run_variant.ipynb", folder / outputs.RUN_NOTEBOOK,
                 # the user's params file, not the run directory's experiment.yaml: that record has its secrets
                 # masked, and the server needs the real values (the digest proves the file is unchanged)
                 {"experiment": str(params_file), "run_id": run.run_id, "run_dir": str(run_dir),
                  "gpus": ",".join(str(g) for g in gpus) if gpus else "",
                  "params_sha256": params.digest(params_file)})
    except Exception as exc:  # noqa: BLE001 - any notebook failure becomes this run's error, the batch goes on
        problem = f"the run notebook failed: {_notebook_error(exc)}"
    finally:
        progress.stop_event.set()
    if not _done(folder) or problem:
        lifecycle.recover(exp, run, run_dir, hosts, problem or "the run notebook ended without a final status")
    status = outputs.read_json(folder / outputs.STATUS)
    why = f" ({status['failure_reason']})" if status.get("failure_reason") else ""
    say(f"{label}  {status['status']}{why}  {time.monotonic() - progress.t0:.1f} s")


def _notebook_error(exc: Exception) -> str:
    """What went wrong in a notebook, the exception first: papermill's message is the whole traceback, whose
    last line (the exception) is what a reader needs."""
    if isinstance(exc, papermill.PapermillExecutionError):
        return f"{exc.ename}: {exc.evalue}"[:2000]
    return f"{type(exc).__name__}: {str(exc).strip()}"[:2000]


def _done(folder: Path) -> bool:
    try:
        return outputs.read_json(folder / outputs.STATUS).get("state") == "done"
    except RunDirError:
        return False


def _verdict_line(verdict: dict) -> str:
    """The verdict in one line, inconclusive first."""
    if not verdict["conclusive"]:
        return f"INCONCLUSIVE: {verdict['inconclusive_reasons'][0]}"
    control = "controlled" if verdict["controlled"] else "NOT controlled"
    decides = ", ".join(verdict["outcome_factors"]) or "no factor"
    return f"{control}; decides the launch: {decides}"


def report(run_dir: Path, say: Say = _stderr) -> Path:
    """Rebuild the frames from the raw files, execute summary.ipynb and export summary.html."""
    run_dir = outputs.check_run_dir(run_dir)
    exp = params.load(run_dir / outputs.EXPERIMENT_FILE)
    frames.write(run_dir, frames.build(run_dir, exp))
    verdict = report_md.write(run_dir)
    say(f"launchlab: frames, verdict.json and report.md written ({_verdict_line(verdict)}); rendering the summary")
    nb = run_dir / outputs.SUMMARY_NOTEBOOK
    try:
        _papermill("summary.ipynb", nb, {"run_dir": str(run_dir)})
    except papermill.PapermillExecutionError as exc:
        raise NotebookFailed(str(nb), f"{exc.ename}: {exc.evalue} (open the notebook to see the failing cell)") from None
    html = export.notebook_to_html(nb, run_dir / outputs.SUMMARY_HTML)
    return html
