"""A line for the terminal that started this process, past a notebook kernel's capture of its output.

papermill (and JupyterLab) run a notebook in a kernel whose sys.stdout and sys.stderr are the notebook's: a print
there reaches the executed .ipynb, never the terminal the user typed `papermill …` in. ipykernel keeps that
terminal's descriptor as the stream's `fileno()` (what a subprocess writing to its stderr inherits), so a line
written there reaches the terminal alone — not the kernel's own descriptor 2, which ipykernel also copies into the
notebook (the line would show there twice, once in red). Outside a kernel it is plain stderr.
"""

from __future__ import annotations

import io
import os
import sys

from launchlab.escaping import visible


def say(line: str) -> None:
    """`line` (its control characters shown as `\\x..`) on a line of its own on the terminal; dropped where there is
    none to write to."""
    try:
        sys.stderr.flush()  # what was printed before stays before
        fd = sys.stderr.fileno()
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        # a kernel that leaves descriptor 2 alone (ipykernel does under pytest, or told so): it is the terminal
        fd = getattr(sys.__stderr__, "fileno", lambda: -1)()
    if fd < 0:
        return
    # papermill's progress bar holds the line without a newline: on a terminal the line starts afresh over it
    # (carriage return, erase the line; the bar redraws below), elsewhere (a log file) on a line of its own
    start = "\r\x1b[K" if os.isatty(fd) else "\n"
    data = (start + visible(line) + "\n").encode("utf-8", errors="replace")
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:  # the terminal is gone (a closed window, a pipe nobody reads)
        return
