"""Issue 64: safe on a shared machine, round 6 — run directories others wrote, bombs in frames and traces, slow
servers, secrets. Each finding is reproduced as the audit did, beside a safe variant that passes on the same code
(so the condition tested is real). A run directory someone shares often arrives as a tarball: unpacked, its links are
the reader's own — the kit must not follow them because of who made them."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, ROOT

pytestmark = pytest.mark.slow

EXAMPLE = ROOT / "examples/h200-transformers-kv/20261129-232709"
RUN = "runs/01_batching-continuous.memory_percent-0.5.num_blocks-auto_rep1"
SECRET = "-----BEGIN OPENSSH PRIVATE KEY-----\nPRIVATE-KEY-9c1e77\n-----END OPENSSH PRIVATE KEY-----\n"


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def unpacked(tmp_path: Path, links: dict[str, str], name: str = "shared") -> Path:
    """The example as a colleague's tarball unpacked by the reader, with `links` (path in the run directory → target)
    inside it: tar makes each link the reader's own."""
    staging = tmp_path / f"{name}-staging"
    shutil.copytree(EXAMPLE, staging)
    for relative in links:
        target = staging / relative
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(staging, arcname=name)
        for relative, target in links.items():
            info = tarfile.TarInfo(f"{name}/{relative}")
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    buffer.seek(0)
    with tarfile.open(fileobj=buffer) as tar:
        tar.extractall(tmp_path, filter="tar")  # the filter keeps links that point outside: a user's tar does
    return tmp_path / name


def leaked(folder: Path, marker: str) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and marker.encode() in p.read_bytes()]


# ---------------------------------------------------------------------------------------------------------
# 1. report follows no link out of a run directory, whoever made it


