"""Issue 39, part 4: `launchlab import` reads only regular files — a FIFO or device named as a log, a capture or
the imports file is refused at once (it hung before, with no message; /dev/zero was "no such log file"), a link out
of the imports file's folder only with --follow-symlinks (a log linked to a 0600 file was copied into a
world-readable server.log), a file over the limit with the limit named — and streams what it copies, whatever its
lines (a 2 GB log without a newline was held whole, twice). `validate` refuses a FIFO at once too."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import LAUNCHLAB, ROOT
from launchlab import masking
from launchlab.errors import ImportFailed, ParamsError
from launchlab.runner import importer
from launchlab.store import rundir

LOG = ROOT / "params" / "demo-import" / "logs" / "car_085.log"


def imports_with(folder: Path, logs: list[str], smi: str | None = None) -> Path:
    body = {"experiment": "untrusted", "server": {"kind": "sglang"}, "factors": {"f": {"a": {}, "b": {}}},
            "baseline": {"f": "a"},
            "runs": [{"levels": {"f": "ab"[i % 2]}, "log": log, **({"smi": smi} if smi and i == 0 else {})}
                     for i, log in enumerate(logs)]}
    path = folder / "imports.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    return path


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCHLAB, *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def folder(tmp_path) -> Path:
    logs = tmp_path / "shared-logs"
    logs.mkdir()
    shutil.copy(LOG, logs / "a.log")
    shutil.copy(LOG, logs / "b.log")
    return logs


def test_a_link_out_of_the_folder_is_refused_unless_followed_and_the_copy_is_private(folder, tmp_path):
    private = tmp_path / "home" / "secret-notes.log"
    private.parent.mkdir()
    shutil.copy(LOG, private)
    os.chmod(private, 0o600)
    (folder / "c.log").symlink_to(private)
    path = imports_with(folder, ["a.log", "c.log"])
    with pytest.raises(ImportFailed, match=r"c\.log\): a symbolic link to .*secret-notes\.log, outside the imports "
                                           r"file's folder: .*--follow-symlinks"):
        importer.import_runs(path, tmp_path / "out", summarize=False)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("server.log"))

    run_dir = importer.import_runs(path, tmp_path / "out", summarize=False, follow_symlinks=True)
    for log in rundir.RunDir(run_dir).path.glob("runs/*/server.log"):
        assert log.stat().st_mode & 0o777 == 0o600, log


def test_a_link_inside_the_folder_is_a_file_of_the_folder(folder, tmp_path):
    (folder / "latest.log").symlink_to("b.log")
    run_dir = importer.import_runs(imports_with(folder, ["a.log", "latest.log"]), tmp_path / "out", summarize=False)
    assert len(list(run_dir.glob("runs/*/server.log"))) == 2


@pytest.mark.parametrize("name", ["log", "smi"])
def test_a_fifo_as_a_log_or_capture_is_refused_at_once(folder, tmp_path, name):
    os.mkfifo(folder / "pipe")  # no writer ever comes: reading it waits forever
    logs, smi = (["pipe", "b.log"], None) if name == "log" else (["a.log", "b.log"], "pipe")
    proc = cli("import", str(imports_with(folder, logs, smi)), "--out", str(tmp_path / "out"))
    assert proc.returncode == 1 and f"({name}: {folder / 'pipe'}): it is a FIFO (named pipe), not a regular file" \
        in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def test_a_device_is_named_as_one(folder, tmp_path):
    with pytest.raises(ImportFailed, match=r"\(log: /dev/zero\): it is a character device, not a regular file"):
        importer.import_runs(imports_with(folder, ["/dev/zero", "b.log"]), tmp_path / "out", summarize=False)


def test_a_fifo_as_the_imports_file_or_the_params_file_is_refused_at_once(tmp_path):
    fifo = tmp_path / "imports.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ParamsError, match=r"it is a FIFO \(named pipe\), not a regular file"):
        importer.import_runs(fifo, tmp_path / "out", summarize=False)
    proc = cli("validate", str(fifo))
    assert proc.returncode != 0 and "it is a FIFO (named pipe), not a regular file" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_files_over_the_limit_are_refused_with_it_before_they_are_read(folder, tmp_path):
    with open(folder / "huge.log", "wb") as fh:
        fh.truncate(importer.MAX_FILE_BYTES + 1)  # sparse: costs nothing, would take minutes to read
    with pytest.raises(ImportFailed, match=r"huge\.log\): it is 1 GiB, larger than the limit of 1 GiB"):
        importer.import_runs(imports_with(folder, ["huge.log", "b.log"]), tmp_path / "out", summarize=False)
    imports = tmp_path / "big-imports.yaml"
    with open(imports, "wb") as fh:
        fh.truncate(300 * 2**20)  # the 300 MB imports file the audit fed it
    with pytest.raises(ParamsError, match="larger than the limit of 256 KiB"):
        importer.import_runs(imports, tmp_path / "out", summarize=False)


class Recording(io.BytesIO):
    """A destination that remembers the largest single write."""

    largest = 0

    def write(self, data) -> int:
        self.largest = max(self.largest, len(data))
        return super().write(data)


def test_a_copy_is_masked_in_bounded_pieces_however_long_its_lines():
    secret = "sk-live-0123456789abcdef"
    line = (b"x" * 3_000_000 + secret.encode() + b"y" * 2_000_000) * 3  # one 15 MB line, the secret thrice
    dst = Recording()
    read = masking.Masker((secret,)).stream(io.BytesIO(line), dst, chunk_bytes=1 << 16)
    assert read == len(line) and dst.largest <= (1 << 16) + len(secret)
    copied = dst.getvalue()
    assert secret.encode() not in copied and copied.count(masking.MASK.encode()) == 3
    assert copied == line.replace(secret.encode(), masking.MASK.encode())


def test_an_imported_log_of_one_endless_line_is_copied_masked_and_whole(folder, tmp_path):
    secret = "hf_abcdefghijklmnopqrstuvwx"
    with open(folder / "b.log", "ab") as fh:  # a progress bar that never printed a newline, a token in it
        fh.write(b"\r" + b"#" * 5_000_000 + f" HF_TOKEN={secret} ".encode() + b"#" * 5_000_000)
    body = yaml.safe_load(imports_with(folder, ["a.log", "b.log"]).read_text())
    body["secrets"] = ["HF_TOKEN"]
    body["runs"][1]["command"] = f"env HF_TOKEN={secret} python3 -m sglang.launch_server"
    path = folder / "imports.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    run_dir = importer.import_runs(path, tmp_path / "out", summarize=False)
    [copy] = [p for p in run_dir.glob("runs/02_*/server.log")]
    data = copy.read_bytes()
    assert secret.encode() not in data and len(data) == (folder / "b.log").stat().st_size - len(secret) + 4
