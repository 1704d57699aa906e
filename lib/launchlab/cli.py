"""`launchlab init | validate | run | import | report | compare | diagnose | parse | ls | schema`: the stable
interfaces, in short in docs/architecture.md ("The stable interfaces, in short"); `diagnose` is this kit's own
addition to those of the shared design."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

from launchlab import __version__, interrupts
from launchlab.errors import LaunchlabError, ParamsError
from launchlab.escaping import visible
from launchlab.logparse.kinds import KINDS
from launchlab.store import finding

EXIT_KIT_ERROR = 1
EXIT_INVALID_PARAMS = 2


def _validate(args: argparse.Namespace) -> int:
    from launchlab import params
    from launchlab.runner.plan import make_plan

    exp = params.load_filled(args.params)  # a draft's TODO, init's model placeholder: named, never "valid"
    if exp.search is not None:
        size = params.plan_size(exp)
        print(f"{args.params}: valid — threshold search over {exp.search.flag} from {exp.search.low} to "
              f"{exp.search.high} (resolution {exp.search.resolution}) in {size.variants} strat"
              f"{'um' if size.variants == 1 else 'a'}: at most {size.probes} probes × {size.repetitions} "
              f"repetition(s) per stratum = at most {size.runs} runs on host {exp.host_name!r}"
              f"{' (simulated)' if exp.simulated else ''}")
        return 0
    plan = [r for r in make_plan(exp) if not r.warmup]
    at = ", ".join(f"{k}={v}" for k, v in exp.warmup_levels.items()) if exp.warmup_levels else "the baseline"
    warmups = f" after {exp.warmup} warm-up run(s) of {at} per host" if exp.warmup else ""
    print(f"{args.params}: valid — {len(plan) // exp.repetitions} variant(s) × {exp.repetitions} repetition(s) "
          f"= {len(plan)} runs{warmups} on host {exp.host_name!r}{' (simulated)' if exp.simulated else ''}; "
          f"baseline: {params.baseline_variant(exp).name}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from launchlab import params
    from launchlab.runner import batch
    from launchlab.store import rundir

    params.load_filled(args.params)  # the placeholders the kit wrote (validate says them too): before any launch
    only = tuple(args.only or ())
    if args.dry_run:
        from launchlab.runner import plan

        print(plan.dry_run(args.params, only, args.repetitions))
        return 0
    run_dir = batch.run_batch(args.params, out_root=args.out, resume=args.resume, stop_leftovers=args.stop_leftovers,
                              wait=args.wait, only=only, repetitions=args.repetitions, confirm=_ask_on_terminal,
                              html=not args.no_html)
    print(run_dir)
    directory = rundir.RunDir(run_dir)
    print(f"report: {directory.report_md if args.no_html else directory.summary_html}", file=sys.stderr)
    _say_headline(run_dir)
    return 0


def _say_headline(run_dir: Path) -> None:
    """The report's headline as the last lines on the terminal (stderr: stdout's last line stays the path scripts
    read): the answer, its strength, what would settle it."""
    from launchlab.reporting import headline

    found = headline.of_run_dir(Path(run_dir))
    if found is not None:
        sys.stdout.flush()  # the path first, where both go to one terminal
        print(f"\n{found.text()}", file=sys.stderr)


def _import(args: argparse.Namespace) -> int:
    from launchlab.runner import importer
    from launchlab.store import rundir

    run_dir = importer.import_runs(args.imports, out_root=args.out, follow_symlinks=args.follow_symlinks)
    print(run_dir)
    print(f"report: {rundir.RunDir(run_dir).summary_html}", file=sys.stderr)
    _say_headline(run_dir)
    return 0


def _ask_on_terminal(question: str) -> bool:
    """The user's yes at the terminal. Without one (a script, CI) the answer is no: nothing is stopped unasked,
    and the batch refuses with how to stop it (--stop-leftovers)."""
    if not sys.stdin.isatty():
        return False
    return input(visible(question)).strip().lower() in ("y", "yes")


def _init(args: argparse.Namespace) -> int:
    from launchlab.store import workspace

    result = workspace.init(Path(args.dir))
    for path in result.written:
        print(f"  wrote    {path}")
    for path in result.skipped:
        print(f"  kept     {path}  (exists; not overwritten)")
    go = "" if Path(args.dir).resolve() == Path.cwd() else f"cd {args.dir} && "
    print(f"workspace {result.root.resolve()}; next: {go}launchlab run params/demo.yaml")
    return 0


def _report(args: argparse.Namespace) -> int:
    from launchlab.runner import notebooks

    # absolute: papermill runs the notebook from another folder (resolved by RunDir.check, through no other user's link)
    run_dir = Path(os.path.abspath(args.run_dir))
    print(notebooks.summarize(run_dir, html=not args.no_html))
    _say_headline(run_dir)
    return 0


def _compare(args: argparse.Namespace) -> int:
    from launchlab.reporting import compare, comparetext

    record = compare.build(args.run_a, args.run_b)
    folder = compare.write(record, args.out)
    if not record.comparable:  # a refusal: said last, and the exit status says it too
        print(f"compare.json and compare.html (comparable: false): {folder.path}", file=sys.stderr, flush=True)
        print(comparetext.terminal(record))
        return 1
    print(comparetext.terminal(record))
    print(folder.path)
    print(f"compare.json and compare.html: {folder.path}", file=sys.stderr)
    return 0


def _default_index(root: Path) -> Path:
    """Where `ls --html` writes without FILE: in the outputs root, never into a folder of the project (`ls examples
    --html` wrote examples/index.html into the checkout) — index.html of the outputs root itself, else named after
    the folder it lists."""

    outputs = finding.default_root()
    if os.path.abspath(root) == os.path.abspath(outputs):
        return outputs / "index.html"
    return outputs / f"index-{Path(os.path.abspath(root)).name or 'root'}.html"


def _ls(args: argparse.Namespace) -> int:
    from launchlab.reporting import indexpage, runindex

    root = Path(args.dir) if args.dir else finding.default_root()
    rows = runindex.index(root)
    if args.html is not None:  # the page, even of no run directory: an index that says so
        page = Path(args.html) if args.html else _default_index(root)
        indexpage.write(rows, root, page)
        print(page)
        print(f"index of {len(rows)} run director{'y' if len(rows) == 1 else 'ies'}: {page}", file=sys.stderr)
        return 0
    if not rows:
        print(f"no run directory under {root}", file=sys.stderr)
        return 0
    for row in rows:
        print(runindex.text(row))
    return 0


def _schema(args: argparse.Namespace) -> int:
    from launchlab import params

    if args.markdown:
        from launchlab.params import reference

        print(reference.markdown(params.json_schema()))
    else:
        # on one line, as the kit writes its records (indentation was a third of the file; editors read it whole)
        print(json.dumps(params.json_schema(), separators=(",", ":")))
    return 0


def _parse(args: argparse.Namespace) -> int:
    from launchlab import logparse

    parsed = logparse.parse_file(args.log, args.server)
    if args.json:
        print(json.dumps(parsed.to_json(), indent=2))
        return 0
    data = parsed.to_json()
    print(f"server: {data['server']}   ready: {data['ready']}   phase reached: {data['phase_reached']}")
    if data["failure"]:
        f = data["failure"]
        where = f" (line {f['line']})" if f.get("line") else ""
        print(f"failure: {f['reason']} in {f['phase']}{where}: {f['message']}")
    if data.get("phase_lines"):  # where each phase begins, so the log can be opened there
        print("phases: " + ", ".join(f"{phase} from line {line}" for phase, line in data["phase_lines"].items()))
    if data["spec"] or data["draft_phase_lines"]:  # a speculative-decoding draft model: its figures are `draft_*`
        said = ", ".join(f"{k}={v}" for k, v in data["spec"].items())
        steps = ", ".join(f"{step} from line {line}" for step, line in data["draft_phase_lines"].items())
        print("speculative decoding: " + "; ".join(x for x in (said, steps) if x))
    if data["reload"]:
        r = data["reload"]
        print(f"reload: asleep at line {r['sleep']}, woken at line {r['wake']}, reached {r['phase_reached']}")
    # what else --json knows, one line each: a custom all-reduce failure can be all a log says (a rank's peer access)
    for rank, state in data["custom_ar"].items():
        why = f" ({state['reason']})" if state["reason"] else ""
        print(f"custom all-reduce, rank {rank}: {state['state']}{why}: {state['message'][:200]}")
    if data["nccl_version"]:
        print(f"NCCL version: {data['nccl_version']}")
    if data["args"]:
        print(f"server arguments: {len(data['args'])} read (`--json` lists them)")
    fields = sorted({k for r in data["ranks"].values() for k in r})
    if fields:
        width = max(4, *map(len, data["ranks"]))  # a stage's key: "pp10.3"
        print(f"{'rank':<{width}}  " + "  ".join(f"{f:>22}" for f in fields))
        for rank, values in data["ranks"].items():
            print(f"{rank:>{width}}  " + "  ".join(f"{values.get(f, ''):>22}" for f in fields))
    for d in data["debug"]:
        print(f"debug {d['name']}: {d['key']}={d['value']}{' ' + d['unit'] if d['unit'] else ''}")
    return 0


def _diagnose(args: argparse.Namespace) -> int:
    from launchlab import params
    from launchlab.runner import diagnose, draft

    found = diagnose.diagnose([Path(log) for log in args.logs], args.server,
                              gpu_memory_gib=args.gpu_memory or _card_gib(args.host))
    print(diagnose.text(found))
    made = draft.make(found, draft.Options(command=args.command, host=args.host, search=args.search))
    out = args.out or _draft_path(found, search=args.search)
    draft.write(made, out, force=args.force)
    for note in made.notes:
        print(f"draft: {note}")
    try:
        params.load(out)
    except ParamsError as exc:  # the file stays, for the reader to fix the lines named
        print(f"launchlab: the draft {out} does not validate — a value the log gave that the params cannot hold, most "
              "likely (the draft leaves out the ones it knows to check): fix the lines named below, or give them with "
              f"--command / --host; if none of them comes from the log, please report it.\n{exc}", file=sys.stderr)
        return EXIT_INVALID_PARAMS
    print(f"wrote {out}; next: launchlab run {out} --dry-run")
    return 0


def _card_gib(host: str | None) -> float | None:
    """The total memory of this machine's first GPU (GiB) when the draft's host is this machine: what a break-even
    needs that a log may not state (nvidia-smi; None without it)."""
    from launchlab.hosts import THIS_MACHINE

    if host not in THIS_MACHINE:
        return None
    from launchlab.gpu import telemetry
    from launchlab.hosts import commands

    try:
        out = subprocess.run(["sh", "-c", commands.gpu_snapshot()], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    gpus = telemetry.parse_snapshot(out[: 1 << 20])
    return gpus[0].mem_total_mib / 1024 if gpus else None


def _draft_path(found, *, search: bool) -> Path:
    """params/local/<experiment>.yaml where the current folder has params/ (a checkout, a workspace), else beside it:
    the user's own experiments, which a checkout's git ignores (issue 67: the kit's examples leave a clone clean)."""
    from launchlab.runner import draft

    name = f"{draft.experiment_name(found, search=search)}.yaml"
    return Path("params") / "local" / name if Path("params").is_dir() else Path(name)


def _example(*commands: str) -> dict:
    """A subcommand's help ends with examples of it (kept as written: the formatter leaves the epilog's lines)."""
    return {"epilog": "example" + ("s" if len(commands) > 1 else "") + ":\n" + "\n".join(f"  {c}" for c in commands),
            "formatter_class": argparse.RawDescriptionHelpFormatter}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="launchlab", description=(
        "Controlled experiments on inference-server launches: run the variants of a params file on its hosts, "
        "collect their logs and GPU traces, and report which factor decides the launch. `launchlab COMMAND -h` "
        "tells more of each; README.md and docs/ show them in use, and the section \"The stable interfaces, in short\" "
        "of docs/architecture.md gives what scripts may rely on."))
    p.add_argument("--version", action="version", version=f"launchlab {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log what the kit does")
    sub = p.add_subparsers(dest="command", required=True)
    for add in (_init_parser, _validate_parser, _run_parser, _import_parser, _report_parser, _compare_parser,
                _ls_parser, _schema_parser, _diagnose_parser, _parse_parser):  # the order `launchlab -h` lists them
        add(sub)
    return p


