"""scripts/vllm-example.sh's install, run for real in a temporary folder (VLLM_EXAMPLE_TMP) on parts cut as
scripts/vllm-wheels.sh cuts them (tar of wheels/, `split -d`, SHA256SUMS) from a small wheel made here: a part that
does not match SHA256SUMS, or a wheel pip refuses, stops the call with a message and exit 1, and nothing counts
as installed (the script once went on and installed whatever it had)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from conftest import ROOT

SCRIPT = ROOT / "scripts/vllm-example.sh"


def _wheel(folder: Path) -> Path:
    """A real, minimal wheel of a package named vllm (pip installs it with --no-index)."""
    name = folder / "vllm-0.26.0-py3-none-any.whl"
    files = {"vllm/__init__.py": b"__version__ = '0.26.0'\n",
             "vllm-0.26.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: vllm\nVersion: 0.26.0\n",
             "vllm-0.26.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                            b"Tag: py3-none-any\n"}
    record = "".join(f"{path},sha256={hashlib.sha256(data).hexdigest()},{len(data)}\n" for path, data in files.items())
    with zipfile.ZipFile(name, "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
        wheel.writestr("vllm-0.26.0.dist-info/RECORD", record + "vllm-0.26.0.dist-info/RECORD,,\n")
    return name


def _parts(tmp_path: Path, wheel_bytes: bytes | None = None) -> Path:
    """.vllm/parts as scripts/vllm-wheels.sh makes them: two parts of a tar of wheels/, and their SHA256SUMS."""
    build, parts = tmp_path / "build", tmp_path / "parts"
    (build / "wheels").mkdir(parents=True)
    parts.mkdir()
    wheel = _wheel(build / "wheels")
    if wheel_bytes is not None:
        wheel.write_bytes(wheel_bytes)
    subprocess.run(["tar", "cf", str(build / "bundle.tar"), "-C", str(build), "wheels"], check=True)
    half = (build / "bundle.tar").stat().st_size // 2 + 1
    subprocess.run(["split", "-b", str(half), "-d", str(build / "bundle.tar"), str(parts / "part-")], check=True)
    subprocess.run("sha256sum part-* > SHA256SUMS", shell=True, cwd=parts, check=True)
    return parts


def _call(tmp_path: Path, parts: Path) -> subprocess.CompletedProcess:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    env = {**os.environ, "VLLM_PARTS": str(parts), "VLLM_EXAMPLE_TMP": str(tmp_path / "machine"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # python3: this one, with pip
    return subprocess.run(["bash", str(SCRIPT), str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_checked_parts_are_installed_once(tmp_path):
    parts = _parts(tmp_path)
    first = _call(tmp_path, parts)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "parts on the machine: 2 of 2" in first.stdout and "installed 1 packages into" in first.stdout
    assert (tmp_path / "machine/site/vllm/__init__.py").exists()
    again = _call(tmp_path, parts)
    assert again.returncode == 0 and "vLLM installed in" in again.stdout


def test_a_call_with_parts_still_to_come_succeeds_and_says_which(tmp_path):
    parts = _parts(tmp_path)
    (parts / "part-01").unlink()
    done = _call(tmp_path, parts)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "still to carry: part-01" in done.stdout
    assert not (tmp_path / "machine/site").exists()


def test_a_corrupt_part_stops_the_call_and_installs_nothing(tmp_path):
    parts = _parts(tmp_path)
    data = bytearray((parts / "part-00").read_bytes())
    data[len(data) // 2] ^= 0xFF  # a byte flipped on the way
    (parts / "part-00").write_bytes(bytes(data))
    failed = _call(tmp_path, parts)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    # (the call's output, stderr too, goes to stdout and to its log)
    assert "vllm-example: carried parts that do not match SHA256SUMS: part-00 (removed" in failed.stdout
    assert not (tmp_path / "machine/site/vllm").exists()
    assert not (tmp_path / "machine/vch/part-00").exists()  # to be carried again
    [log] = (tmp_path / "out").glob("call-*.log")  # the call's log still comes back
    assert "do not match SHA256SUMS" in log.read_text()
    (parts / "part-00").unlink()  # and the next call, without that part, waits for it
    waiting = _call(tmp_path, parts)
    assert waiting.returncode == 0 and "still to carry: part-00" in waiting.stdout


def test_a_wheel_pip_refuses_stops_the_call_with_pips_words(tmp_path):
    parts = _parts(tmp_path, wheel_bytes=b"not a zip file")  # checks against SHA256SUMS, but no wheel
    failed = _call(tmp_path, parts)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "vllm-example: pip could not install the wheels" in failed.stdout
    assert "vllm-0.26.0-py3-none-any.whl" in failed.stdout  # pip's own message, no longer filtered away
    assert not (tmp_path / "machine/vllm-example/installed").exists()
    again = _call(tmp_path, parts)  # not taken as installed by the next call
    assert again.returncode == 1 and "vLLM installed in" not in again.stdout
