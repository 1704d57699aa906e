"""Patches as a factor level, on a real package installed from a wheel into a throwaway venv."""

import base64
import difflib
import hashlib
import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, connect, write_params
from launchlab import params
from launchlab.hosts import provenance
from launchlab.hosts.sim import SimHost
from launchlab.run import lifecycle
from launchlab.runner import runview
from launchlab.runner.plan import make_plan
from launchlab.store import rundir

pytestmark = pytest.mark.slow
SERVER = textwrap.dedent("""\
    import sys
    import time


    def main():
        print("tinysrv starting", flush=True)
        if "--fail" in sys.argv:
            sys.exit(3)
        print("tinysrv ready", flush=True)
        time.sleep(600)


    if __name__ == "__main__":
        main()
""")


@pytest.fixture(scope="module")
def tiny_venv(tmp_path_factory):
    """A venv with `tinysrv` installed from a wheel (so it has a RECORD with sha256 hashes)."""
    base = tmp_path_factory.mktemp("tiny")
    src = base / "src"
    (src / "tinysrv").mkdir(parents=True)
    (src / "tinysrv" / "__init__.py").write_text("")
    (src / "tinysrv" / "server.py").write_text(SERVER)
    wheel = build_wheel(src, base / "dist")
    # no pip inside (ensurepip costs seconds): this environment's pip installs into it
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(base / "venv")], check=True)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(base / "venv/bin/python"), "install", "-q",
                    "--no-index", str(wheel)], check=True)
    return base


def build_wheel(src: Path, dist: Path) -> Path:
    """A wheel is a zip with a dist-info folder; writing it directly needs no build backend."""
    dist.mkdir()
    files = {f"tinysrv/{p.name}": p.read_bytes() for p in sorted((src / "tinysrv").iterdir())}
    info = "tinysrv-1.0.dist-info"
    files[f"{info}/METADATA"] = b"Metadata-Version: 2.1\nName: tinysrv\nVersion: 1.0\n"
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: launchlab-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = [f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
              for name, data in files.items()]
    files[f"{info}/RECORD"] = ("\n".join(record + [f"{info}/RECORD,,"]) + "\n").encode()
    wheel = dist / "tinysrv-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return wheel


def make_patch(folder: Path, old: str, new: str, name: str) -> Path:
    diff = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                "a/tinysrv/server.py", "b/tinysrv/server.py")
    path = folder / name
    path.write_text("".join(diff))
    return path


def experiment(tmp_path, venv: Path, patch: Path) -> Path:
    return write_params(tmp_path, f"""\
        experiment: patched
        hosts:
          box: {{transport: sim, gpus: 1, workdir: {tmp_path / 'w'}}}
        server:
          kind: generic
          command: [{venv / 'bin/python'}, -m, tinysrv.server]
          ready: {{timeout_s: 20, log_pattern: "tinysrv ready"}}
          stop_grace_s: 5
        factors:
          debug:
            "off": {{}}
            "on": {{patches: [{patch.name}]}}
          fail:
            "no": {{}}
            "yes": {{flags: {{--fail: true}}}}
        baseline: {{debug: "off", fail: "no"}}
        """)


def test_a_patch_is_applied_for_its_runs_and_reverted_after_them_even_when_they_fail(tmp_path, sim_root, tiny_venv):
    instrumented = SERVER.replace('    print("tinysrv starting", flush=True)\n',
                                  '    print("tinysrv starting", flush=True)\n    print("DEBUG tiny: value=1 GiB", flush=True)\n')
    patch = make_patch(tmp_path, SERVER, instrumented, "debug.diff")
    path = experiment(tmp_path, tiny_venv / "venv", patch)
    exp = params.load(path)
    assert exp.factors["debug"]["on"].patches == [str(patch)]  # resolved next to the params file
    host = connect(exp)
    run_dir = runview.ensure_run_dir(path)
    argv = [str(tiny_venv / "venv/bin/python"), "-m", "tinysrv.server"]
    by_levels = {tuple(r.variant.levels.values()): r for r in make_plan(exp)}
    for levels, expect in ((("on", "no"), "ready"), (("on", "yes"), "failed")):
        run = by_levels[levels]
        result = lifecycle.run_one(exp, run, run_dir, host)
        assert result.status == expect
        log = (rundir.RunDir(run_dir).run(run.run_id).path / "server.log").read_text()
        assert "DEBUG tiny: value=1 GiB" in log  # the patched code ran
        assert any("pristine (RECORD check): True" in n for n in result.notes), result.notes
        facts = provenance.integrity(host, argv)
        assert facts["modified"] == [] and facts["added"] == [] and facts["files_checked"] >= 2
        prov = json.loads((rundir.RunDir(run_dir).run(run.run_id).path / "provenance.json").read_text())
        assert prov["patched"] is True and prov["patches"] == [str(patch)]
    plain = lifecycle.run_one(exp, by_levels[("off", "no")], run_dir, host)
    assert "DEBUG tiny" not in (rundir.RunDir(run_dir).run(plain.run_id).path / "server.log").read_text()