def _init_parser(sub) -> None:
    i = sub.add_parser("init", help="make a workspace: params/, notebooks/, outputs/ (keeps files that exist)",
                       **_example("launchlab init my-experiments"))
    i.add_argument("dir", nargs="?", default=".", help="the workspace folder (default: the current one)")
    i.set_defaults(func=_init)


def _validate_parser(sub) -> None:
    v = sub.add_parser("validate", help="check a params file; print every problem",
                       **_example("launchlab validate params/demo.yaml"))
    v.add_argument("params", help="the params file (YAML): hosts, server, factors, baseline")
    v.set_defaults(func=_validate)


def _run_parser(sub) -> None:
    r = sub.add_parser("run", help="run every variant of a params file and render the report",
                       **_example("launchlab run params/demo.yaml",
                                  "launchlab run params/demo.yaml --resume outputs/demo-custom-ar-vs-mem-fraction/"
                                  "20261203-120000"))
    r.add_argument("params", help="the params file (YAML) whose variants to run")
    r.add_argument("--out", type=Path, default=None, help="root of run directories (default: outputs/)")
    r.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR",
                   help="continue an interrupted run directory: runs that finished are skipped")
    r.add_argument("--stop-leftovers", action="store_true",
                   help="stop processes that earlier runs left on the host (found by their run id) before launching")
    r.add_argument("--wait", action="store_true",
                   help="when another batch holds the host's GPUs, wait for it (saying who holds them) instead of refusing")
    r.add_argument("--dry-run", action="store_true",
                   help="print the plan with each variant's exact command and environment (secrets masked); launch nothing")
    r.add_argument("--only", nargs="+", metavar="LEVEL", default=None,
                   help="run only these levels (0.85, mem_fraction=0.85) or variants, by the name --dry-run "
                        "prints ('custom_ar=on, mem_fraction=0.85', quoted) or as in the run ids "
                        "(custom_ar-on.mem_fraction-0.85)")
    r.add_argument("--repetitions", type=int, default=None, metavar="N", help="override `repetitions:` of the params")
    r.add_argument("--no-html", action="store_true",
                   help="write verdict.json and report.md but not summary.html (no summary kernel, no export); "
                        "`launchlab report RUN_DIR` renders it later")
    r.set_defaults(func=_run)


