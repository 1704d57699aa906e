"""Issue 50: a shared outputs root and shared run directories, with another user in them (uid 65534, played for real:
tests/otheruser.py). No path the kit opens follows a link that user made — not a run folder (`runs/<id>` → a folder
elsewhere), not a server log (→ a private file of the victim's); the kit writes only into folders of its own, so a
run directory swapped for theirs mid-batch is refused rather than written into, and no run directory is made inside
an experiment folder they own; what the kit writes from a private input (an imported 0600 log) is private too. Each
test failed on the code before (f288ef9): it truncated the victim's file through the planted link, followed the
links out of the run directory, published the private file in summary.html, wrote summary.html 0644."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import LAUNCHLAB, ROOT, write_params
from launchlab import masking
from launchlab.errors import LaunchlabError, RunDirError
from launchlab.run import watch
from launchlab.store import rundir
from launchlab.store.keptlog import KeptLog
from otheruser import as_other, plant_link, private_file, shared  # noqa: F401 (shared: the fixture)

EXAMPLE = ROOT / "examples/h200-transformers-kv/20261129-232709"  # small (1.3 MB), real runs, some failed
RUN = "01_batching-continuous.memory_percent-0.5.num_blocks-auto_rep1"


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_run_directory_swapped_mid_batch_by_another_user_is_refused_and_nothing_is_written_through_its_links(
        shared):  # noqa: F811
    root = shared / "outputs"
    root.mkdir()
    os.chmod(root, 0o777)  # a shared outputs root without the sticky bit: anyone may rename what is in it
    run_dir = rundir.RunDir.create(root, "exp")
    folder = run_dir.run(RUN)
    folder.path.mkdir(parents=True)
    victims = {name: private_file(shared / "home" / f"{name}.txt", f"the victim's own {name}")
               for name in ("log", "samples", "status")}
    # the other user moves the victim's experiment folder away and puts one of their own in its place, with links
    as_other(f"mv {root}/exp {root}/exp.moved && mkdir -p {folder.path} && ln -s {victims['log']} {folder.log()} && "
             f"ln -s {victims['samples']} {folder.samples()} && ln -s {victims['status']} {folder.status}")
    with pytest.raises(LaunchlabError, match=r"belongs to (nobody|uid 65534), not to you"):
        KeptLog(folder.log(), masking.Masker())  # the run's server log, mirrored as it is written
    with pytest.raises(LaunchlabError, match="not to you"):
        watch.Mirror(None, "nvidia-smi.csv", folder.samples(), masking.Masker())  # the samples, mirrored
    with pytest.raises(RunDirError, match="not to you"):
        rundir.write_json(folder.status, {"state": "done"})
    for name, path in victims.items():
        assert path.read_text() == f"the victim's own {name}" and stat.S_IMODE(path.stat().st_mode) == 0o600


def test_no_run_directory_is_made_in_an_experiment_folder_another_user_owns(shared, tmp_path, sim_root):  # noqa: F811
    root = shared / "outputs"
    root.mkdir()
    os.chmod(root, 0o1777)  # shared as /tmp is: each user's names are their own
    as_other(f"mkdir -m 777 {root}/exp")  # the other user made the experiment's folder first
    with pytest.raises(RunDirError, match=rf"{root}/exp belongs to (nobody|uid 65534), not to you.*--out DIR"):
        rundir.RunDir.create(root, "exp")
    params = write_params(tmp_path, """\
        experiment: exp
        hosts:
          box: {transport: sim, gpus: 1}
        server:
          kind: generic
          command: [python3, -c, "print('READY', flush=True)"]
          ready: {timeout_s: 5, log_pattern: "^READY"}
        factors:
          f: {"a": {}, "b": {}}
        baseline: {f: "a"}
        """)
    res = subprocess.run([*LAUNCHLAB, "run", str(params), "--out", str(root)], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "belongs to" in res.stderr and not list((root / "exp").iterdir())


@pytest.mark.slow
def test_links_another_user_planted_for_a_run_directorys_folders_take_neither_report_nor_compare_outside_it(
        shared, example_built):  # noqa: F811
    before, after = shared / "outputs" / "exp" / "before", shared / "outputs" / "exp" / "after"
    shutil.copytree(EXAMPLE, before)
    shutil.copytree(example_built(EXAMPLE), after)  # with its frames: compare reads as far as its compare/ folder
    outside = shared / "elsewhere"
    shutil.copytree(before / "runs" / RUN, outside / RUN)
    shutil.rmtree(before / "runs" / RUN)
    plant_link(before / "runs" / RUN, outside / RUN)
    (outside / "compare").mkdir()
    plant_link(after / "compare", outside / "compare")
    was = _tree(outside)
    res = subprocess.run([*LAUNCHLAB, "report", "--no-html", str(before)], capture_output=True, text=True, timeout=300)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "symbolic link (made by nobody)" in res.stderr and RUN in res.stderr, res.stderr[-2000:]
    res = subprocess.run([*LAUNCHLAB, "compare", str(example_built(EXAMPLE)), str(after)], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "symbolic link (made by nobody)" in res.stderr and "compare" in res.stderr, res.stderr[-2000:]
    assert _tree(outside) == was  # nothing written there, nothing moved


@pytest.mark.slow
def test_resume_does_not_follow_a_run_folder_another_user_linked_elsewhere(shared, tmp_path, sim_root):  # noqa: F811
    params = write_params(tmp_path, """\
        experiment: exp
        hosts:
          box: {transport: sim, gpus: 1}
        server:
          kind: generic
          command: [python3, -c, "print('READY', flush=True); import time; time.sleep(30)"]
          ready: {timeout_s: 20, log_pattern: "^READY"}
          stop_grace_s: 2
        factors:
          f: {"a": {}, "b": {}}
        baseline: {f: "a"}
        repetitions: 1
        drain: {timeout_s: 5, tolerance_mib: 64}
        """)
    res = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(params), "--out", str(shared / "outputs")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    run_dir = Path(res.stdout.strip())
    second = sorted((run_dir / "runs").iterdir())[-1]
    outside = shared / "elsewhere" / second.name
    shutil.copytree(second, outside)
    (outside / "status.json").unlink()  # unfinished, as far as a resume can tell: it would run again
    shutil.rmtree(second)
    plant_link(second, outside)
    was = _tree(outside.parent)
    res = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(params), "--resume", str(run_dir)], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "symbolic link (made by nobody)" in res.stderr, res.stderr[-2000:]
    assert _tree(outside.parent) == was


@pytest.mark.slow
def test_report_of_a_shared_run_directory_does_not_publish_a_private_file_its_log_links_to(shared):  # noqa: F811
    run_dir = shared / "outputs" / "exp" / EXAMPLE.name
    shutil.copytree(EXAMPLE, run_dir)
    log = run_dir / "runs" / RUN / "server.log"
    secret = private_file(shared / "home" / "notes.log",
                          log.read_text() + "Traceback (most recent call last):\nRuntimeError: PRIVATE-7f3a9c\n")
    log.unlink()
    plant_link(log, secret)
    res = subprocess.run([*LAUNCHLAB, "report", str(run_dir)], capture_output=True, text=True, timeout=300)
    leaked = [p for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink() and b"PRIVATE-7f3a9c" in p.read_bytes()]
    assert leaked == [], leaked
    assert "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "symbolic link (made by nobody)" in res.stderr + res.stdout or res.returncode != 0, res.stderr[-2000:]
    assert secret.read_text().endswith("PRIVATE-7f3a9c\n") and stat.S_IMODE(secret.stat().st_mode) == 0o600


@pytest.mark.slow
def test_the_report_of_an_imported_private_log_is_private_too(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("a.log", "b.log"):
        shutil.copy(ROOT / "params" / "demo-import" / "logs" / "car_085.log", logs / name)
        os.chmod(logs / name, 0o600)  # the user's own, for their eyes only
    imports = {"experiment": "private-import", "server": {"kind": "sglang"}, "factors": {"f": {"a": {}, "b": {}}},
               "baseline": {"f": "a"}, "runs": [{"levels": {"f": "a"}, "log": "a.log"},
                                                {"levels": {"f": "b"}, "log": "b.log"}]}
    (logs / "imports.yaml").write_text(yaml.safe_dump(imports, sort_keys=False))
    res = subprocess.run([*LAUNCHLAB, "import", str(logs / "imports.yaml"), "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    [run_dir] = (tmp_path / "out").glob("*/*/")
    derived = ["summary.html", "summary.ipynb", "report.md", "verdict.json", "runs.parquet", "events.parquet",
               "telemetry.parquet", *(str(p.relative_to(run_dir)) for p in run_dir.glob("runs/*/*.json"))]
    for name in derived:
        mode = stat.S_IMODE((run_dir / name).stat().st_mode)
        assert not mode & 0o044, f"{name} is {oct(mode)}: readable by others, with the private log's lines in it"
