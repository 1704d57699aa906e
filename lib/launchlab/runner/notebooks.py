"""The kit's notebooks executed with papermill: one run's (run_variant.ipynb, with a progress line per state
change and recovery when its kernel dies) and the summary (summary.ipynb, then summary.html)."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

from launchlab import config, interrupts, logparse, masking, params, safefiles
from launchlab.errors import LaunchlabError, NotebookFailed, RunDirError
from launchlab.run import recovery
from launchlab.runner import kernels, liveprogress
from launchlab.store import keptlog, records, rundir, workspace
from launchlab.store.records import Run

Say = Callable[[str], None]

# the unnamed file papermill writes is /proc/self/fd/N (safefiles.replacing): no extension, which papermill warns of
# at every run. Filtered for the process, not in a catch_warnings block: a batch runs hosts in threads, and one
# thread's block ending restores the filters while another's notebook is written (the warning then split a
# progress line in two)
warnings.filterwarnings("ignore", message="the file is not specified with any extension")



def stderr(line: str) -> None:
    """A progress line to stderr; dropped when the terminal is gone (interrupts.unless_gone)."""
    with interrupts.unless_gone(sys.stderr):
        print(line, file=sys.stderr, flush=True)


def notebooks_dir() -> Path:
    """Where run_variant.ipynb and summary.ipynb are: $LAUNCHLAB_NOTEBOOKS, else the package's own templates
    (package data, so an installed kit finds them wherever it is run from)."""
    if (configured := config.notebooks_dir()) is not None:
        return configured
    return workspace.notebook_templates()


HEARTBEAT_S = 10.0  # the longest the CLI stays quiet while a run goes: a real server's start takes minutes


class _StatePrinter(threading.Thread):
    """Prints a line whenever the run's state changes (from the status.json the lifecycle keeps current), and at
    least every HEARTBEAT_S while it does not: the phase the server's log has reached, the time, and its GPUs'
    memory as last sampled (a real server sat at "watching" for minutes with nothing said)."""

    def __init__(self, label: str, folder: rundir.RunFolder, say: Say, exp: params.Experiment | None = None):
        super().__init__(daemon=True)
        self.label, self.folder, self.say = label, folder, say
        self.stop_event = threading.Event()
        self.t0 = time.monotonic()
        self.log = liveprogress.LogFollower(folder.log(), logparse.parser_for(exp.server.kind, exp.server.rules())) \
            if exp is not None else None

    def run(self) -> None:
        last, said_at = None, time.monotonic()
        while not self.stop_event.wait(0.5):
            try:
                status = records.read_status(self.folder)
            except RunDirError:
                status = None
            state = status.state if status is not None else "kernel starting"
            if status is not None and status.detail:  # e.g. `queued (Priority)`: the scheduler's reason
                state = f"{state} ({status.detail})"
            now = time.monotonic()
            if state.startswith("done"):
                continue
            if state != last:
                self.say(f"{self.label}  {state}  {now - self.t0:.1f} s")
                last, said_at = state, now
            elif now - said_at >= HEARTBEAT_S:
                self.say(f"{self.label}  {state}  {now - self.t0:.1f} s — {self.where()}")
                said_at = now

    def where(self) -> str:
        """The log's phase and the GPUs' memory now, as the notebook's live display shows them."""
        parts = []
        if self.log is not None:
            with contextlib.suppress(OSError, LaunchlabError):
                parts.append(f"log at {self.log.poll()}")
        with contextlib.suppress(OSError, ValueError):
            gpus = liveprogress.latest_memory(self.folder.live_samples())
            if gpus:
                parts.append(_memory_now(gpus))
        return "; ".join(parts) or "nothing logged yet"


def _memory_now(gpus: list[tuple]) -> str:
    """The GPUs' memory in a progress line: each of one or two; of more, the range and the fullest — eight GPUs one
    by one made a line of over 250 characters."""
    if len(gpus) <= 2:
        return "GPU memory " + ", ".join(f"{i}: {used / 1024:.1f}/{total / 1024:.0f} GiB" for i, used, total in gpus)
    used = [u / 1024 for _, u, _ in gpus]
    fullest = max(gpus, key=lambda g: g[1])
    return (f"GPU memory of {len(gpus)} GPUs: {min(used):.1f}–{max(used):.1f}/{max(t for _, _, t in gpus) / 1024:.0f} "
            f"GiB (fullest: {fullest[0]})")


def execute(template: str, output: Path, parameters: dict, pool: kernels.RunKernels | None = None,
            *, kernel: kernels.RunKernel | None = None) -> None:
    """papermill in a kernel of the kit's (kernels.py: private sockets, no IPython history, its log silenced so the
    progress lines stay readable): the pool's, started beforehand and stopped afterwards; or the caller's, who
    stops it; or, with neither, one started for this notebook and stopped after it. Cell errors still land in the
    executed notebook."""
    # papermill writes the executed notebook in a private folder, renamed into place however it ends (a failed
    # cell's notebook is the evidence): a `summary.ipynb` someone linked elsewhere is replaced, never written through
    with safefiles.replacing(output, mode=rundir.derived_mode(output), keep_on_error=True) as tmp:
        _execute(template, tmp, parameters, pool, kernel=kernel)


