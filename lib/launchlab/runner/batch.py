"""A batch: the plan of a params file run on its hosts — one notebook per run (notebooks.py), hosts in
parallel — then the summary.

The batch validates everything, reaches every host, takes their locks and checks for leftovers and stale
patches before anything is launched. After each run it checks the kit's own status.json (papermill's view can
say "success" for a kernel that died) and recovers a run whose notebook did not finish, which is also what
happens to the runs in flight when the user presses Ctrl-C or the batch gets SIGTERM or SIGHUP.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import shutil
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from launchlab import __version__, hosts, interrupts, params
from launchlab.errors import HostError, LaunchlabError, RunDirError
from launchlab.fields import MAX_GPUS
from launchlab.hosts import commands, locks, patching, sim
from launchlab.run import recovery
from launchlab.runner import kernels, liveprogress, notebooks, searchbatch
from launchlab.runner import plan as plans
from launchlab.runner.plan import make_plan
from launchlab.store import finding, records, rundir
from launchlab.store.manifest import Manifest, ManifestSearch
from launchlab.store.records import Run

Say = notebooks.Say
Confirm = Callable[[str], bool]  # asks the user a yes/no question (the CLI: on its terminal)


def run_batch(params_path: str | Path, out_root: Path | None = None, resume: Path | None = None,
              say: Say = notebooks.stderr, *, stop_leftovers: bool = False, wait: bool = False, only: tuple[str, ...] = (),
              repetitions: int | None = None, confirm: Confirm | None = None, html: bool = True) -> Path:
    """Run every planned run of a params file; return the run directory (with its summary.html, unless html is
    False: then verdict.json and report.md only).

    Before anything is launched: every host answers, the run directory exists, this batch holds the lock of
    every GPU it will use on every host (waiting for another batch with `wait`, else refusing and naming it),
    no process of a dead batch is left on them (one found is stopped with `stop_leftovers`, or when `confirm`
    says yes; else the batch refuses), and every patch applies. A simulated host is a box of this batch's own,
    removed at the end; every host the batch opened is closed at the end. SIGTERM and SIGHUP stop the batch as
    Ctrl-C does (interrupts.py)."""
    with interrupts.terminations_interrupt():
        exp, plan = plans.planned(params_path, only, repetitions)
        # the batch's kernels (runs, summary) are forked from one server, whose imports overlap the checks below
        server = kernels.fork_server(notebooks.notebooks_dir())
        try:
            # what --resume must repeat of this command, should the batch be interrupted
            again = (*(("--only", *only) if only else ()), *(("--repetitions", str(repetitions)) if repetitions else ()),
                     *(("--wait",) if wait else ()), *(() if html else ("--no-html",)))
            run_dir = _run_batch(exp, plan, params_path, out_root, resume=resume, say=say, stop_leftovers=stop_leftovers,
                                 wait=wait, again=again, confirm=confirm, server=server)
            notebooks.summarize(run_dir, say, html, server)
        finally:
            server.close()
        return run_dir


def _run_plan(exp: params.Experiment, plan: list[Run], run_all: Callable, *, run_dir: Path, resume: Path | None,
              total: int, say: Say) -> None:
    """The runs still to do: a search's warm-ups first, then its rounds of probes; otherwise the plan in order."""
    if exp.search is not None:
        warmups = [r for r in plan if r.warmup]
        run_all(exp, _to_do(warmups, run_dir, resume=resume, total=total, say=say), total=total)
        searchbatch.run_search(exp, run_dir, say, lambda runs, total: run_all(exp, runs, total=total))
    else:
        run_all(exp, _to_do(plan, run_dir, resume=resume, total=total, say=say), total=total)