def _import_parser(sub) -> None:
    im = sub.add_parser("import", help="make a run directory and its report from server logs of runs made by hand",
                        **_example("launchlab import params/demo-import.yaml"))
    im.add_argument("imports", help="an imports file: experiment, factors, baseline and runs ({levels, log, smi, command})")
    im.add_argument("--out", type=Path, default=None, help="root of run directories (default: outputs/)")
    im.add_argument("--follow-symlinks", action="store_true",
                    help="import the files that symbolic links lead to outside the imports file's folder (refused "
                         "without it: a shared folder of logs could link to someone's private file)")
    im.set_defaults(func=_import)


def _report_parser(sub) -> None:
    rep = sub.add_parser("report", help="rebuild frames, summary.ipynb and summary.html of a run directory",
                         **_example("launchlab report outputs/demo-custom-ar-vs-mem-fraction/20261203-120000"))
    rep.add_argument("run_dir", help="a run directory (what `launchlab run` printed)")
    rep.add_argument("--no-html", action="store_true",
                     help="judge again only: frames, verdict.json and report.md, not summary.html (no summary kernel)")
    rep.set_defaults(func=_report)


def _compare_parser(sub) -> None:
    cmp = sub.add_parser("compare", help="before and after: what changed between two run directories of one question",
                         description=textwrap.fill("Compare RUN_B (after) with RUN_A (before): whether they ask the same "
                                                   "question "
                                     "(factors and levels), what differs outside the factors (versions, driver, GPUs, "
                                     "packages, files, environment, params), and per variant the outcome (Fisher's "
                                     "exact test), KV tokens, peak memory and the break-even (Welch intervals), and "
                                     "a search's thresholds. Prints the comparison and the folder of compare.json "
                                     "and compare.html; two different questions are not compared (exit status 1).",
                                                   100),
                         **_example("launchlab compare examples/h200-sglang-threshold/20261203-093428 "
                                    "examples/h100-sglang-threshold/20261207-101000 --out outputs/h200-vs-h100"))
    cmp.add_argument("run_a", metavar="RUN_A", help="the run directory before (the reference)")
    cmp.add_argument("run_b", metavar="RUN_B", help="the run directory after")
    cmp.add_argument("--out", type=Path, default=None, metavar="DIR",
                     help="where compare.json and compare.html go (default: RUN_B/compare/<RUN_A's experiment>-<name>)")
    cmp.set_defaults(func=_compare)


