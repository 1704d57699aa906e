"""scripts/server-example.sh's install, run for real in a temporary folder (SERVER_EXAMPLE_TMP) on parts cut as
scripts/server-wheels.sh cuts them (tar of wheels/, `split -d`, SHA256SUMS) from a small wheel made here: a part that
does not match SHA256SUMS, or a wheel pip refuses, stops the call with a message naming it and exit 1, and nothing counts
as installed (the script once went on and installed whatever it had). One script serves both real servers: the
tests run it as vllm and as sglang."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT
from otheruser import as_other, shared  # noqa: F401 (shared: the fixture)

SCRIPT = ROOT / "scripts/server-example.sh"
VERSIONS = {"vllm": "0.26.0", "sglang": "0.5.17"}


@pytest.fixture(params=sorted(VERSIONS))
def kind(request) -> str:
    return request.param


def _wheel(folder: Path, kind: str) -> Path:
    """A real, minimal wheel of a package named as the server (pip installs it with --no-index)."""
    dist = f"{kind}-{VERSIONS[kind]}"
    name = folder / f"{dist}-py3-none-any.whl"
    files = {f"{kind}/__init__.py": f"__version__ = '{VERSIONS[kind]}'\n".encode(),
             f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {kind}\nVersion: {VERSIONS[kind]}\n".encode(),
             f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                        b"Tag: py3-none-any\n"}
    record = "".join(f"{path},sha256={hashlib.sha256(data).hexdigest()},{len(data)}\n" for path, data in files.items())
    with zipfile.ZipFile(name, "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
        wheel.writestr(f"{dist}.dist-info/RECORD", record + f"{dist}.dist-info/RECORD,,\n")
    return name


def _parts(tmp_path: Path, kind: str, wheel_bytes: bytes | None = None) -> Path:
    """.KIND/parts as scripts/server-wheels.sh makes them: two parts of a tar of wheels/, and their SHA256SUMS."""
    build, parts = tmp_path / "build", tmp_path / "parts"
    (build / "wheels").mkdir(parents=True)
    parts.mkdir()
    wheel = _wheel(build / "wheels", kind)
    if wheel_bytes is not None:
        wheel.write_bytes(wheel_bytes)
    subprocess.run(["tar", "cf", str(build / "bundle.tar"), "-C", str(build), "wheels"], check=True)
    half = (build / "bundle.tar").stat().st_size // 2 + 1
    subprocess.run(["split", "-b", str(half), "-d", str(build / "bundle.tar"), str(parts / "part-")], check=True)
    subprocess.run("sha256sum part-* > SHA256SUMS", shell=True, cwd=parts, check=True)
    return parts


def _call(tmp_path: Path, parts: Path, kind: str) -> subprocess.CompletedProcess:
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    env = {**os.environ, "SERVER_PARTS": str(parts), "SERVER_EXAMPLE_TMP": str(tmp_path / "machine"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # python3: this one, with pip
    return subprocess.run(["bash", str(SCRIPT), kind, str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_checked_parts_are_installed_once(tmp_path, kind):
    parts = _parts(tmp_path, kind)
    first = _call(tmp_path, parts, kind)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "parts on the machine: 2 of 2" in first.stdout and "installed 1 packages into" in first.stdout
    assert (tmp_path / "machine/site" / kind / "__init__.py").exists()
    again = _call(tmp_path, parts, kind)
    assert again.returncode == 0 and f"{kind} installed in" in again.stdout


def test_a_call_with_parts_still_to_come_succeeds_and_says_which(tmp_path, kind):
    parts = _parts(tmp_path, kind)
    (parts / "part-01").unlink()
    done = _call(tmp_path, parts, kind)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "still to carry: part-01" in done.stdout
    assert not (tmp_path / "machine/site").exists()


def test_a_corrupt_part_stops_the_call_and_installs_nothing(tmp_path, kind):
    parts = _parts(tmp_path, kind)
    data = bytearray((parts / "part-00").read_bytes())
    data[len(data) // 2] ^= 0xFF  # a byte flipped on the way
    (parts / "part-00").write_bytes(bytes(data))
    failed = _call(tmp_path, parts, kind)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    # (the call's output, stderr too, goes to stdout and to its log)
    assert "server-example: carried parts that do not match SHA256SUMS: part-00 (removed" in failed.stdout
    assert not (tmp_path / "machine/site" / kind).exists()
    assert not (tmp_path / "machine" / f"{kind}-parts/part-00").exists()  # to be carried again
    [log] = (tmp_path / "out").glob("call-*.log")  # the call's log still comes back
    assert "do not match SHA256SUMS" in log.read_text()
    (parts / "part-00").unlink()  # and the next call, without that part, waits for it
    waiting = _call(tmp_path, parts, kind)
    assert waiting.returncode == 0 and "still to carry: part-00" in waiting.stdout


def test_a_wheel_pip_refuses_stops_the_call_with_pips_words(tmp_path, kind):
    parts = _parts(tmp_path, kind, wheel_bytes=b"not a zip file")  # checks against SHA256SUMS, but no wheel
    failed = _call(tmp_path, parts, kind)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    # the line names the wheel, and pip's own message is not filtered away
    assert f"server-example: pip cannot install {kind}-{VERSIONS[kind]}-py3-none-any.whl" in failed.stdout
    assert "is invalid" in failed.stdout, failed.stdout
    assert not (tmp_path / "machine" / f"{kind}-example/installed").exists()
    again = _call(tmp_path, parts, kind)  # not taken as installed by the next call
    assert again.returncode == 1 and f"{kind} installed in" not in again.stdout


# Issue 50: the script deleted what SHA256SUMS named (a carried file, as the parts are) and ran what another user of
# the machine put in its fixed /tmp folders (site/ first on PYTHONPATH, the `installed` mark). Each test failed on
# the code before (f288ef9).


def test_sha256sums_naming_anything_but_parts_is_refused_and_nothing_is_removed(tmp_path, kind):
    parts = _parts(tmp_path, kind)
    victims = [tmp_path / "victim.txt", tmp_path / "machine-victim.txt"]
    for victim in victims:
        victim.write_text("not a part")
    with open(parts / "SHA256SUMS", "a") as fh:  # wrong sums for files outside the parts: "do not match"
        fh.write(f"{'0' * 64}  ../../victim.txt\n{'0' * 64}  {victims[1]}\n")
    failed = _call(tmp_path, parts, kind)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "SHA256SUMS must hold only lines '<sha256>  part-NN'" in failed.stdout and "../../victim.txt" in failed.stdout
    assert all(v.read_text() == "not a part" for v in victims)
    assert not (tmp_path / "machine/site" / kind).exists()


def test_a_folder_others_can_write_is_not_the_scripts_and_what_they_put_there_never_runs(tmp_path, kind, shared):  # noqa: F811
    parts = _parts(tmp_path, kind)
    # the other user, first on the machine, made the script's folders with a package and the mark that says installed
    as_other(f"mkdir -p {shared}/site/{kind} {shared}/{kind}-example && echo 'raise SystemExit(\"planted\")' > "
             f"{shared}/site/{kind}/__init__.py && touch {shared}/{kind}-example/installed")
    env = {**os.environ, "SERVER_PARTS": str(parts), "SERVER_EXAMPLE_TMP": str(shared),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    out = tmp_path / "out"
    out.mkdir()
    done = subprocess.run(["bash", str(SCRIPT), kind, str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 1 and f"{kind} installed in" not in done.stdout, done.stdout + done.stderr
    assert f"{shared} is writable by other users" in done.stderr, done.stderr


def test_by_default_the_script_works_in_a_private_folder_of_its_own_kept_across_calls(tmp_path, kind, shared):  # noqa: F811
    parts = _parts(tmp_path, kind)
    project = tmp_path / "project"  # the project root the script runs from (it records its folder there)
    project.mkdir()
    as_other(f"mkdir -p {shared}/site/{kind} {shared}/{kind}-example && touch {shared}/{kind}-example/installed")
    env = {**os.environ, "SERVER_PARTS": str(parts), "TMPDIR": str(shared),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    out = tmp_path / "out"
    out.mkdir()
    calls = [subprocess.run(["bash", str(SCRIPT), kind, str(out)], cwd=project, env=env, capture_output=True,
                            text=True, timeout=300) for _ in range(2)]
    assert [c.returncode for c in calls] == [0, 0], calls[0].stdout + calls[0].stderr
    folder = Path((project / f".{kind}" / "tmp-folder").read_text().strip())
    assert folder.parent == shared and folder.stat().st_uid == os.getuid()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert (folder / "site" / kind / "__init__.py").exists() and "installed 1 packages into" in calls[0].stdout
    assert f"{kind} installed in {folder}/site" in calls[1].stdout  # the same folder, found again
    assert not list((shared / "site" / kind).iterdir())  # the other user's folder: never used
