"""`launchlab init [DIR]`: a workspace of one's own — params, notebooks to work in, outputs — next to the
user's deployment configs, for an installed kit as much as for this repository.

The files come from the package (importlib.resources), never from a source tree: the notebook templates and
the shipped params are package data (in this repository, templates/notebooks and templates/params are links to
the top-level folders, so there is one copy of each). Running init again keeps every file that exists — the
user may have edited it — and says what it skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from launchlab.errors import LaunchlabError

NOTEBOOKS = ("run_variant.ipynb", "summary.ipynb")
PARAMS = ("demo.yaml", "my-server.yaml", "params.schema.json")  # the schema each file's first line names

README = """\
# A launchlab workspace

    launchlab validate params/demo.yaml      # check a params file, say how many runs it plans
    launchlab run params/demo.yaml           # run it; the report lands in outputs/<experiment>/<time>/summary.html
    launchlab report outputs/<experiment>/<time>
    launchlab ls                             # the run directories under outputs/

- `params/demo.yaml`: the embedded experiment on a simulated 8-GPU host (no GPU needed) — does custom
  all-reduce or `--mem-fraction-static` decide SGLang's "Not enough memory" at startup?
- `params/my-server.yaml`: a commented starting point for your own server; `launchlab schema` prints every key.
- `notebooks/`: the two notebooks for working interactively (JupyterLab or papermill); they import the
  installed `launchlab` package. `run_variant.ipynb` runs one run, `summary.ipynb` renders a run directory.
- `outputs/`: run directories (git-ignored).
"""


@dataclass
class InitResult:
    root: Path
    written: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)


def template(*parts: str) -> Path:
    """A file of the package's templates folder, as a path (the package is installed as files, not zipped)."""
    path = Path(str(resources.files("launchlab").joinpath("templates", *parts)))
    if not path.exists():
        raise LaunchlabError(f"the installed launchlab package lacks templates/{'/'.join(parts)}: reinstall it")
    return path


def notebook_templates() -> Path:
    """The folder of run_variant.ipynb and summary.ipynb that `launchlab run` executes."""
    return template("notebooks")


def init(root: Path) -> InitResult:
    """Make (or complete) a workspace at root; never overwrite an existing file."""
    result = InitResult(root=root)
    files = {Path("README.md"): README.encode(), Path("outputs/.gitignore"): b"*\n"}
    files |= {Path("notebooks") / name: template("notebooks", name).read_bytes() for name in NOTEBOOKS}
    files |= {Path("params") / name: template("params", name).read_bytes() for name in PARAMS}
    try:
        for relative, content in files.items():
            target = root / relative
            if target.exists():
                result.skipped.append(relative)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "xb") as out:  # exclusive: a file made meanwhile is not overwritten either
                out.write(content)
            result.written.append(relative)
    except OSError as exc:
        raise LaunchlabError(f"cannot make the workspace in {root}: {exc.strerror} ({exc.filename})") from exc
    return result
