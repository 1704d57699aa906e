"""Issue 67: the README's commands and every `-h` example, run as written in a fresh clone, work — and leave the
checkout as they found it: `git status` clean (a draft `launchlab diagnose` writes goes to params/local/, which the
checkout's git ignores; the Install block runs in a workspace beside the clone, as it says). A newcomer copies these
lines first.

Where a line cannot run here as written, the substitution is listed in SUBSTITUTED with why; nothing else is
changed."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, ROOT
from test_examples_fresh_clone import fresh_checkout

LOG = "examples/h200-sglang-diagnose/failing-launch.log"
# the user's own files, named as a user would: a real log of the repository stands in (for a log per rank, the one
# merged log); a run directory the text names by a date: the one the demo's run made
STAND_INS = {"tp0.log tp1.log": LOG, "server.log": LOG}
RUN_DIR = re.compile(r"outputs/demo-custom-ar-vs-mem-fraction/\d{8}-\d{6}")
# a line → what runs instead, and why
SUBSTITUTED = {
    # over SSH to the user's own box (gpu-box): only the plan, nothing may leave this machine in a test
    "launchlab run params/local/mine.yaml": "launchlab run params/local/mine.yaml --dry-run",
    # the demo again, in the workspace `init` made: its plan (the demo itself runs once)
    "cd my-experiments && launchlab run params/demo.yaml": "launchlab run params/demo.yaml --dry-run",
}
# lines that install, and why they do not run here
NOT_RUN = {
    "pip install /path/to/launchlab": "installs the kit: the newcomer check (a fresh clone, make demo) does it",
}
# the README's Install block runs "in a workspace of your own", as it says: a folder beside the clone
INSTALL = ("launchlab init my-experiments", "cd my-experiments && launchlab run params/demo.yaml")


def help_examples() -> list[str]:
    from launchlab import cli

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = []
    for command in sub.choices.values():
        epilog = command.epilog or ""
        lines += [line.strip() for line in epilog.splitlines()[1:] if line.strip().startswith("launchlab")]
    return lines


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        for line in block.splitlines():
            command = line.split("  #", 1)[0].strip()
            if command.startswith(("launchlab", "cd ", "pip ")):
                lines.append(command)
    return lines


def test_the_lists_hold_what_the_readme_and_the_help_show():
    assert len(help_examples()) >= 15 and len(readme_commands()) >= 6
    written = set(help_examples()) | set(readme_commands())
    assert set(SUBSTITUTED) | set(NOT_RUN) <= written, "a substitution for a line no longer written"
    assert not [line for line in help_examples() if "/tmp/" in line], "an example writes into a shared folder"


def _run(line: str, clone: Path, env: dict, run_dir: str) -> subprocess.CompletedProcess:
    cwd = clone.parent / "workspace" if line in INSTALL else clone
    if line.startswith("launchlab init"):
        cwd.mkdir(exist_ok=True)
    elif line in INSTALL:
        cwd = cwd / "my-experiments"
    line = SUBSTITUTED.get(line, line)
    for name, path in STAND_INS.items():
        line = line.replace(name, path)
    line = RUN_DIR.sub(run_dir, line)
    command, _, into = line.partition(" > ")
    words = shlex.split(command)
    out = subprocess.run([*LAUNCHLAB, *words[1:]] if words[0] == "launchlab" else words, cwd=cwd, env=env,
                         capture_output=True, text=True, timeout=600)
    if into:  # `launchlab schema > params/params.schema.json`: the shell's redirection, done here
        (clone / into.strip()).write_text(out.stdout)
    return out


@pytest.mark.slow
def test_every_command_of_the_readme_and_of_the_help_runs_as_written_in_a_fresh_clone_and_leaves_it_clean(tmp_path):
    clone = fresh_checkout(tmp_path)
    env = {**os.environ, "HOME": str(tmp_path / "home"), "LAUNCHLAB_OUTPUTS": str(clone / "outputs"),
           "LAUNCHLAB_SIM_ROOT": str(tmp_path / "sim")}
    lines = list(dict.fromkeys(readme_commands() + help_examples()))
    first = "launchlab run params/demo.yaml"  # the run directory the later lines name
    lines.remove(first)
    demo = _run(first, clone, env, "")
    assert demo.returncode == 0, demo.stderr[-2000:]
    run_dir = os.path.relpath(demo.stdout.strip().splitlines()[-1], clone)
    failed = []
    for line in lines:
        if line in NOT_RUN:
            continue
        done = _run(line, clone, env, run_dir)
        if done.returncode != 0 or "Traceback" in done.stderr:
            at = done.stderr.find("Traceback")  # the traceback itself, where one is said
            said = done.stderr[max(0, at - 300):at + 1500] if at >= 0 else done.stderr[-600:]
            failed.append(f"{line}: exit {done.returncode}: {said}")
    assert failed == [], "\n".join(failed)
    status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone,
                            capture_output=True, text=True, check=True).stdout.splitlines()
    assert status == [], status  # drafts went to params/local/, which the checkout's git ignores
    assert (clone / "params" / "local" / "mine.yaml").is_file() and (clone.parent / "workspace" / "my-experiments"
                                                                      / "params" / "demo.yaml").is_file()