def _ls_parser(sub) -> None:
    ls = sub.add_parser("ls", help="list run directories: experiment, date, runs done/planned, the verdict",
                        **_example("launchlab ls", "launchlab ls /shared/team-outputs",
                                   "launchlab ls examples --html"))
    ls.add_argument("dir", nargs="?", default=None, help="root of run directories (default: outputs/)")
    ls.add_argument("--html", nargs="?", const="", default=None, metavar="FILE",
                    help="write one offline HTML page over them instead, sortable and filterable, each row linking "
                         "its report (default FILE: index.html in the outputs root, or index-DIRNAME.html there for "
                         "another DIR)")
    ls.set_defaults(func=_ls)


def _schema_parser(sub) -> None:
    sc = sub.add_parser("schema", help="print the params files' JSON Schema",
                        **_example("launchlab schema > params/params.schema.json"))
    sc.add_argument("--markdown", action="store_true",
                    help="the params reference of docs/reference/params.md, from the same schema")
    sc.set_defaults(func=_schema)


def _diagnose_parser(sub) -> None:
    dg = sub.add_parser("diagnose", help="from a failing launch's log to the params file of the experiment that "
                                         "isolates it", **_example(
                            "launchlab diagnose examples/h200-sglang-diagnose/failing-launch.log",
                            "launchlab diagnose tp0.log tp1.log --host gpu-box -o params/local/isolate.yaml",
                            "launchlab diagnose server.log --search -o params/local/search.yaml --command "
                            "\"python3 -m sglang.launch_server …\""))
    dg.add_argument("logs", nargs="+", metavar="LOG", help="the failed launch's server log: one merged, or one per rank")
    dg.add_argument("--command", default=None,
                    help="the launch command as you ran it (default: rebuilt from the log's own argument dump)")
    dg.add_argument("--host", default=None, metavar="NAME",
                    help="where the draft runs: an SSH address or `local` (default: a simulated host shaped like the "
                         "log's GPUs where the kit simulates the server, else this machine with a TODO)")
    dg.add_argument("--gpu-memory", type=float, default=None, metavar="GIB",
                    help="the card's total memory, for a break-even the log cannot give alone (a failed vLLM launch); "
                         "asked of nvidia-smi with --host local")
    dg.add_argument("--search", action="store_true",
                    help="a threshold search of the memory flag around the break-even instead of two levels")
    dg.add_argument("--server", default="auto", choices=["auto", *KINDS],
                    help="the server that wrote the log (default: auto, detected from its lines)")
    dg.add_argument("-o", "--out", type=Path, default=None, metavar="PARAMS",
                    help="the params file to write (default: params/local/diagnose-<kind>-<reason>.yaml)")
    dg.add_argument("--force", action="store_true", help="replace the params file (and its patch) if it exists")
    dg.set_defaults(func=_diagnose)