def _execute(template: str, output: Path, parameters: dict, pool: kernels.RunKernels | None,
             *, kernel: kernels.RunKernel | None) -> None:
    import papermill  # here, not at the top: the run kernel imports this module, and papermill costs it seconds

    from launchlab.runner import nbengine  # papermill's engine, writing the notebook at its start and end only

    if kernel is not None:
        used, done = kernel, lambda _: None
    elif pool is not None:
        used, done = pool.take(), pool.release
    else:
        used = kernels.start_answered(lambda: None, notebooks_dir(), kernels.KERNEL_ARGS, discard=kernels.stop)
        done = kernels.stop
    try:
        papermill.execute_notebook(str(notebooks_dir() / template), str(output), parameters=parameters,
                                   kernel_name=kernels.KERNEL_NAME, progress_bar=False, engine_name=nbengine.NAME,
                                   km=used)
    finally:
        done(used)


def run_label(run: Run, total: int) -> str:
    """How progress lines name a run: `[3/8] 03_…`, a warm-up `[warm-up 1] warmup1_…` (it has no place in the plan)."""
    return f"[warm-up {run.repetition}] {run.run_id}" if run.warmup else f"[{run.seq}/{total}] {run.run_id}"


def run_notebook(exp: params.Experiment, run: Run, run_dir: Path, hosts: dict, *, total: int, say: Say,
                  params_file: Path, gpus: list[int] | None = None, pool: kernels.RunKernels | None = None,
                  interrupted: threading.Event | None = None) -> None:
    """Execute one run's notebook, recover the run when the notebook did not finish it, and say how it ended.
    `interrupted`, once set, means the batch stopped the run itself (Ctrl-C, SIGTERM): the batch then records
    and says how it ended, not this (its notebook saw only a server that went away)."""
    folder = rundir.RunDir(run_dir).run(run.run_id)
    rundir.make_folder(folder.path)
    folder.archive_attempt()  # a repeated run (--resume) keeps the earlier attempt's raw files
    label = run_label(run, total) + (f" (GPUs {','.join(map(str, gpus))})" if gpus else "")
    progress = _StatePrinter(label, folder, say, exp)
    progress.start()
    problem = None
    try:
        execute("run_variant.ipynb", folder.notebook,
                 # the user's params file, not the run directory's experiment.yaml: that record has its secrets
                 # masked, and the server needs the real values (the digest proves the file is unchanged)
                 {"experiment": str(params_file), "run_id": run.run_id, "run_dir": str(run_dir),
                  "gpus": ",".join(str(g) for g in gpus) if gpus else "",
                  "params_sha256": params.digest(params_file),
                  "draw_trace": False},  # the summary draws every run's GPU trace (runview.gpu_trace)
                pool)
    except Exception as exc:  # any notebook failure becomes this run's error, the batch goes on
        problem = f"the run notebook failed: {notebook_error(exc)}"
    finally:
        progress.stop_event.set()
    _mask_notebook(exp, folder.notebook)
    if interrupted is not None and interrupted.is_set():
        return
    if not records.done(folder) or problem:
        recovery.recover(exp, run, run_dir, hosts, message=problem or "the run notebook ended without a final status")
    if (gone := _run_dir_gone(run_dir, folder)) is not None:
        raise gone
    record = records.read_status(folder).record
    # the outcome and when it was reached, then the run's whole time:
    # "ready at 6.3 s, stopped by the kit (done in 7.6 s)"
    say(f"{label}  {liveprogress.outcome_line(record)} (done in {time.monotonic() - progress.t0:.1f} s)")
    for kept in map(keptlog.LogCut.from_json, record.logs):
        if kept.cut:  # a log longer than the kit keeps: how much of it the run folder holds
            say(f"{label}  {kept.note()}")


def _run_dir_gone(run_dir: Path, folder: rundir.RunFolder) -> RunDirError | None:
    """A run directory deleted while a run went (its manifest.json is gone): the kit error that stops the batch,
    saying how the run ended (its processes were stopped all the same: lifecycle.finish, recovery.recover); None
    while the run directory is there."""
    if rundir.RunDir(run_dir).manifest_file.is_file():
        return None
    status = None
    with contextlib.suppress(RunDirError, OSError):
        status = records.read_status(folder)  # written again by the run's cleanup, after the deletion
    ended = f"; the run ended as {liveprogress.outcome_line(status.record)}" if status is not None and status.done else ""
    return RunDirError(f"the run directory {run_dir} was deleted while the run went (its manifest.json is gone)"
                       f"{ended}, and no further run is started")


