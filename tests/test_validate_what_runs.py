"""What `launchlab validate` calls valid can run: a count is an integer as written (`repetitions: true`, `"1"`,
`0x2` are errors, not 1 or 2), `gpu_slots` name GPUs the host has (refused by validate where the params give the
count; named by the batch's preflight, before anything launches, where only the host's nvidia-smi knows it), and
an ssh address or user cannot end in a newline."""

import os
import subprocess

import pytest

from conftest import LAUNCHLAB, write_params
from launchlab.hosts import sim, sim_spec

pytestmark = pytest.mark.slow  # each test runs the CLI (a process)

BASE = """\
experiment: counts
hosts:
  box: {box}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "1", --host, 127.0.0.1, --port, "{{port}}"]
  ready: {{timeout_s: 30}}
factors:
  f: {{a: {{}}, b: {{}}}}
baseline: {{f: a}}
"""
SIM = "{transport: sim, gpus: 2, pace: 0.1}"


def validate(tmp_path, text: str) -> subprocess.CompletedProcess:
    path = write_params(tmp_path, text, "counts.yaml")
    return subprocess.run([*LAUNCHLAB, "validate", str(path)], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("extra, field", [
    ("repetitions: true", "repetitions"),
    ('repetitions: "1"', "repetitions"),
    ("repetitions: 0x2", "repetitions"),
    ("repetitions: 0b10", "repetitions"),
    ("repetitions: 2.0", "repetitions"),
    ("repetitions: 1_0", "repetitions"),
    ("sampler: {interval_ms: true}", "sampler.interval_ms"),
    ('drain: {tolerance_mib: "64"}', "drain.tolerance_mib"),
    ("search: {flag: --mem-fraction-static, low: \"0.5\", high: \"0.9\", resolution: \"0.1\", repetitions: true}",
     "search.repetitions"),
])
def test_a_count_that_is_not_an_integer_as_written_is_refused(tmp_path, extra, field):
    proc = validate(tmp_path, BASE.format(box=SIM) + extra + "\n")
    assert proc.returncode == 2, proc.stdout
    assert "Traceback" not in proc.stderr and "counts.yaml" in proc.stderr
    assert f"line 11: {field}: Input should be a valid integer" in proc.stderr, proc.stderr


def test_a_host_gpu_count_that_is_a_boolean_is_refused(tmp_path):
    proc = validate(tmp_path, BASE.format(box="{transport: sim, gpus: true}"))
    assert proc.returncode == 2 and "hosts.box.gpus: Input should be a valid integer" in proc.stderr, proc.stderr


def test_the_same_counts_written_as_integers_validate(tmp_path):
    proc = validate(tmp_path, BASE.format(box=SIM) + "repetitions: 2\nsampler: {interval_ms: 100}\n"
                    "drain: {tolerance_mib: 64, timeout_s: 5}\n")
    assert proc.returncode == 0, proc.stderr
    assert "2 variant(s) × 2 repetition(s)" in proc.stdout


@pytest.mark.parametrize("box, beyond", [
    ("{transport: sim, gpus: 2, gpu_slots: [[0], [2]]}", "2"),
    ("{transport: sim, gpus: 4, gpu_slots: [[0, 1], [4, 5]]}", "4, 5"),
    ("{transport: local, gpus: 1, gpu_slots: [[0], [1]]}", "1"),
    ("{transport: ssh, address: gpu-box, gpus: 8, gpu_slots: [[7], [8]]}", "8"),
])
def test_gpu_slots_beyond_the_hosts_gpus_are_refused_by_validate(tmp_path, box, beyond):
    proc = validate(tmp_path, BASE.format(box=box))
    assert proc.returncode == 2, proc.stdout
    assert f"hosts.box.gpu_slots: names GPU(s) {beyond}, but host `box` has" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_gpu_slots_within_the_hosts_gpus_validate(tmp_path):
    proc = validate(tmp_path, BASE.format(box="{transport: sim, gpus: 2, pace: 0.1, gpu_slots: [[0], [1]]}"))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("box, field", [
    ('{transport: ssh, address: "gpu-box\\n"}', "hosts.box.address"),
    ('{transport: ssh, address: gpu-box, user: "alice\\n"}', "hosts.box.user"),
])
def test_an_ssh_address_or_user_ending_in_a_newline_is_refused(tmp_path, box, field):
    proc = validate(tmp_path, BASE.format(box=box))
    assert proc.returncode == 2 and f"{field}: " in proc.stderr and "\\x0a`" in proc.stderr, proc.stderr


def test_preflight_names_the_host_and_slot_of_a_gpu_the_host_does_not_have_before_anything_launches(tmp_path, sim_root):
    """A local host whose params give no `gpus:`: only its nvidia-smi (here the simulated box's stand-in, 2 GPUs)
    knows that GPU 3 is not there."""
    env = {**os.environ, **sim.prepare_box(tmp_path / "gpubox", "gpubox", sim_spec.SimSpec(transport="sim", gpus=2))}
    path = write_params(tmp_path, f"""\
experiment: slots
hosts:
  box: {{transport: local, workdir: {tmp_path / 'work'}, gpu_slots: [[0], [3]]}}
server:
  kind: generic
  command: [python3, -m, http.server, "{{port}}", --bind, 127.0.0.1]
  ready: {{timeout_s: 30, health_url: "http://127.0.0.1:{{port}}/"}}
""")
    proc = subprocess.run([*LAUNCHLAB, "run", "--no-html", str(path), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "host 'box'" in proc.stderr and "gpu_slots[1] [3] names GPU(s) 3" in proc.stderr, proc.stderr
    assert "lists GPU(s) 0, 1" in proc.stderr and "nothing was launched" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "out").rglob("status.json")) and not (tmp_path / "work").exists()