def _parse_parser(sub) -> None:
    pa = sub.add_parser("parse", help="parse a server log",
                        **_example("launchlab parse examples/h200-sglang-diagnose/failing-launch.log --json",
                                   "launchlab parse server.log --server sglang"))
    pa.add_argument("log", help="a server's log file")
    pa.add_argument("--server", default="auto", choices=["auto", *KINDS],
                    help="the server that wrote it (default: auto, detected from its lines)")
    pa.add_argument("--json", action="store_true",
                    help="print one JSON object: server, ready, phase_reached, failure, ranks, custom_ar, debug")
    pa.set_defaults(func=_parse)


class _VisibleText(io.TextIOBase):
    """A text stream that shows control characters (but tab and newline) as `\\x..` before they reach the
    terminal: a log line, a level name or a params value printed by the kit cannot retitle the window, move the
    cursor over what was printed, or write the clipboard (OSC 52)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        with interrupts.unless_gone(self.stream):  # a closed terminal must not stop the batch halfway (SIGHUP)
            self.stream.write(visible(text))
        return len(text)

    def flush(self) -> None:
        with interrupts.unless_gone(self.stream):
            self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        return self.stream.encoding


@contextlib.contextmanager
def _visible_output() -> Iterator[None]:
    """Everything the CLI prints, its progress lines and log messages included, through _VisibleText."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (s if isinstance(s, _VisibleText) else _VisibleText(s) for s in saved)
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = saved


def main(argv: list[str] | None = None) -> int:
    with _visible_output():
        parser = build_parser()
        if not (sys.argv[1:] if argv is None else argv):  # bare `launchlab`: what it does, not a usage error
            parser.print_help()
            return 0
        args = parser.parse_args(argv)
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(name)s: %(message)s")
        logging.getLogger("traitlets").setLevel(logging.ERROR)  # nbconvert's per-export accessibility hints
        try:
            with interrupts.terminations_interrupt():  # as Ctrl-C: what a command started goes (a report's kernel)
                return args.func(args)
        except ParamsError as exc:
            print(f"launchlab: {exc}", file=sys.stderr)
            return EXIT_INVALID_PARAMS
        except LaunchlabError as exc:
            print(f"launchlab: {exc}", file=sys.stderr)
            return EXIT_KIT_ERROR
        except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM or SIGHUP (interrupts.py)
            if not getattr(exc, "told", False):  # a batch said it already, with how to continue
                with interrupts.unless_gone(sys.stderr):  # SIGHUP: the terminal may be gone
                    print(f"launchlab: {interrupts.describe(exc)}.", file=sys.stderr)
            return interrupts.exit_code(exc)


if __name__ == "__main__":
    sys.exit(main())