def _mask_notebook(exp: params.Experiment, notebook: Path) -> None:
    """An executed notebook with every secret the kit knows masked: its outputs quote logs, errors and whatever a
    cell printed (the logs it shows are masked already; a traceback need not be). A disk too full to write the
    masked copy leaves the notebook as papermill wrote it: the run's record says why the batch stopped."""
    with contextlib.suppress(OSError):
        if notebook.exists():
            masking.for_run(exp).mask_file(notebook)


def notebook_error(exc: Exception) -> str:
    """What went wrong in a notebook, the exception first: papermill's message is the whole traceback, whose
    last line (the exception) is what a reader needs."""
    import papermill  # loaded already by `execute` (see there)

    if isinstance(exc, papermill.PapermillExecutionError):
        return f"{exc.ename}: {exc.evalue}"[:2000]
    return f"{type(exc).__name__}: {str(exc).strip()}"[:2000]


def summarize(run_dir: Path, say: Say = stderr, html: bool = True, server: kernels.ForkServer | None = None) -> Path:
    """Rebuild the frames from the raw files, write verdict.json and report.md, execute summary.ipynb and
    export summary.html (what `launchlab report` does); return the HTML's path. html=False stops after report.md
    (`launchlab run --no-html`) and returns its path: no summary kernel, no export."""
    # imported here: the run kernel imports this module, and these (pandas, matplotlib, nbconvert) cost it seconds
    from launchlab.reporting import reportmd
    from launchlab.verdicts import frames

    directory = rundir.RunDir.check(run_dir)
    exp = params.load(directory.experiment_file)
    if not html:
        frames.write(directory.path, frames.build(directory.path, exp))
        reportmd.write_verdict(directory.path)
        say("launchlab: frames, verdict.json and report.md written; summary.html not rendered "
            f"(--no-html): `launchlab report {directory.path}` renders it")
        return directory.report_md
    # the kernel starts, and imports the report's modules, while the frames and the verdict are made: on the core
    # that reading the runs in this process leaves idle (a large batch's are read by a pool, one a core)
    with _summary_kernel(server) as kernel:
        frames.write(directory.path, frames.build(directory.path, exp))
        # the verdict itself is said once, as the report's headline, at the end (the CLI's last lines): its
        # one-line record form here too said the same answer in other words
        reportmd.write_verdict(directory.path)
        say("launchlab: frames, verdict.json and report.md written; rendering the summary")
        try:
            return _render(exp, directory, kernel=kernel())
        except Exception:
            # the answer is in report.md already; said here, as the CLI would have at its end, so a failed render
            # does not leave the terminal without it
            from launchlab.reporting import headline

            found = headline.of_run_dir(directory.path)
            if found is not None:
                say(f"launchlab: summary.html was not rendered; the verdict (report.md):\n{found.text()}")
            raise


# what the summary notebook imports first, imported by its kernel as it starts (kernels.PRELOAD for the run notebook)
SUMMARY_PRELOAD = ["--IPKernelApp.exec_lines=import launchlab.reporting.report"]


@contextlib.contextmanager
def _summary_kernel(server: kernels.ForkServer | None):
    """The summary's kernel, started in the background (forked from the batch's server, or started as jupyter_client
    starts one): the context gives a call that waits for it; the kernel is stopped when the context ends, however
    it ends — its notebook done, or never run (an error or Ctrl-C while the verdict was made)."""
    from concurrent.futures import ThreadPoolExecutor

    starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="summary-kernel")
    started = starter.submit(kernels.start_answered, lambda: server, notebooks_dir(),
                             [*kernels.KERNEL_ARGS, *SUMMARY_PRELOAD], discard=kernels.stop)
    try:
        yield started.result
    finally:
        starter.shutdown(wait=True)  # a kernel still starting is waited for, then stopped: none outlives the report
        if started.exception() is None:
            kernels.stop(started.result())


def _render(exp: params.Experiment, directory: rundir.RunDir, *, kernel: kernels.RunKernel) -> Path:
    """summary.ipynb executed on the run directory, its secrets masked, and exported as summary.html."""
    import papermill  # here, as in summarize

    nb = directory.summary_notebook
    try:
        execute("summary.ipynb", nb, {"run_dir": str(directory.path)}, kernel=kernel)
    except papermill.PapermillExecutionError as exc:
        _mask_notebook(exp, nb)
        raise NotebookFailed(str(nb), f"{exc.ename}: {exc.evalue} (open the notebook to see the failing cell)") from None
    _mask_notebook(exp, nb)
    from launchlab.reporting import export  # nbconvert: only for the HTML
    from launchlab.runner import reproducible

    reproducible.settle_file(nb)  # the same run directory renders the same bytes

    return export.notebook_to_html(nb, directory.summary_html, title=f"{exp.experiment} — launchlab report")