def _run_batch(exp: params.Experiment, plan: list[Run], params_path: str | Path, out_root: Path | None,
               *, resume: Path | None, say: Say, stop_leftovers: bool, wait: bool, again: tuple[str, ...],
               confirm: Confirm | None, server: kernels.ForkServer) -> Path:
    """The batch up to its summary: hosts, run directory, locks, leftovers, patches, the runs (run_batch)."""
    box = sim.new_box() if any(exp.hosts[h].simulated for h in exp.host_names) else None
    opened = contextlib.ExitStack()  # closes every host opened below (an SSH connection) when the batch ends
    try:
        connected = _connect(exp, opened, box)
        fresh = [p for p in _new_folders(exp, out_root) if not p.exists()] if resume is None else []
        run_dir, _ = _open_run_dir(exp, plan, params_path, out_root, resume=resume, box=box)
        owner = locks.Owner.me(exp.experiment, str(run_dir))
        rundir.RunDir(run_dir).update_manifest(batch=owner.batch, sim_box=str(box) if box else None)
        with _discarded_on_failure(run_dir if resume is None else None, fresh):
            held = _lock_hosts(exp, connected, owner, wait, say=say)
        with locks.Heartbeat(held):
            with _discarded_on_failure(run_dir if resume is None else None, fresh):
                for host in connected.values():
                    _handle_leftovers(host, stop_leftovers, say, owner.batch, confirm=confirm)
                _check_patches(exp, connected)
            total = _announce(exp, plan, connected, run_dir, say=say)
            run_all = functools.partial(_run_all, run_dir=run_dir, connected=connected, say=say, server=server,
                                        params_file=Path(params_path).resolve())
            try:
                _run_plan(exp, plan, run_all, run_dir=run_dir, resume=resume, total=total, say=say)
            except KeyboardInterrupt as exc:
                with contextlib.suppress(OSError, RunDirError):  # the record is a courtesy: the runs' own say it too
                    rundir.RunDir(run_dir).update_manifest(
                        stopped=f"{interrupts.describe(exc)} at {datetime.now().isoformat(timespec='seconds')}")
                say(f"launchlab: {interrupts.describe(exc)}; every process the runs in flight started was stopped "
                    f"by the kit. Continue with `{_resume_command(params_path, run_dir, again)}`")
                exc.told = True  # the CLI says nothing more of it: one line, not two
                raise
    finally:
        opened.close()
        if box is not None:
            shutil.rmtree(box, ignore_errors=True)
            with contextlib.suppress(OSError):
                box.parent.rmdir()  # the boxes' folder, when no other batch has one there
    return run_dir


def _connect(exp: params.Experiment, opened: contextlib.ExitStack, box: Path | None) -> dict:
    """Every host of the batch, connected (`opened` closes them) and checked."""
    connected = {name: opened.enter_context(contextlib.closing(hosts.connect(name, exp.hosts[name], sim_box=box)))
                 for name in exp.host_names}
    for name, host in connected.items():
        _check_reachable(host, exp.sampler.kind)
        _check_gpus(host, getattr(exp.hosts[name], "gpus", None), exp.hosts[name].gpu_slots)
        host.claim_workdir()  # last: it makes the work folder, which a refused batch leaves unmade
    return connected


def _announce(exp: params.Experiment, plan: list[Run], connected: dict, run_dir: Path, *, say: Say) -> int:
    """Say what the batch runs where; the number of compared runs."""
    size = params.plan_size(exp)
    total = len(plans.compared(plan))
    say(f"launchlab: {exp.experiment}: "
        + (f"threshold search over {exp.search.flag}, at most {size.runs} runs" if exp.search else
           f"{total} runs" + (f" after {len(plan) - total} warm-up run(s)" if len(plan) > total else ""))
        + f" on host(s) {', '.join(repr(h) for h in connected)}{' (SIMULATED)' if exp.simulated else ''} "
          f"→ {run_dir}")
    return total


def _to_do(plan: list[Run], run_dir: Path, *, resume: Path | None, total: int, say: Say) -> list[Run]:
    """The planned runs still to run: on --resume, those without a final status (the others are said skipped)."""
    todo = []
    for run in plan:
        if resume and records.finished(rundir.RunDir(run_dir).run(run.run_id)):
            say(f"{notebooks.run_label(run, total)}  already done, skipped")
        else:
            todo.append(run)
    return todo


def _resume_command(params_path: str | Path, run_dir: Path, again: tuple[str, ...]) -> str:
    """The command that continues the batch: its params, the run directory, and the options it was given."""
    return shlex.join(["launchlab", "run", str(params_path), "--resume", str(run_dir), *again])


@contextlib.contextmanager
def _discarded_on_failure(run_dir: Path | None, fresh: list[Path]):
    """Nothing is launched yet: if this step fails (or is interrupted), the run directory made for it goes."""
    try:
        yield
    except BaseException:
        _discard(run_dir, fresh)
        raise


