"""No secret value reaches any file of a run directory — masked by name and by value — while the server
receives every real value, from an env file that is 0600 in a 0700 run folder on the host."""

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import LAUNCHLAB
from launchlab import masking
from launchlab.masking import MASK, MIN_INHERITED_LEN, MIN_VALUE_LEN, Masker

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


PEM = ("-----BEGIN PRIVATE KEY-----\n"
       "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n"
       "b3N0cmFuZ2VrZXltYXRlcmlhbGZvcnRoZXRlc3Q0NTY3ODkw\n"
       "-----END PRIVATE KEY-----\n")
CALLER_KEY = "caller-shell-key-31415926"  # in the caller's environment only, never in the params
BODY_SECRETS = {"api_key": "sk-body-key-271828", "token": "body-token-161803", "password": "body-nested-pw-1414"}
SPREAD_SERVER = """\
import hashlib, http.server, json, os, sys
def digest(v):
    return hashlib.sha256(v.encode()).hexdigest()[:16]
pem, caller = os.environ['SIGNING_PEM'], os.environ['CALLER_API_KEY']
print('SIGNING_PEM =', pem, flush=True)
print('repr', repr(pem), 'sha', digest(pem), flush=True)
print('CALLER_API_KEY =', caller, 'sha', digest(caller), flush=True)
print('os.environ', json.dumps(dict((k, os.environ[k]) for k in ('CALLER_API_KEY', 'SIGNING_PEM'))), flush=True)
class Echo(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers['Content-Length']))
        print('body', body.decode(), 'sha', digest(body.decode()), flush=True)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'you sent ' + body)
server = http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), Echo)
print('READY', flush=True)
server.serve_forever()
"""