def test_a_modified_installed_file_shows_in_the_integrity_check(tmp_path, sim_root, tiny_venv):
    host = SimHost("box", params.SimSpec(transport="sim", gpus=1))
    argv = [str(tiny_venv / "venv/bin/python"), "-m", "tinysrv.server"]
    site = Path(provenance.integrity(host, argv)["root"])
    target = site / "tinysrv" / "server.py"
    original = target.read_text()
    try:
        target.write_text(original + "\n# a debug print someone forgot\n")
        (site / "tinysrv" / "extra.py").write_text("")
        facts = provenance.integrity(host, argv)
        assert facts["modified"] == ["tinysrv/server.py"] and facts["added"] == ["tinysrv/extra.py"]
    finally:
        target.write_text(original)
        (site / "tinysrv" / "extra.py").unlink()


def test_a_patch_that_does_not_apply_stops_everything_before_launch(tmp_path, sim_root, tiny_venv):
    patch = make_patch(tmp_path, SERVER.replace("tinysrv starting", "something else"), SERVER, "stale.diff")
    path = experiment(tmp_path, tiny_venv / "venv", patch)
    res = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), "--out", str(tmp_path / "out")],
                         capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 1
    assert "stale.diff does not apply to tinysrv 1.0" in res.stderr and "nothing was launched" in res.stderr
    assert not (tmp_path / "out").exists()


def test_instrument_applies_the_kinds_patch_for_the_version_on_the_host_and_refuses_another(tmp_path, sim_root,
                                                                                           tiny_venv, monkeypatch):
    """Issue 48: `instrument: true` is the kind's instrumentation for the server version installed on the host, read
    there (the package's own record) — a log need not state its version. A version the kit has no patch for stops
    before any launch, naming it."""
    import dataclasses

    from launchlab.errors import HostError
    from launchlab.hosts import patching
    from launchlab.logparse import kinds
    from launchlab.logparse.serverkind import Instrumentation

    instrumented = SERVER.replace('    print("tinysrv starting", flush=True)\n',
                                  '    print("tinysrv starting", flush=True)\n    print("DEBUG tiny: value=2 GiB", flush=True)\n')
    patch = make_patch(tmp_path, SERVER, instrumented, "tiny-debug.diff")
    monkeypatch.setattr(patching.workspace, "template", lambda *parts: tmp_path / parts[-1])
    path = experiment(tmp_path, tiny_venv / "venv", patch)
    path.write_text(path.read_text().replace(f'"on": {{patches: [{patch.name}]}}', '"on": {instrument: true}'))
    exp = params.load(path)
    host = connect(exp)
    run = next(r for r in make_plan(exp) if r.variant.levels == {"debug": "on", "fail": "no"})
    argv = [str(tiny_venv / "venv/bin/python"), "-m", "tinysrv.server"]
    for versions, works in ((("1.0",), True), (("2.0", "2.1"), False)):
        tiny = Instrumentation(patch=patch.name, versions=versions, prints="DEBUG tiny: value=…")
        monkeypatch.setitem(kinds.KINDS, "generic", dataclasses.replace(kinds.KINDS["generic"], instrumentation=tiny))
        if not works:
            with pytest.raises(HostError, match=r"tinysrv 1\.0 is installed there; the kit's instrumentation patch "
                                                r"\(tiny-debug\.diff\) is for 2\.0, 2\.1 only.*nothing was launched"):
                patching.of_variant(host, argv, run.variant, "generic")
            continue
        assert patching.of_variant(host, argv, run.variant, "generic") == (str(patch),)
        run_dir = runview.ensure_run_dir(path)
        result = lifecycle.run_one(exp, run, run_dir, host)
        assert result.status == "ready"
        folder = rundir.RunDir(run_dir).run(run.run_id).path
        assert "DEBUG tiny: value=2 GiB" in (folder / "server.log").read_text()  # the kind's patch ran
        assert json.loads((folder / "provenance.json").read_text())["patches"] == [str(patch)]
        assert provenance.integrity(host, argv)["modified"] == []  # and was reverted
