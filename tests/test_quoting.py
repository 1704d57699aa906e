"""Any flag or env value reaches the server process byte for byte, and nothing in it is executed."""

import json
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launchlab import params
from launchlab.hosts import commands
from launchlab.hosts.local import LocalHost

# What a process can receive in argv and environ: any text without NUL (and without lone surrogates,
# which cannot be encoded as bytes). Plus the shell's favourite traps, so they are always tried.
TRAPS = ["$(touch {canary})", "`touch {canary}`", "'; touch {canary}; '", '"; touch {canary}; "', "a b\nc",
         "$HOME", "\\", "'", '"', "!", "*", "~", "-x", "--flag=1", " ", "\t\r\n", "é€😀", "{port}"]
VALUE = st.one_of(st.sampled_from(TRAPS), st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                                                  max_size=40))

ECHO = "import json, os, sys; json.dump({'argv': sys.argv[1:], 'env': os.environ.get('PROBE')}, open('seen.json', 'w'))"


def launch_and_read(host: LocalHost, folder: Path, argv: list[str], env: dict[str, str]) -> dict:
    host.write_text(str(folder / "server.env"), commands.env_file_text(env))
    ref = host.start_detached("server", argv, cwd=str(folder), log_name="server.log", env_file="server.env")
    deadline = time.monotonic() + 10
    while host.group_alive(ref.pgid) and time.monotonic() < deadline:
        time.sleep(0.01)
    host.kill_group(ref.pgid, 1)
    return json.loads((folder / "seen.json").read_text())


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag_value=VALUE, env_value=VALUE)
def test_any_value_reaches_the_server_byte_for_byte_and_runs_nothing(tmp_path, flag_value, env_value):
    canary = tmp_path / "canary"
    flag_value = flag_value.replace("{canary}", str(canary))
    env_value = env_value.replace("{canary}", str(canary))
    argv = params.apply_flags([sys.executable, "-c", ECHO], {"--value": flag_value})
    seen = launch_and_read(LocalHost("t", workdir=str(tmp_path)), tmp_path, argv, {"PROBE": env_value})
    assert seen["argv"] == ["--value", flag_value]
    assert seen["env"] == env_value
    assert not canary.exists()


def test_env_file_rejects_names_that_are_not_identifiers():
    import pytest

    with pytest.raises(ValueError):
        commands.env_file_text({"A B": "1"})


def test_start_command_is_one_detached_group_with_all_streams_redirected():
    cmd = commands.start_detached(["python3", "-m", "x", "--a", "it's"], cwd="/w d", log_name="server.log",
                                  env_file="server.env")
    assert cmd.startswith("cd '/w d' || exit 1; setsid nohup bash -c ")
    assert cmd.endswith("> server.log 2>&1 < /dev/null & echo $!")
    assert "set -a; . ./server.env; set +a; exec python3 -m x --a" in cmd
