"""The one exception tree of launchlab: every error the kit raises on purpose.

    LaunchlabError
    ├── ParamsError        a params file is wrong (file, field path, what to write instead)
    ├── HostError          a host command, transfer or connection failed
    ├── ParseError         a log or telemetry file cannot be read at all
    ├── RunDirError        a run directory is missing, incomplete or not ours
    ├── NotebookFailed     papermill could not execute a notebook
    ├── ImportFailed       `launchlab import` cannot use a file it was given (nothing is written)
    └── NotYours           a folder the kit would use (under a shared temp directory) is not this user's own

Messages say what happened, where, and what to do; the CLI prints them without a traceback.
"""

from __future__ import annotations


class LaunchlabError(Exception):
    """Base of every error the kit raises on purpose."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows of it in a notebook (JupyterLab, papermill's output and terminal): its message alone,
        as the CLI prints it — the message says what happened, where and what to do; the kit's frames buried it."""
        return [f"{type(self).__name__}: {self}"]


class ParamsError(LaunchlabError):
    """A params file does not validate. ``problems`` lists every problem, one line each."""

    def __init__(self, path: str, problems: list[str]):
        self.path = path
        # once each: a value that fails every branch of a union is reported by each branch in the same words
        self.problems = list(dict.fromkeys(problems))
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"{path}: {len(self.problems)} problem(s):\n{lines}")


class HostError(LaunchlabError):
    """A command, transfer or connection on a host failed."""

    def __init__(self, host: str, message: str):
        self.host = host
        super().__init__(f"host {host!r}: {message}")


class ParseError(LaunchlabError):
    """A file cannot be parsed at all (as opposed to parsing to 'no data')."""


class RunDirError(LaunchlabError):
    """A run directory is missing, incomplete, or not a launchlab run directory."""


class NotebookFailed(LaunchlabError):
    """papermill could not execute a notebook."""

    def __init__(self, notebook: str, message: str):
        self.notebook = notebook
        super().__init__(f"notebook {notebook}: {message}")


class ImportFailed(LaunchlabError):
    """`launchlab import` cannot use what it was given: every problem, one line each (file and reason)."""

    def __init__(self, experiment: str, problems: list[str]):
        self.problems = list(problems)
        lines = "\n".join(f"  {p}" for p in self.problems)
        super().__init__(f"import of {experiment!r}: {len(self.problems)} problem(s), nothing was written:\n{lines}")


class NotYours(LaunchlabError):
    """A folder the kit would put its files in is not this user's alone (another user's, writable by others, or a
    link): anyone else who can write there could plant what the kit then runs or writes through."""