def spread_params(tmp_path: Path) -> Path:
    body = {"model": "m", "max_tokens": 8, "api_key": BODY_SECRETS["api_key"], "token": BODY_SECRETS["token"],
            "auth": {"user": "me", "password": BODY_SECRETS["password"]}}
    spec = {
        "experiment": "spread",
        "hosts": {"box": {"transport": "sim", "gpus": 1, "pace": 0.1, "workdir": str(tmp_path / "hostwork")}},
        "server": {"kind": "generic", "command": ["python3", "-c", SPREAD_SERVER, "{port}"],
                   "env": {"SIGNING_PEM": PEM},
                   "ready": {"timeout_s": 30, "log_pattern": "^READY"}, "stop_grace_s": 3,
                   "smoke": {"url": "http://127.0.0.1:{port}/v1/completions", "body": body, "timeout_s": 10}},
        "factors": {"size": {"a": {}, "b": {"env": {"OTHER": "1"}}}},
        "baseline": {"size": "a"},
        "secrets": ["SIGNING_PEM"],
        "drain": {"timeout_s": 5, "tolerance_mib": 64},
    }
    path = tmp_path / "spread.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_secrets_that_span_lines_come_from_the_callers_shell_or_sit_in_the_smoke_body_are_masked_everywhere(
        tmp_path, sim_root):
    path = spread_params(tmp_path)
    env = {**os.environ, "CALLER_API_KEY": CALLER_KEY}
    proc = subprocess.run([*LAUNCHLAB, "run", str(path), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip())
    values = [PEM, json.dumps(PEM)[1:-1], *(line for line in PEM.splitlines() if len(line) >= MIN_VALUE_LEN),
              CALLER_KEY, *BODY_SECRETS.values()]
    leaks = []
    for path_, text in every_text(run_dir):  # the parquet frames as their text, every file as its bytes too
        raw = path_.read_bytes()
        leaks += [(str(path_.relative_to(run_dir)), v[:20]) for v in values if v in text or v.encode() in raw]
    assert leaks == []
    # nor in what the batch printed (a failed run's line carries its server's last log line)
    assert [v[:20] for v in values if v in proc.stdout + proc.stderr] == []
    folder = run_dir / "runs" / "01_size-a_rep1"
    status = json.loads((folder / "status.json").read_text())
    assert status["status"] == "ready" and status["smoke_status"] == 200, status
    log = (folder / "server.log").read_text()
    # the server got the real values (their digests), and printed them: masked, line by line and whole
    assert hashlib.sha256(PEM.encode()).hexdigest()[:16] in log
    assert hashlib.sha256(CALLER_KEY.encode()).hexdigest()[:16] in log
    assert f"CALLER_API_KEY = {MASK} sha" in log
    assert f'"api_key": "{MASK}"' in log and '"max_tokens": 8' in log
    notebook = (folder / "run_variant.ipynb").read_text()
    assert f"CALLER_API_KEY = {MASK}" in notebook  # the log's tail, shown by the notebook
    resolved = yaml.safe_load((run_dir / "experiment.yaml").read_text())
    assert resolved["server"]["smoke"]["body"] == {"model": "m", "max_tokens": 8, "api_key": MASK, "token": MASK,
                                                   "auth": MASK}
    prov = json.loads((folder / "provenance.json").read_text())
    assert prov["host_env"]["CALLER_API_KEY"] == MASK and prov["env"]["SIGNING_PEM"] == MASK


def test_a_value_spanning_lines_is_masked_whole_and_line_by_line_and_short_values_by_name_only():
    masker = Masker.collect({"SIGNING_PEM": PEM}, extra=["SIGNING_PEM"])
    lines = PEM.splitlines()
    assert masker.text(PEM) == MASK
    assert masker.bytes(f"x {lines[1]}\n".encode()) == f"x {MASK}\n".encode()
    assert masker.text(repr(PEM)) == f"'{MASK}'"  # escaped, as a record or a notebook holds it
    assert masker.text(PEM.replace("\n", "\n    ")) == f"{MASK}\n    " * 4  # re-indented by a logger
    # inherited: by a secret-like name from MIN_INHERITED_LEN characters, declared names from MIN_VALUE_LEN
    inherited = Masker.inherited({"TOKENIZERS_PARALLELISM": "false", "CALLER_API_KEY": CALLER_KEY, "MINE": "abcd",
                                  "PATH": "/usr/bin", "PROXY": "http://u:proxypw@host:3128"}, extra=["MINE"])
    assert set(inherited.values) == {CALLER_KEY, "abcd", "proxypw"}
    assert len(MASK) < MIN_INHERITED_LEN and MIN_VALUE_LEN <= len("abcd")
    assert Masker.collect({"HF_TOKEN": "abc"}).values == ()  # three characters: masked by name only


def test_secret_keys_of_a_smoke_body_are_found_at_any_depth_and_max_tokens_is_not_one():
    body = {"max_tokens": 16, "Authorization": "Bearer abc.def.ghi", "x-api-key": "k-123456",
            "messages": [{"role": "user", "content": "hi"}], "auth": {"user": "me", "password": "pw-99887766"}}
    assert sorted(masking.body_secrets(body)) == ["Bearer abc.def.ghi", "k-123456", "me", "pw-99887766"]
    assert masking.masked_body(body, Masker()) == {"max_tokens": 16, "Authorization": MASK, "x-api-key": MASK,
                                                   "messages": [{"role": "user", "content": "hi"}], "auth": MASK}


# Issue 50: secrets the mask knew by neither name nor value reached provenance.json from the caller's shell.
SHAPED = {
    "MYSQL_PWD": "mysql-pw-2718281828",  # *_PWD: by name
    "SENTRY_DSN": "https://0123456789abcdef0123456789abcdef@o450000.ingest.sentry.io/4500000",  # DSN: name and shape
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
    "NOTIFY_TO": "https://hooks.slack.com/services/T11111111/B11111111/YYYYYYYYYYYYYYYYYYYYYYYY",  # by shape alone
    "CI_BOT": "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx",  # a Slack token under a plain name
}


def test_secrets_of_the_callers_shell_known_by_their_shape_or_a_pwd_name_are_masked_everywhere(tmp_path, sim_root):
    env = {**os.environ, **SHAPED}
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(spread_params(tmp_path)), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip())
    values = [*SHAPED.values(), "0123456789abcdef0123456789abcdef", "XXXXXXXXXXXXXXXXXXXXXXXX", "YYYYYYYYYYYYYYYYYYYYYYYY"]
    leaks = [(str(p.relative_to(run_dir)), v[:24]) for p, text in every_text(run_dir) for v in values if v in text]
    assert leaks == []
    prov = json.loads((run_dir / "runs" / "01_size-a_rep1" / "provenance.json").read_text())
    assert {k: prov["host_env"][k] for k in ("MYSQL_PWD", "SENTRY_DSN", "SLACK_WEBHOOK_URL", "CI_BOT")} == dict.fromkeys(
        ("MYSQL_PWD", "SENTRY_DSN", "SLACK_WEBHOOK_URL", "CI_BOT"), MASK)
    assert prov["host_env"]["NOTIFY_TO"] == f"https://hooks.slack.com{MASK}"
    assert prov["host_env"]["PWD"].startswith("/")  # the working folder is no secret (`PWD`, not `*_PWD`)


def test_value_shapes_are_masked_in_any_text_and_ordinary_urls_and_words_are_not():
    text = ("dsn https://0123456789abcdef0123456789abcdef@o1.ingest.sentry.io/42 hook "
            "https://discord.com/api/webhooks/123456789/AbCdEfGhIjKl token ghp_0123456789abcdefghijABCDEFGHIJ0123 "
            "keep https://github.com/org/repo ssh://git@github.com/org/repo hf_transfer sk-learn")
    masked = Masker().text(text)
    assert masked == (f"dsn https://{MASK}@o1.ingest.sentry.io/42 hook https://discord.com/api/webhooks{MASK} token "
                      f"{MASK} keep https://github.com/org/repo ssh://git@github.com/org/repo hf_transfer sk-learn")
    assert masking.secret_name("MYSQL_PWD") and masking.secret_name("SENTRY_DSN") and masking.secret_name("WEBHOOK")
    assert not masking.secret_name("PWD") and not masking.secret_name("OLDPWD")
