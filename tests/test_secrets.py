"""No secret value reaches any file of a run directory — masked by name and by value — while the server
receives every real value, from an env file that is 0600 in a 0700 run folder on the host."""

import hashlib
import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import LAUNCHLAB
from launchlab.masking import MASK, Masker

pytestmark = pytest.mark.slow

SECRETS = {
    "HF_TOKEN": "hf_AbCdEfGhIjKlMnOp1234",           # masked by name
    "DB_URL": "postgres://app:Sup3rS3cretPw@db.internal:5432/runs",  # a URL's password, name not secret
    "GITHUB_PAT": "ghp_patvalue0987654321",           # *_PAT
    "MY_THING": "declared-in-secrets-list",           # named under `secrets:`
    "LEVEL_API_KEY": "level-only-key-5566",           # set by one level only
}
FLAG_SECRETS = {"--api-key": "sk-live-flag-abc123", "--hf-token": "hf_FlagToken456789", "--db-password": "pw-flag-778899"}
SERVER = """\
import hashlib, os, sys, time
print('argv:', ' '.join(sys.argv[1:]), flush=True)
for k in sorted(os.environ):
    if k in NAMES:
        v = os.environ[k]
        print(k, '=', v, 'sha', hashlib.sha256(v.encode()).hexdigest()[:16], flush=True)
print('envfile mode', oct(os.stat('server.env').st_mode & 0o777), flush=True)
print('folder mode', oct(os.stat('.').st_mode & 0o777), flush=True)
print('READY', flush=True)
time.sleep(60)
""".replace("NAMES", repr(sorted(SECRETS)))


def secret_params(tmp_path: Path) -> Path:
    command = ["python3", "-c", SERVER]
    for flag, value in FLAG_SECRETS.items():
        command += [flag, value]
    spec = {
        "experiment": "secrets",
        "hosts": {"box": {"transport": "sim", "gpus": 1, "pace": 0.2, "workdir": str(tmp_path / "hostwork")}},
        "server": {"kind": "generic", "command": command,
                   "env": {k: v for k, v in SECRETS.items() if k != "LEVEL_API_KEY"},
                   "ready": {"timeout_s": 30, "log_pattern": "^READY"}, "stop_grace_s": 3,
                   "smoke": {"url": "http://app:Sup3rS3cretPw@127.0.0.1:9/{port}", "timeout_s": 2, "expect_status": 200}},
        "factors": {"key": {"plain": {}, "keyed": {"env": {"LEVEL_API_KEY": SECRETS["LEVEL_API_KEY"]}}}},
        "baseline": {"key": "plain"},
        "secrets": ["MY_THING"],
        "drain": {"timeout_s": 5, "tolerance_mib": 64},
    }
    path = tmp_path / "secrets.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def every_text(run_dir: Path):
    """(path, text) of every file of a run directory; parquet frames as their CSV."""
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file()):
        if path.suffix == ".parquet":
            yield path, pd.read_parquet(path).to_csv()
        else:
            yield path, path.read_bytes().decode("utf-8", errors="replace")


def test_no_secret_value_is_written_anywhere_in_the_run_directory(tmp_path, sim_root):
    path = secret_params(tmp_path)
    proc = subprocess.run([*LAUNCHLAB, "run", str(path), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip())
    values = [*SECRETS.values(), *FLAG_SECRETS.values(), "Sup3rS3cretPw"]
    leaks = [(p.relative_to(run_dir), v) for p, text in every_text(run_dir) for v in values if v in text]
    assert leaks == []
    log = (run_dir / "runs" / "02_key-keyed_rep1" / "server.log").read_text()
    # the server got every real value (their digests), and the run folder on the host was private
    for name, value in SECRETS.items():
        assert f"{name} = " in log and hashlib.sha256(value.encode()).hexdigest()[:16] in log, name
    assert "envfile mode 0o600" in log and "folder mode 0o700" in log
    assert f"--api-key {MASK}" in log
    prov = json.loads((run_dir / "runs" / "02_key-keyed_rep1" / "provenance.json").read_text())
    assert prov["env"]["HF_TOKEN"] == MASK and prov["env"]["MY_THING"] == MASK
    assert prov["env"]["DB_URL"] == f"postgres://app:{MASK}@db.internal:5432/runs"
    assert prov["argv"][prov["argv"].index("--hf-token") + 1] == MASK
    resolved = (run_dir / "experiment.yaml").read_text()
    assert "HF_TOKEN: '****'" in resolved or "HF_TOKEN: \"****\"" in resolved


def test_masking_by_value_reaches_argv_urls_and_text():
    masker = Masker.collect({"HF_TOKEN": "hf_secretvalue", "PATH": "/usr/bin"}, ["serve", "--api-key=sk-123456"],
                            more=["declared-value"])
    assert masker.text("token hf_secretvalue and sk-123456 and declared-value") == f"token {MASK} and {MASK} and {MASK}"
    assert masker.env({"HF_TOKEN": "x", "PATH": "/usr/bin", "NOTE": "uses hf_secretvalue"}) == {
        "HF_TOKEN": MASK, "PATH": "/usr/bin", "NOTE": f"uses {MASK}"}
    assert masker.argv(["serve", "--hf-token", "abc", "--port", "80", "--api-key=sk-123456"]) == [
        "serve", "--hf-token", MASK, "--port", "80", f"--api-key={MASK}"]
    assert Masker().text("redis://u:p4ss@host/0") == f"redis://u:{MASK}@host/0"
    assert masker.bytes(b"x hf_secretvalue y") == f"x {MASK} y".encode()
