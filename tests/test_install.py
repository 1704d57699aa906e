"""The kit installed rather than cloned: a wheel built from this source, installed into a fresh virtual
environment outside the repository, `launchlab init` in an empty folder, then the demo there — by the CLI and
by papermill on the workspace's own notebook.

The fresh environment gets its third-party packages from this project's .venv through a .pth file (and their
data files, such as nbconvert's templates, through JUPYTER_PATH), so the test runs offline; the launchlab
package itself comes only from the wheel. HOME and TMPDIR are fresh folders, the environment is otherwise
empty (no PYTHONPATH, no LAUNCHLAB_*), and the working directory is the workspace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, processes_using
from launchlab import params

pytestmark = pytest.mark.slow

SOURCE = ("lib", "notebooks", "params", "pyproject.toml", "README.md")
# what other programs keep in a home folder while the kit runs: matplotlib's font cache, IPython's profile,
# Jupyter's runtime folder (kernel connection files) — none of it the kit's
USER_CACHES = {".cache", ".config", ".ipython", ".local"}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    base = tmp_path_factory.mktemp("installed")
    source = base / "src"
    for name in SOURCE:  # a copy, so building leaves nothing (build/, *.egg-info) in the checkout
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(base / "dist"), str(source)], check=True, capture_output=True, timeout=300)
    wheel = next((base / "dist").glob("launchlab-*.whl"))
    subprocess.run([sys.executable, "-c", f"from setuptools import build_meta; build_meta.build_sdist({str(base / 'dist')!r})"],
                   cwd=source, check=True, capture_output=True, timeout=300)
    env_dir = base / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    ask = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    purelib = Path(subprocess.run([str(env_dir / "bin/python"), "-c", ask], check=True, capture_output=True,
                                  text=True).stdout.strip())
    (purelib / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(env_dir / "bin/python"), "install", "-q", "--no-deps",
                    str(wheel)], check=True, capture_output=True, timeout=300)
    home, tmp, workspace = base / "home", base / "tmp", base / "workspace"
    for folder in (home, tmp, workspace):
        folder.mkdir()
    # the environment's bin/ is NOT on PATH: the kit must start the simulated server with its own interpreter,
    # not whatever python3 the PATH offers (the system's, which has no launchlab)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(tmp), "LANG": "C.UTF-8",
           "JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter")}
    return {"wheel": wheel, "sdist": next((base / "dist").glob("launchlab-*.tar.gz")), "env_dir": env_dir,
            "home": home, "tmp": tmp, "workspace": workspace, "env": env}


def _run(installed: dict, program: str, *argv: str, cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    """`launchlab …` or `python …` of the fresh environment, by absolute path."""
    return subprocess.run([str(installed["env_dir"] / "bin" / program), *argv], cwd=cwd, env=installed["env"],
                          capture_output=True, text=True, timeout=timeout)


def _outputs_of_the_checkout() -> set[str]:
    """The checkout's run directories — not outputs/test-artifacts/, where the browser tests of other workers put
    their screenshots meanwhile (a newcomer run saw summary.png appear there during this test)."""
    if not (ROOT / "outputs").is_dir():
        return set()
    return {str(p) for p in (ROOT / "outputs").glob("*/*") if p.parent.name != "test-artifacts"}


def test_the_wheel_and_the_sdist_carry_the_notebooks_the_params_and_the_report_template(installed):
    wheel = set(zipfile.ZipFile(installed["wheel"]).namelist())
    with tarfile.open(installed["sdist"]) as sdist:
        members = {m.name.split("/", 1)[1]: m for m in sdist.getmembers() if "/" in m.name}
    for needed in ("launchlab/templates/notebooks/run_variant.ipynb", "launchlab/templates/notebooks/summary.ipynb",
                   "launchlab/templates/params/demo.yaml", "launchlab/templates/params/params.schema.json",
                   "launchlab/templates/offline/index.html.j2",
                   "launchlab/sim/sglang_server.py", "launchlab/__main__.py"):
        assert needed in wheel
        assert members[f"lib/{needed}"].isfile(), f"{needed}: a file in the sdist, not a link out of the package"


def test_an_installed_kit_makes_a_workspace_and_runs_the_demo_there_writing_nothing_outside(installed):
    workspace, before = installed["workspace"], _outputs_of_the_checkout()
    done = _run(installed, "launchlab", "init", cwd=workspace)
    assert done.returncode == 0, done.stderr
    for path in ("params/demo.yaml", "params/my-server.yaml", "notebooks/run_variant.ipynb", "notebooks/summary.ipynb",
                 "outputs/.gitignore", "README.md"):
        assert (workspace / path).is_file(), path
    (workspace / "params/demo.yaml").write_text((workspace / "params/demo.yaml").read_text() + "# mine\n")
    again = _run(installed, "launchlab", "init", cwd=workspace)
    assert again.returncode == 0 and "kept     params/demo.yaml" in again.stdout
    assert (workspace / "params/demo.yaml").read_text().endswith("# mine\n")  # an edited file survives init

    version = _run(installed, "python", "-m", "launchlab", "--version", cwd=workspace)
    assert version.returncode == 0 and version.stdout.strip().startswith("launchlab ")
    unfilled = _run(installed, "launchlab", "validate", "params/my-server.yaml", cwd=workspace)
    assert unfilled.returncode == 2 and "line 16: `/models/your-model` is a placeholder" in unfilled.stderr

    done = _run(installed, "launchlab", "run", "params/demo.yaml", "--repetitions", "1", cwd=workspace)  # 4 runs decide
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = Path(done.stdout.strip().splitlines()[-1])
    assert run_dir.is_relative_to(workspace / "outputs")
    verdict = json.loads((run_dir / "verdict.json").read_text())
    assert verdict["controlled"] and verdict["outcome_factors"] == ["custom_ar", "mem_fraction"]
    assert verdict["conclusive"] is False  # one run a side decides what it decides, observed, not settled (issue 63)
    assert (run_dir / "summary.html").stat().st_size > 10_000
    assert json.loads((run_dir / "manifest.json").read_text())["kit_version"] == version.stdout.split()[1]

    assert _outputs_of_the_checkout() == before
    assert {p.name for p in installed["home"].iterdir()} <= USER_CACHES
    assert not list(installed["tmp"].iterdir()), "the simulated box and per-run files are removed after the batch"
    assert not processes_using(str(installed["tmp"]))


def test_papermill_runs_the_workspaces_notebook_with_the_installed_package(installed):
    workspace = installed["workspace"]
    if not (workspace / "notebooks").is_dir():
        assert _run(installed, "launchlab", "init", cwd=workspace).returncode == 0
    before = set((workspace / "outputs").glob("*/*"))
    done = _run(installed, "python", "-m", "papermill", "run_variant.ipynb", str(installed["tmp"].parent / "one.ipynb"),
                cwd=workspace / "notebooks")
    assert done.returncode == 0, done.stderr[-3000:]
    made = set((workspace / "outputs").glob("*/*")) - before
    assert len(made) == 1, "the notebook's default run directory is under the workspace's outputs/"
    status = json.loads(next(next(iter(made)).glob("runs/*/status.json")).read_text())
    assert status["status"] in ("ready", "failed") and status["state"] == "done"
    code = "import launchlab, sys; print(launchlab.__file__)"
    where = _run(installed, "python", "-c", code, cwd=workspace).stdout
    assert where.startswith(str(installed["env_dir"])), "the workspace imports the installed package, not a checkout"
    assert os.path.commonpath([where.strip(), str(ROOT)]) != str(ROOT)


def _mentions(text: str) -> list[str]:
    """What a workspace file says to a reader: a params file's comments, a notebook's markdown and code comments,
    the README whole."""
    if text.lstrip().startswith("{"):  # a notebook
        cells = json.loads(text)["cells"]
        return [line for c in cells for line in "".join(c["source"]).splitlines()
                if c["cell_type"] == "markdown" or "#" in line]
    return [line[line.index("#"):] for line in text.splitlines() if "#" in line]


def test_a_workspace_from_init_is_whole_its_schema_there_and_every_file_it_names_in_it(tmp_path):
    """`launchlab init` of the checkout's own environment (the package's templates, as installed): every
    `$schema=` path resolves inside the workspace, no comment sends the reader to make or the kit's source tree or a
    params file the workspace lacks, and each params file validates (my-server.yaml once its model placeholder is
    filled in)."""
    import re

    done = subprocess.run([sys.executable, "-m", "launchlab", "init", str(tmp_path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    params_files = sorted((tmp_path / "params").glob("*.yaml"))
    assert params_files
    for path in params_files:
        [schema] = re.findall(r"#\s*yaml-language-server:\s*\$schema=(\S+)", path.read_text())
        target = (path.parent / schema).resolve()
        assert target.is_file() and target.is_relative_to(tmp_path.resolve()), f"{path.name}: {schema}"
        json.loads(target.read_text())
        check = subprocess.run([sys.executable, "-m", "launchlab", "validate", str(path)], capture_output=True,
                               text=True, cwd=tmp_path, timeout=120)
        if path.name == "my-server.yaml":  # the one to fill in: refused until its model placeholder is yours
            assert check.returncode == 2 and "`/models/your-model` is a placeholder" in check.stderr, check.stderr
            filled = path.read_text().replace("/models/your-model", "/models/mine")
            assert params.loads(filled, path.name).experiment == "my-server-first-look"
        else:
            assert check.returncode == 0, f"{path.name}: {check.stderr}"
    present = {p.name for p in (tmp_path / "params").iterdir()}
    for path in [*params_files, *(tmp_path / "notebooks").glob("*.ipynb"), tmp_path / "README.md"]:
        for line in _mentions(path.read_text()):
            assert "make " not in line and "lib/" not in line, f"{path.name}: {line}"
            for named in re.findall(r"[\w.-]+\.yaml\b", line):
                assert named in present, f"{path.name} names {named}, which the workspace lacks: {line}"
