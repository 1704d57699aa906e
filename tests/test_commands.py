"""The shell commands of hosts/commands/, as strings, and run on this machine where a string alone proves little.

The process, lock and quoting commands have their own tests (test_quoting.py, test_locks.py, faults/); these
cover the folder, probe, nvidia-smi, provenance and patch commands.
"""

import json
import shlex
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path

import pytest

from launchlab.hosts import commands
from launchlab.hosts.local import LocalHost

TRAP = "a b'; touch /tmp/launchlab-canary; echo '$(id)"


def sh(command: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=60)


@pytest.fixture
def http_server():
    """A real HTTP server on 127.0.0.1: GET answers 204, POST echoes its body with 201."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(204)
            self.end_headers()

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(201)
            self.end_headers()
            self.wfile.write(b"got " + body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_remove_tree_quotes_the_path_and_never_reads_it_as_an_option(tmp_path):
    assert commands.remove_tree("/w d/-x") == "rm -rf -- '/w d/-x'"
    folder = tmp_path / "-odd name"
    (folder / "sub").mkdir(parents=True)
    assert sh(commands.remove_tree(str(folder))).returncode == 0 and not folder.exists()


def test_a_private_folder_is_made_with_every_created_level_owner_only(tmp_path):
    target = tmp_path / "a b" / "c"
    assert sh(commands.make_private_dir(str(target))).returncode == 0
    assert oct((tmp_path / "a b").stat().st_mode & 0o777) == "0o700" and oct(target.stat().st_mode & 0o777) == "0o700"


def test_the_do_nothing_probe_is_true():
    assert commands.answer() == "true"


def _ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_free_port_prints_a_port_below_the_ephemeral_range_that_no_client_connection_can_hold():
    # a port of the range could be some outgoing connection's source port by the time the server binds it
    ports = {int(sh(commands.free_port()).stdout) for _ in range(5)}
    assert all(10000 <= port < _ephemeral_low() for port in ports), ports
    assert len(ports) > 1, "picked at random: two runs started at once do not race for one port"


def test_free_port_skips_a_port_a_listener_holds(monkeypatch):
    import socket

    from launchlab.hosts import ports

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        taken = held.getsockname()[1]
        held.listen()
        monkeypatch.setattr(ports.random, "sample", lambda population, k: [taken, taken])
        assert ports.pick() not in (taken, 0), "the kernel's choice when every candidate is taken"


def test_http_status_is_asked_with_its_values_in_argv_and_prints_the_status(http_server):
    cmd = commands.http_status(http_server + "/health", 2.0)
    argv = shlex.split(cmd)
    assert argv[:2] == ["python3", "-c"] and argv[3:] == [http_server + "/health", "2.0"]
    assert sh(cmd).stdout.strip() == "204"


def test_http_status_says_refused_when_nothing_listens_and_timed_out_when_nothing_answers(tmp_path):
    """What the probe got stands in for a status (issue 63: the report says it): a closed port refuses; a socket that
    accepts and never answers times out; both read back as Host.http_status returns them."""
    import socket

    assert sh(commands.http_status("http://127.0.0.1:9/", 1)).stdout.strip() == "refused"
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/health"
        assert sh(commands.http_status(url, 0.5)).stdout.strip() == "timed out"
    assert commands.answer_of("404\n") == 404 and commands.answer_of("refused") == "refused"
    assert commands.answer_of("") == commands.answer_of("garbage") == "no answer"


def test_http_post_sends_the_body_as_json_and_prints_status_and_text(http_server):
    body = {"prompt": TRAP, "max_tokens": 1}
    cmd = commands.http_post(http_server + "/v1/completions", body, 5)
    assert shlex.split(cmd)[3:] == [http_server + "/v1/completions", json.dumps(body), "5.0"]
    status, text = json.loads(sh(cmd).stdout.strip().splitlines()[-1])
    assert status == 201 and json.loads(text.removeprefix("got ")) == body


@pytest.mark.slow
def test_the_shell_host_asks_http_from_the_host_with_these_commands(http_server, tmp_path):
    # LocalHost answers HTTP itself; ShellHost's own versions (those of ssh) run the commands above
    from launchlab.hosts.shell import ShellHost

    host = LocalHost("box", workdir=str(tmp_path))
    assert ShellHost.http_status(host, http_server + "/") == 204
    assert ShellHost.http_post(host, http_server + "/", {"a": 1}, 5) == (201, 'got {"a": 1}')
    assert 0 < ShellHost.free_port(host) < 65536


def test_nvidia_smi_commands_select_the_run_s_gpus():
    assert commands.gpu_snapshot([0, 3]) == commands.bounded_checked(
        "nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free --format=csv,noheader,nounits -i 0,3")
    assert commands.gpu_apps() == commands.bounded_checked(
        "nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits")
    assert commands.gpu_indices() == ("{ nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null || true; } "
                                      "| head -c 1048576")  # a million GPUs listed cost at most 1 MiB
    assert commands.gpu_sampler(50, [2]) == [
        "nvidia-smi", "--query-gpu=timestamp,index,uuid,memory.total,memory.used,memory.free,utilization.gpu",
        "--format=csv,nounits", "-lms", "50", "-i", "2"]


def test_host_facts_print_each_section_under_its_mark():
    cmd = commands.host_facts()
    assert cmd.startswith(f"echo {shlex.quote(commands.SECTION_MARK + 'hostname')}; {{ hostname 2>&1; }} | head -c")
    out = sh(cmd).stdout
    marks = [line for line in out.splitlines() if line.startswith(commands.SECTION_MARK)]
    assert [m.removeprefix(commands.SECTION_MARK) for m in marks] == ["hostname", "kernel", "os", "gpus", "table", "topo",
                                                                      "boot_id"]
    # an earlier run's table and topology taken over (provenance.host_facts): the rest is read again, or just those
    assert commands.STEADY_SECTIONS == ("table", "topo")
    names = [m.removeprefix(commands.SECTION_MARK) for m in sh(commands.host_facts(skip=commands.STEADY_SECTIONS)
                                                              ).stdout.splitlines() if m.startswith(commands.SECTION_MARK)]
    assert names == ["hostname", "kernel", "os", "gpus", "boot_id"]
    assert commands.host_facts(only=("topo",)) == (
        f"echo {shlex.quote(commands.SECTION_MARK + 'topo')}; {{ nvidia-smi topo -m 2>&1; }} | head -c 1048576")


@pytest.mark.slow
def test_interpreter_commands_quote_the_interpreter_and_print_one_json_line(tmp_path):
    assert commands.interpreter_facts("/opt/my py/bin/python3").startswith("'/opt/my py/bin/python3' -c ")
    assert shlex.split(commands.package_integrity("python3", TRAP))[-1] == TRAP
    facts = json.loads(sh(commands.interpreter_facts(sys.executable)).stdout)
    assert facts["executable"] and "pytest" in facts["packages"]
    # every installed distribution with the version importlib.metadata's own parser gives
    assert facts["packages"] == {d.metadata["Name"].lower(): d.version for d in metadata.distributions()
                                 if d.metadata["Name"]}
    integrity = json.loads(sh(commands.package_integrity(sys.executable, "pytest")).stdout)
    assert integrity["package"] == "pytest" and integrity["files_checked"] > 0
    env = json.loads(sh(commands.host_environment()).stdout)
    assert "PATH" in env
    # both from one start of the interpreter: the same two lines
    both = [json.loads(line) for line in sh(commands.server_python(sys.executable, "pytest")).stdout.splitlines()]
    assert both == [facts, integrity]
    assert shlex.split(commands.server_python("python3", TRAP))[-1] == TRAP
    assert [json.loads(line) for line in sh(commands.server_python(sys.executable, None)).stdout.splitlines()] == [facts]


def test_the_forward_and_the_reverse_patch_are_built_each_on_its_own():
    check, apply, revert = (f("/site packages", "/w/p.diff") for f in (commands.patch_check, commands.patch_apply,
                                                                       commands.patch_revert))
    assert check == ("patch -p1 --forward --dry-run --batch --no-backup-if-mismatch -r - "
                     "-d '/site packages' -i /w/p.diff")
    assert apply == "patch -p1 --forward --batch --no-backup-if-mismatch -r - -d '/site packages' -i /w/p.diff"
    assert revert == "patch -p1 --reverse --batch --no-backup-if-mismatch -r - -d '/site packages' -i /w/p.diff"


def test_a_patch_applies_and_reverts_to_the_original_bytes(tmp_path):
    root = tmp_path / "site packages"
    (root / "pkg").mkdir(parents=True)
    target = root / "pkg" / "mod.py"
    target.write_text("a = 1\nb = 2\n")
    diff = tmp_path / "p.diff"
    diff.write_text("--- a/pkg/mod.py\n+++ b/pkg/mod.py\n@@ -1,2 +1,3 @@\n a = 1\n+print('debug')\n b = 2\n")
    assert sh(commands.patch_check(str(root), str(diff))).returncode == 0
    assert target.read_text() == "a = 1\nb = 2\n"  # a check changes nothing
    assert sh(commands.patch_apply(str(root), str(diff))).returncode == 0
    assert "print('debug')" in target.read_text()
    assert sh(commands.patch_check(str(root), str(diff))).returncode != 0  # applied already: --forward refuses
    assert sh(commands.patch_revert(str(root), str(diff))).returncode == 0
    assert target.read_text() == "a = 1\nb = 2\n"
    assert sorted(p.name for p in root.rglob("*")) == ["mod.py", "pkg"]  # no .orig, no .rej


def test_a_wrapper_script_runs_its_quoted_argv_with_the_script_s_own_arguments(tmp_path):
    script = tmp_path / "tool"
    script.write_text(commands.wrapper_script([sys.executable, "-c", "import sys; print(sys.argv[1:])", "it's"]))
    script.chmod(0o755)
    assert script.read_text().startswith("#!/bin/sh\nexec ") and script.read_text().endswith(' "$@"\n')
    out = subprocess.run([str(script), "a b", "$HOME"], capture_output=True, text=True, check=True).stdout
    assert out.strip() == repr(["it's", "a b", "$HOME"])