def _new_folders(exp: params.Experiment, out_root: Path | None) -> list[Path]:
    """The folders a new run directory may create above itself: the outputs root and the experiment's."""
    root = (Path(out_root) if out_root else finding.default_root()).resolve()
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
    host.check_launchable(sampler)


def _check_gpus(host, declared: int | None, slots: list[list[int]] | None) -> None:
    """What the host's nvidia-smi lists (read up to commands.SMI_OUTPUT_BYTES) fits the params: no more GPUs than
    its `gpus:` (at most fields.MAX_GPUS without one) — a broken or hostile nvidia-smi listing a million GPUs
    made every snapshot, sample and provenance.json of the batch that large — and every GPU its `gpu_slots` name
    is one it lists (a host whose params give no `gpus:` count, so validation could not tell): else the runs of that
    slot would start on GPUs that are not there and fail one by one. A host whose GPUs cannot be listed (no
    nvidia-smi, a scheduler's nodes) is not checked."""
    listed = host.gpu_indices()
    if not listed:
        return
    most = declared if declared is not None else MAX_GPUS
    if len(listed) > most:  # every line counted: a listing of 200,000 rows that repeat or carry more columns too
        said = f"the {declared} its params declare (`gpus: {declared}`)" if declared is not None else \
            f"the {MAX_GPUS} a host may have"
        raise HostError(host.name, f"nvidia-smi there lists {len(listed)}{'+' if len(listed) > MAX_GPUS else ''} GPUs, "
                                   f"more than {said}; nothing was launched. Give the host's real count in `gpus:`, "
                                   "or check its nvidia-smi (`nvidia-smi --query-gpu=index --format=csv`)")
    for n, slot in enumerate(slots or []):
        if missing := [g for g in slot if g not in listed]:
            raise HostError(host.name, f"gpu_slots[{n}] {slot} names GPU(s) {', '.join(map(str, missing))}, but "
                                       f"nvidia-smi there lists GPU(s) {', '.join(map(str, sorted(set(listed))))}; nothing "
                                       "was launched. Name GPUs the host has in `gpu_slots:`")


def _lock_hosts(exp: params.Experiment, connected: dict, owner: locks.Owner, wait: bool, *, say: Say) -> list:
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


def _run_all(exp: params.Experiment, runs: list[Run], run_dir: Path, connected: dict, *, total: int, say: Say,
             params_file: Path, server: kernels.ForkServer | None = None) -> None:
    """One worker thread per host, each running its host's runs in plan order: hosts proceed in parallel, and
    a slow or failing host does not hold the others up. Ctrl-C (which only the main thread sees) stops the
    servers of the runs in flight, lets their notebooks finish, and marks those runs interrupted."""
    workers = _Workers(exp, runs, run_dir, connected, total=total, say=say, params_file=params_file, server=server)
    workers.start()
    try:
        workers.wait_all()
    except KeyboardInterrupt as exc:
        workers.interrupt(interrupts.describe(exc))
        raise
    if workers.broken:
        then = ("once the cause is fixed, `launchlab run PARAMS --resume RUN_DIR` repeats what did not finish"
                if rundir.RunDir(run_dir).manifest_file.is_file() else
                f"the run directory is gone, so nothing can be resumed: start the batch again with "
                f"`launchlab run {shlex.quote(str(params_file))}`")
        raise RunDirError("the batch stopped: " + "; ".join(workers.broken) + f". Every run that had started was "
                          f"stopped; {then}")


