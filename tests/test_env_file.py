"""The env file a server's launch sources (`set -a; . ./server.env`) can never run a command: names outside the
environment-variable alphabet are refused by its writer, and every value — newlines, quotes, `$(…)`, backquotes,
escapes — reaches the server byte for byte, each variable on one line. Checked by sourcing the written file in a
real bash through the kit's own launch command, with a program planted on PATH that would leave a marker."""

import json
import os
import stat
import subprocess
import time

import pytest

from launchlab.hosts import commands

HOSTILE_VALUES = {
    "NEWLINE_THEN_COMMAND": "1\nAUDITX",
    "CR_THEN_COMMAND": "1\rAUDITX\r",
    "QUOTE_BREAKOUT": "x'; AUDITX; echo '",
    "DOUBLE_QUOTES": '"$(AUDITX)"',
    "SUBSTITUTION": "$(AUDITX)",
    "BACKQUOTES": "`AUDITX`",
    "SEMICOLON": "a; AUDITX",
    "ESCAPES": "\x1b]52;c;aGk=\x07\x1b[2J\x7f\x01",
    "BACKSLASHES": "\\x41\\n\\'\\",
    "ANSI_C_LOOKALIKE": "$'\\nAUDITX'",
    "UNICODE_BREAKS": "a\u2028AUDITX\x85b",
    "EMPTY": "",
    "DOLLAR_BRACE": "${PATH:?AUDITX}",
}


@pytest.fixture
def planted(tmp_path):
    """A folder on PATH with `AUDITX`, a program that leaves a marker file if anything runs it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "AUDITX-ran"
    program = bin_dir / "AUDITX"
    program.write_text(f"#!/bin/sh\ntouch {marker}\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return bin_dir, marker


def launch(folder, env: dict[str, str], bin_dir) -> dict:
    """Write env as server.env and start a program with commands.start_detached in a real bash; return the
    environment the program saw."""
    (folder / "server.env").write_text(commands.env_file_text(env))
    dump = folder / "env.json"
    argv = ["python3", "-c", f"import json, os; json.dump(dict(os.environ), open({str(dump)!r}, 'w'))"]
    command = commands.start_detached(argv, cwd=str(folder), log_name="server.log", env_file="server.env")
    shell_env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["bash", "-c", command], env=shell_env, check=True, capture_output=True, timeout=30)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if dump.is_file() and dump.stat().st_size:
            try:
                return json.loads(dump.read_text())
            except json.JSONDecodeError:  # still being written
                pass
        time.sleep(0.05)
    raise AssertionError(f"the program did not start: {(folder / 'server.log').read_text()!r}")


def test_hostile_values_reach_the_server_byte_for_byte_and_run_nothing(tmp_path, planted):
    bin_dir, marker = planted
    seen = launch(tmp_path, HOSTILE_VALUES, bin_dir)
    assert not marker.exists(), "a value of the env file ran a command"
    assert {name: seen.get(name) for name in HOSTILE_VALUES} == HOSTILE_VALUES
    assert "AUDITX" in os.listdir(bin_dir)  # the plant was there to run


def test_each_variable_is_one_line_of_the_env_file(tmp_path):
    text = commands.env_file_text(HOSTILE_VALUES)
    lines = text.split("\n")
    assert lines[-1] == "" and len(lines) == len(HOSTILE_VALUES) + 2  # the header, one per variable, the end
    assert [line.partition("=")[0] for line in lines[1:-1]] == list(HOSTILE_VALUES)
    assert not any(c in text for c in "\r\x1b\x7f\x01")


@pytest.mark.parametrize("name", ["AUDITX\n", "A\nAUDITX", "AUDITX;", "$(AUDITX)", "A B", "-A", "1A", "", "A=B",
                                  "A\x1b", "Ä", "A\u2028"])
def test_a_name_outside_the_alphabet_is_refused_by_the_writer(name):
    with pytest.raises(ValueError, match="not a valid environment variable name"):
        commands.env_file_text({name: "1"})


def test_a_refused_name_would_have_run_a_command_with_a_plain_writer(tmp_path, planted):
    """The attack the writer refuses is real: `AUDITX\\n=1` written as a plain line runs the planted program."""
    bin_dir, marker = planted
    (tmp_path / "server.env").write_text("AUDITX\n=1\n")
    shell_env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(["bash", "-c", "cd \"$1\"; set -a; . ./server.env; set +a", "-", str(tmp_path)], env=shell_env,
                   capture_output=True, timeout=30)
    assert marker.exists()