def test_report_does_not_publish_a_private_file_a_link_of_the_readers_own_making_points_to(tmp_path):
    key = tmp_path / "home" / ".ssh" / "id_ed25519"
    key.parent.mkdir(parents=True)
    key.write_text(SECRET)
    os.chmod(key, 0o600)
    run_dir = unpacked(tmp_path, {f"{RUN}/server.log": str(key)})
    assert (run_dir / RUN / "server.log").is_symlink() and (run_dir / RUN / "server.log").lstat().st_uid == os.getuid()
    res = subprocess.run([*LAUNCHLAB, "report", str(run_dir)], capture_output=True, text=True, timeout=300)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert f"{RUN}/server.log is a symbolic link" in res.stderr and "follows none" in res.stderr, res.stderr[-2000:]
    assert leaked(run_dir, "PRIVATE-KEY-9c1e77") == []
    # the safe variant: the same run directory with its own log — the report is written from it
    safe = unpacked(tmp_path, {}, name="plain")
    res = subprocess.run([*LAUNCHLAB, "report", "--no-html", str(safe)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]


# ---------------------------------------------------------------------------------------------------------
# 2. no write through a link inside a run directory


def test_report_compare_and_resume_write_nothing_through_links_of_the_readers_own_inside_a_run_directory(
        tmp_path, example_built):
    outside = tmp_path / "elsewhere"
    shutil.copytree(EXAMPLE / RUN, outside / "run")
    (outside / "compare").mkdir()
    was = tree(outside)
    report_dir = unpacked(tmp_path, {RUN: str(outside / "run")}, name="report")
    res = subprocess.run([*LAUNCHLAB, "report", "--no-html", str(report_dir)], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert f"{RUN} is a symbolic link" in res.stderr, res.stderr[-2000:]
    after = tmp_path / "after"
    shutil.copytree(example_built(EXAMPLE), after)
    (after / "compare").symlink_to(outside / "compare")  # the reader's own link, as a tarball's
    res = subprocess.run([*LAUNCHLAB, "compare", str(example_built(EXAMPLE)), str(after)], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "compare is a symbolic link" in res.stderr, res.stderr[-2000:]
    assert tree(outside) == was  # nothing written there, nothing moved
    # the safe variant: compare with a compare/ folder of its own writes there
    plain = tmp_path / "plain-after"
    shutil.copytree(example_built(EXAMPLE), plain)
    res = subprocess.run([*LAUNCHLAB, "compare", str(example_built(EXAMPLE)), str(plain)], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0 and list((plain / "compare").rglob("compare.json")), res.stderr[-2000:]


GENERIC = """\
experiment: exp
hosts:
  box: {transport: sim, gpus: 1}
server:
  kind: generic
  command: [python3, -c, "print('READY', flush=True); import time; time.sleep(30)"]
  ready: {timeout_s: 20, log_pattern: "^READY"}
  stop_grace_s: 2
factors:
  f: {"a": {}, "b": {}}
baseline: {f: "a"}
repetitions: 1
drain: {timeout_s: 5, tolerance_mib: 64}
"""


def test_resume_moves_nothing_out_of_a_run_folder_that_is_a_link_of_the_readers_own(tmp_path, sim_root):
    params = tmp_path / "exp.yaml"
    params.write_text(GENERIC)
    res = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(params), "--out", str(tmp_path / "outputs")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    run_dir = Path(res.stdout.strip())
    second = sorted((run_dir / "runs").iterdir())[-1]
    outside = tmp_path / "elsewhere" / second.name
    shutil.copytree(second, outside)
    (outside / "status.json").unlink()  # unfinished, as far as a resume can tell: it would run again
    shutil.rmtree(second)
    second.symlink_to(outside)  # the user's own link (a tarball's, a `cp -s`)
    was = tree(outside.parent)
    res = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(params), "--resume", str(run_dir)], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert f"{second.name} is a symbolic link" in res.stderr, res.stderr[-2000:]
    assert tree(outside.parent) == was
    # the safe variant: the run folder itself, unfinished, is run again by the resume
    second.unlink()
    shutil.copytree(outside, second)
    res = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(params), "--resume", str(run_dir)], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0 and (second / "status.json").is_file(), res.stderr[-2000:]


# ---------------------------------------------------------------------------------------------------------
# 3. markup in a string is text, and the report is written


MARKUP = ('Does it start? ![x](http://evil.example/y.png) <img src="http://evil.example/i.png"> '
          "<link rel=stylesheet href=//evil.example/a.css> <iframe src=http://evil.example/f></iframe> "
          "<object data=http://evil.example/o></object> <style>body{background:url(http://evil.example/bg.png)}</style>"
          " see www.evil.example")


def test_markup_and_urls_in_a_run_directorys_strings_are_inert_text_and_both_pages_are_written(tmp_path, example_built):
    import yaml

    from launchlab.reporting import export

    run_dir = tmp_path / "crafted"
    shutil.copytree(example_built(EXAMPLE), run_dir)
    exp = yaml.safe_load((run_dir / "experiment.yaml").read_text())
    exp["question"] = MARKUP  # in the summary's prose
    (run_dir / "experiment.yaml").write_text(yaml.safe_dump(exp, sort_keys=False))
    for provenance in run_dir.glob("runs/*/provenance.json"):  # a package version: a difference compare.html states
        data = json.loads(provenance.read_text())
        data["interpreter"]["packages"]["accelerate"] = MARKUP
        provenance.write_text(json.dumps(data))
    res = subprocess.run([*LAUNCHLAB, "report", str(run_dir)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    res = subprocess.run([*LAUNCHLAB, "compare", str(example_built(EXAMPLE)), str(run_dir)], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    [compare_html] = (run_dir / "compare").rglob("compare.html")
    for page in (run_dir / "summary.html", compare_html):
        html = page.read_text()
        assert "evil.example" in html, page  # said, as text
        assert export.remote_references(html) == [] and "href='http" not in html and 'href="http' not in html, page
        assert "<img src=\"http" not in html and "<iframe" not in html and "<object" not in html, page


# ---------------------------------------------------------------------------------------------------------
# 4. credentials by their shape, whatever their name

ACCOUNT_KEY = "c2VjcmV0LWFjY291bnQta2V5LTdkMmY5YQ=="
JWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjQ0In0.eyJzdWIiOiJqb2JfNzc3IiwibmFtZXNwYWNlIjoiY2kifQ.c2lnbmF0dXJlLTVlNmY3YQ"
PEM_LINE = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ-4b1d"


def test_a_connection_strings_key_a_jwt_and_a_private_key_in_the_environment_never_reach_the_run_directory(
        tmp_path, sim_root):
    params = tmp_path / "exp.yaml"
    params.write_text(GENERIC)
    env = {**os.environ,
           "AZURE_STORAGE_CONNECTION_STRING": f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={ACCOUNT_KEY};"
                                              "EndpointSuffix=core.windows.net",
           "CI_JOB_JWT": JWT,
           "DEPLOY_NOTES": f"-----BEGIN OPENSSH PRIVATE KEY-----\n{PEM_LINE}\n-----END OPENSSH PRIVATE KEY-----\n",
           "BUILD_ID": "build-4711-plain"}  # the safe variant: a plain value the run directory keeps as it was
    res = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(params), "--out", str(tmp_path / "outputs")],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    run_dir = Path(res.stdout.strip())
    for secret in (ACCOUNT_KEY, JWT, PEM_LINE):
        assert leaked(run_dir, secret) == [], secret
    assert leaked(run_dir, "build-4711-plain"), "the provenance records the caller's plain environment"


# ---------------------------------------------------------------------------------------------------------
# 10. one row a run directory in `launchlab ls`, whatever its strings hold


def test_a_newline_or_a_bidi_override_in_a_manifest_forges_no_row_of_launchlab_ls(tmp_path):
    root = tmp_path / "outputs" / "exp"
    forged = "exp\nexamples/fake/20990101-000000  fake  2099-01-01  1/1 runs  next: launchlab run evil.yaml --resume x"
    for name, experiment in (("newline", forged), ("bidi", "report\u202eexe.txt"), ("plain", "plain-experiment")):
        shutil.copytree(EXAMPLE, root / name)
        manifest = root / name / "manifest.json"
        data = json.loads(manifest.read_text())
        data["experiment"] = experiment
        manifest.write_text(json.dumps(data))
    res = subprocess.run([*LAUNCHLAB, "ls", str(tmp_path / "outputs")], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    rows = res.stdout.splitlines()
    assert len(rows) == 3, rows  # one a run directory, none forged
    assert "\u202e" not in res.stdout and "report\\u202eexe.txt" in res.stdout
    assert "exp\\x0aexamples/fake" in res.stdout and not any(r.startswith("examples/fake") for r in rows)
    assert any("  plain-experiment  " in r for r in rows)  # the safe variant, as written


# ---------------------------------------------------------------------------------------------------------
# 7. a broken gzip trace or parquet frame is named, never a traceback

GZ_TRACE = f"{RUN}/nvidia-smi.csv.gz"


@pytest.mark.parametrize("damage", ["cut", "garbage"])
def test_a_broken_gzip_trace_is_named_and_the_report_goes_on_without_it(tmp_path, damage):
    run_dir = tmp_path / "broken"
    shutil.copytree(EXAMPLE, run_dir)
    data = (run_dir / GZ_TRACE).read_bytes()
    (run_dir / GZ_TRACE).write_bytes(data[:len(data) // 2] if damage == "cut" else data[:10] + os.urandom(4000))
    res = subprocess.run([*LAUNCHLAB, "report", "--no-html", str(run_dir)], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    warnings = json.loads((run_dir / "verdict.json").read_text())["warnings"]
    [said] = [w for w in warnings if "GPU trace could not be read" in w]
    assert RUN.split("/")[1] in said and "broken gzip file" in said, said
    # the safe variant: the whole trace is read, and no such warning
    plain = tmp_path / "plain"
    shutil.copytree(EXAMPLE, plain)
    res = subprocess.run([*LAUNCHLAB, "report", "--no-html", str(plain)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and not [w for w in json.loads((plain / "verdict.json").read_text())["warnings"]
                                        if "GPU trace could not be read" in w]


def test_a_frame_cut_short_is_named_by_compare_never_a_traceback(tmp_path, example_built):
    after = tmp_path / "after"
    shutil.copytree(example_built(EXAMPLE), after)
    frame = after / "runs.parquet"
    frame.write_bytes(frame.read_bytes()[:1000])
    res = subprocess.run([*LAUNCHLAB, "compare", str(example_built(EXAMPLE)), str(after)], capture_output=True,
                         text=True, timeout=300)
    assert res.returncode != 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "runs.parquet is not a whole parquet file" in res.stderr and "launchlab report" in res.stderr


# ---------------------------------------------------------------------------------------------------------
# 8. a number that is no finite number is a data error, said, never a crash

SGLANG = ROOT / "examples/h200-sglang-kv/20261203-092613"


def test_an_absurd_number_in_a_log_is_named_as_a_data_error_and_the_report_is_written(tmp_path):
    run_dir = tmp_path / "absurd"
    shutil.copytree(SGLANG, run_dir)
    [log] = [p for p in sorted(run_dir.glob("runs/*/server.log")) if "Load weight begin" in p.read_text()][:1]
    text = log.read_text()
    log.write_text(text.replace("Load weight begin. avail mem=", f"Load weight begin. avail mem={'9' * 400}", 1))
    res = subprocess.run([*LAUNCHLAB, "report", str(run_dir)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert (run_dir / "summary.html").is_file()
    warnings = json.loads((run_dir / "verdict.json").read_text())["warnings"]
    [said] = [w for w in warnings if "no finite number" in w]
    assert log.parent.name in said and "weights_begin_avail_gib at line" in said, said
    # the safe variant: the example itself names no such figure
    assert not [w for w in json.loads((SGLANG / "verdict.json").read_text())["warnings"] if "no finite number" in w]


# ---------------------------------------------------------------------------------------------------------
# 9. every probe has an overall deadline

TRICKLE_SERVER = r'''
import socket, sys, threading, time
port, trickle = int(sys.argv[1]), sys.argv[2] == "trickle"
listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(16)
print("READY", flush=True)

def serve(conn):
    conn.recv(65536)
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    try:
        for i in range(len(answer)) if trickle else [None]:
            conn.sendall(answer[i:i + 1] if trickle else answer)
            time.sleep(0.5 if trickle else 0)
    except OSError:
        pass
    conn.close()

while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
'''


@pytest.mark.parametrize("answer", ["trickle", "whole"])
def test_a_server_that_trickles_its_answer_a_byte_at_a_time_ends_the_watch_at_its_deadline(tmp_path, sim_root, answer):
    import time

    server = tmp_path / "server.py"
    server.write_text(TRICKLE_SERVER)
    params = tmp_path / "exp.yaml"
    params.write_text(f"""\
experiment: trickle
hosts:
  box: {{transport: sim, gpus: 1}}
server:
  kind: generic
  command: [python3, {server}, "{{port}}", {answer}]
  ready: {{timeout_s: 6, log_pattern: "^READY", health_url: "http://127.0.0.1:{{port}}/health"}}
  stop_grace_s: 2
factors:
  f: {{"a": {{}}}}
baseline: {{f: "a"}}
repetitions: 1
drain: {{timeout_s: 5, tolerance_mib: 64}}
""")
    started = time.monotonic()
    res = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(params), "--out", str(tmp_path / "outputs")],
                         capture_output=True, text=True, timeout=300)
    took = time.monotonic() - started
    assert res.returncode == 0, res.stderr[-2000:]
    [status] = [json.loads(p.read_text()) for p in Path(res.stdout.strip()).glob("runs/*/status.json")]
    if answer == "trickle":  # its 70-byte answer takes 35 s; the run's deadline is 6 s, each probe's 2
        assert status["status"] == "timeout" and status["failure_reason"] == "ready_signals_disagree", status
        assert status["probe_answers"].startswith("timed out ×"), status["probe_answers"]
        assert took < 30, f"the batch watched a 6 s deadline for {took:.0f} s"
    else:  # the safe variant: the same server answering at once is ready
        assert status["status"] == "ready" and status["probe_answers"] == "200 ×1", status


# ---------------------------------------------------------------------------------------------------------
# 5–6. bombs: frames of few bytes and many rows, traces of few bytes and many lines — bounded memory

MEASURE = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
           "sys.stderr.write(done.stderr); print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN)"
           ".ru_maxrss // 1024)")


def measured(*args: str) -> tuple[int, int, str]:
    """(exit status, peak resident MiB, stderr) of `launchlab ARGS` run as a fresh interpreter."""
    from conftest import LAUNCHLAB_EXEC

    done = subprocess.run([sys.executable, "-c", MEASURE, *LAUNCHLAB_EXEC, *args], capture_output=True, text=True,
                          timeout=600)
    status, mib = done.stdout.split()
    return int(status), int(mib), done.stderr


def test_a_gzip_trace_that_expands_to_160_mib_is_read_thinned_in_bounded_memory(tmp_path):
    import gzip

    run_dir = tmp_path / "bomb"
    shutil.copytree(EXAMPLE, run_dir)
    line = b"2026/11/29 23:27:16.036, 0, GPU-a098f476-92c2-941d-547e-6f699f5adf3a, 143771, 70049, 73000, 99\n"
    header = (b"timestamp, index, uuid, memory.total [MiB], memory.used [MiB], memory.free [MiB], "
              b"utilization.gpu [%]\n")
    bomb = gzip.compress(header + line * (160 * 2**20 // len(line)), compresslevel=9)
    assert len(bomb) < 1_000_000
    (run_dir / GZ_TRACE).write_bytes(bomb)
    status, mib, err = measured("report", "--no-html", str(run_dir))
    assert status == 0 and "Traceback" not in err, err[-2000:]
    assert mib < 600, f"peak {mib} MiB reading a 160 MiB trace (before: the whole text, then a frame of it)"
    warnings = json.loads((run_dir / "verdict.json").read_text())["warnings"]
    [said] = [w for w in warnings if "kept thinned" in w]
    assert "1,7" in said and "samples, kept every" in said, said  # 1.7 million samples, said
    import pandas as pd
    runs = pd.read_parquet(run_dir / "runs.parquet").set_index("run_id")
    assert runs.loc[RUN.split("/")[1], "peak_mem_used_mib"] == 70049  # of every sample


def test_a_telemetry_frame_of_millions_of_identical_rows_is_read_thinned_and_a_runs_frame_of_them_refused(
        tmp_path, example_built):
    import pyarrow as pa
    import pyarrow.parquet as pq

    after = tmp_path / "after"
    shutil.copytree(example_built(EXAMPLE), after)
    n = 8_000_000
    columns = {"run_id": pa.repeat(RUN.split("/")[1], n), "t_s": pa.repeat(1.0, n), "node": pa.repeat(0, n),
               "gpu_index": pa.repeat(0, n), "gpu_uuid": pa.repeat("GPU-x", n), "mem_used_mib": pa.repeat(70049.0, n),
               "mem_total_mib": pa.repeat(143771.0, n), "mem_free_mib": pa.repeat(0.0, n),
               "util_gpu_pct": pa.repeat(0.0, n)}
    # in row groups of pyarrow's size, as the kit writes a large frame: read batch by batch, kept thinned
    pq.write_table(pa.table(columns), after / "telemetry.parquet", compression="zstd", row_group_size=2**20)
    assert (after / "telemetry.parquet").stat().st_size < 2_000_000
    status, mib, err = measured("compare", str(example_built(EXAMPLE)), str(after))
    assert status == 0 and "Traceback" not in err, err[-2000:]
    assert mib < 700, f"peak {mib} MiB comparing against 8 M telemetry rows"
    # in one row group of them all: decoded whole it would take gigabytes — refused, the file named
    pq.write_table(pa.table(columns), after / "telemetry.parquet", compression="zstd", row_group_size=n)
    status, mib, err = measured("compare", str(example_built(EXAMPLE)), str(after))
    assert status != 0 and "telemetry.parquet holds 8,000,000 rows (row groups of up to 8,000,000)" in err, err[-2000:]
    assert "Traceback" not in err and mib < 700
    shutil.copy(example_built(EXAMPLE) / "telemetry.parquet", after / "telemetry.parquet")
    pq.write_table(pa.table({"run_id": pa.repeat("x", 12_000_000)}), after / "events.parquet", compression="zstd")
    status, mib, err = measured("compare", str(example_built(EXAMPLE)), str(after))
    assert status != 0 and "events.parquet holds 12,000,000 rows" in err and "more than the kit reads of it " \
        "(10,000,000" in err, err[-2000:]
    assert "Traceback" not in err and mib < 700


# ---------------------------------------------------------------------------------------------------------
# the bounds, as docs/reference/bounds.md states them


def _figure(text: str) -> int:
    """'512 MiB' → bytes, '2,000,000' → rows: the first figure of a table cell."""
    import re

    number, unit = re.match(r"(?:its first )?([\d,]+)\s*(KiB|MiB|GiB)?", text).groups()
    return int(number.replace(",", "")) * {None: 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]


def test_every_bound_the_docs_state_is_the_constant_in_the_code():
    import importlib

    rows = [line.split(" | ") for line in (ROOT / "docs/reference/bounds.md").read_text().splitlines()
            if line.startswith("| ") and "`" in line and not line.startswith("| file")]
    assert len(rows) >= 14
    for cells in rows:
        what, stated, constants = cells[0].lstrip("| "), cells[1], cells[3].rstrip(" |")
        for name in [c.strip("` ") for c in constants.split(",")]:
            module, _, attr = name.rpartition(".")
            value = getattr(importlib.import_module(f"launchlab.{module}"), attr)
            if isinstance(value, dict):  # per frame: the row names it
                value = value[next(k for k in value if f"{k}.parquet" in what)]
            figure = _figure(stated.split(", parsed ")[1]) if name.endswith("CHUNK_CHARS") else _figure(stated)
            assert figure == value, (what, name, figure, value)