class _Workers:
    """The batch's worker threads and what they share. One worker per host, or per GPU slot of a host that has
    `gpu_slots`: the slots of a host take that host's runs in plan order, one each at a time. A multi-node run
    belongs to the worker of its node 0."""

    def __init__(self, exp: params.Experiment, runs: list[Run], run_dir: Path, connected: dict, *, total: int,
                 say: Say, params_file: Path, server: kernels.ForkServer | None):
        self.exp, self.run_dir, self.connected, self.total, self.say = exp, run_dir, connected, total, say
        self.params_file, self.server = params_file, server
        self.lock = threading.Lock()
        self.in_flight: dict[tuple[str, int], Run] = {}
        self.stop = threading.Event()
        self.interrupted = threading.Event()  # the batch stops the runs in flight itself, and says how they ended
        self.broken: list[str] = []  # kit errors that stop the batch (a full disk): no further run is started
        self.queues = {name: [r for r in runs if r.host == name] for name in dict.fromkeys(r.host for r in runs)}
        self.slots = {name: exp.hosts[name].worker_slots() for name in self.queues}
        self.finished = {(name, i): threading.Event() for name in self.queues for i in range(len(self.slots[name]))}

    def start(self) -> None:
        for name, slot in self.finished:
            threading.Thread(target=self.worker, args=(name, slot), name=f"host-{name}-{slot}", daemon=True).start()

    def next_run(self, name: str, slot: int) -> Run | None:
        # taken and marked in flight at once: an interruption in between would leave a run nobody stops
        with self.lock:
            run = self.queues[name].pop(0) if self.queues[name] and not self.stop.is_set() else None
            if run is not None:
                self.in_flight[(name, slot)] = run
            return run

    def worker(self, name: str, slot: int) -> None:
        try:
            # the next run's kernel starts meanwhile, while this host still has runs queued
            with kernels.RunKernels(notebooks.notebooks_dir(), server=self.server,
                                    more=lambda: bool(self.queues[name]) and not self.stop.is_set()) as pool:
                while (run := self.next_run(name, slot)) is not None:
                    try:
                        notebooks.run_notebook(self.exp, run, self.run_dir, self.connected, total=self.total,
                                               say=self.say, params_file=self.params_file,
                                               gpus=self.slots[name][slot], pool=pool, interrupted=self.interrupted)
                    except (LaunchlabError, OSError) as exc:
                        self.say(f"{notebooks.run_label(run, self.total)}  kit error: {exc}")
                        with self.lock:
                            self.broken.append(f"{run.run_id}: {exc}")
                        self.stop.set()
                    finally:
                        with self.lock:
                            self.in_flight.pop((name, slot), None)
        finally:
            self.finished[(name, slot)].set()

    def wait_all(self) -> None:
        # Polling with sleep, not Thread.join: a join interrupted by Ctrl-C can make the next join return
        # while the thread still runs (CPython < 3.13), and the interrupted runs must be waited for.
        while not all(e.is_set() for e in self.finished.values()):
            time.sleep(0.2)

    def interrupt(self, why: str) -> None:
        """Stop what the runs in flight started, wait for their notebooks, and record each as interrupted."""
        with self.lock:
            self.stop.set()
            self.interrupted.set()
            current = dict(self.in_flight)
        # a run whose final status is written has ended (its notebook is only returning): it stays as it ended,
        # never re-recorded as interrupted — --resume would run it again
        ended = {run.run_id: status.record for run in current.values()
                 if (status := _final_status_of(self.run_dir, run)) is not None}
        current = {key: run for key, run in current.items() if run.run_id not in ended}
        # stopping first, saying after: a line to a terminal that closed (SIGHUP) must not come before the stop
        stopped = {run.run_id: recovery.stop_recorded(self.exp, run, self.run_dir, self.connected)
                   for run in current.values()}
        for run in current.values():
            self.say(f"{notebooks.run_label(run, self.total)}  {why}: the kit stopped what the run started")
        self.wait_all()  # the notebooks end quickly once their servers are gone
        for run_id, record in ended.items():
            self.say(f"{run_id}  {liveprogress.outcome_line(record)} (it had ended before the batch was {why})")
        for run in current.values():
            record = recovery.recover(self.exp, run, self.run_dir, self.connected, reason=interrupts.REASON,
                                      message=f"{why}; the kit stopped the server", stopped=stopped[run.run_id])
            self.say(f"{notebooks.run_label(run, self.total)}  {liveprogress.outcome_line(record)}")  # error (interrupted)


def _final_status_of(run_dir: Path, run: Run):
    """The run's status when its final one is written (done), else None."""
    try:
        status = records.read_status(rundir.RunDir(run_dir).run(run.run_id))
    except (RunDirError, OSError):
        return None
    return status if status is not None and status.done else None


def new_run_dir(params_path: str | Path) -> Path:
    """A new run directory for the params file, as a batch opens it, for a run notebook run on its own (marked
    `single_run`: its other planned runs are not missing from an interrupted batch, they were never to run here)."""
    exp = params.load(params_path)
    path = _open_run_dir(exp, make_plan(exp), params_path, None, resume=None)[0]
    rundir.RunDir(path).update_manifest(single_run=True)
    return path


def _check_patches(exp: params.Experiment, connected: dict) -> None:
    """Every patch of every variant must apply on every host before anything is launched."""
    for variant in params.expand(exp):
        if not (variant.patches or variant.instrument):
            continue
        for host in connected.values():
            argv = params.render(exp, variant, port=0, run_id="check", host=host.name).argv
            patches = patching.of_variant(host, argv, variant, exp.server.kind)
            patching.check(host, argv, patches, f"{host.workdir}/.patch-check")


def _handle_leftovers(host, stop: bool, say: Say, batch: str, *, confirm: Confirm | None) -> None:
    """Processes an earlier run left on the host (its batch lost the host, or died) would skew this
    experiment's memory figures: stop them when told to (`stop`) or when `confirm` says yes, otherwise refuse
    to launch and say how. Only this user's processes of batches that no live lock accounts for are leftovers."""
    left = recovery.leftovers(host, locks.live_batches(locks.holders(host)) | {batch})
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


def _open_run_dir(exp: params.Experiment, plan: list[Run], params_path, out_root, *, resume,
                  box: Path | None = None) -> tuple[Path, bool]:
    """The run directory (absolute) and whether this call created it."""
    if resume is not None:
        return _resumed(exp, plan, params_path, resume), False
    directory = rundir.RunDir.create(Path(out_root) if out_root else finding.default_root(), exp.experiment)
    rundir.write_text(directory.experiment_file, params.dump_resolved(exp, masked=True))
    directory.write_manifest(Manifest(
        experiment=exp.experiment,
        question=exp.question,
        params_file=os.path.relpath(Path(params_path).resolve(), directory.path.resolve()),
        params_sha256=params.digest(params_path),
        created_at=datetime.now().isoformat(timespec="seconds"),
        kit_version=__version__,
        simulated=exp.simulated,
        host=exp.host_name,
        hosts=exp.host_names,
        factors={f: list(levels) for f, levels in exp.factors.items()},
        baseline=params.baseline_variant(exp).name,
        order="search" if exp.search else "interleaved",
        # a search's probes are added as it decides them (searchbatch.record_probes)
        search=ManifestSearch.from_json(exp.search.model_dump()) if exp.search else None,
        strata=plans.strata(exp) if exp.search else None,
        repetitions=None if exp.search else exp.repetitions,  # the file's, or --repetitions
        # the compared runs; warm-ups apart (`warmup:`): frames.build reads run_ids only, so a warm-up is never
        # an observation, and the report lists them from warmup_runs
        run_ids=[] if exp.search else [r.run_id for r in plans.compared(plan)],
        runs=[] if exp.search else [r.manifest_entry() for r in plans.compared(plan)],
        warmup_runs=[r.manifest_entry() for r in plan if r.warmup],
        batch=None,  # the batch running it now: its lock owner id and simulated box (run_batch fills them)
        sim_box=str(box) if box else None))
    return directory.path, True


def _resumed(exp: params.Experiment, plan: list[Run], params_path, resume) -> Path:
    """The run directory a batch resumes, checked against the plan (RunDirError where it was made from another);
    a run notebook's one-run folder becomes a batch's."""
    directory = rundir.RunDir.check(resume)
    run_dir, manifest = directory.path, directory.manifest()
    searched = ManifestSearch.from_json(exp.search.model_dump()) if exp.search else None
    warmups = [r.run_id for r in plan if r.warmup]
    if manifest.experiment != exp.experiment or manifest.search != searched or (
            searched is None and (manifest.run_ids != [r.run_id for r in plans.compared(plan)]
                                  or [w.run_id for w in manifest.warmup_runs] != warmups)):
        raise RunDirError(f"{run_dir} was made from a different plan than {params_path}; "
                          "resume it with the params it was run with")
    if manifest.single_run:  # one run notebook's folder, which a batch now completes
        directory.update_manifest(single_run=False)
    if manifest.stopped is not None:  # resumed: what stopped it before is no longer where it stands
        directory.update_manifest(stopped=None)
    if searched is None and not manifest.runs:  # made by a kit that listed only run ids: the run notebooks
        directory.update_manifest(runs=[r.manifest_entry() for r in plans.compared(plan)])  # read their runs here
    return run_dir


