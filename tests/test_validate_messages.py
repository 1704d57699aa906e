"""`launchlab validate` as a new user meets it (issue 67, item 6): a value of the wrong type is shown as the file holds
it with what to write instead, a command written as one string is shown as the list to write, a YAML syntax error
says file:line:column with the line and a caret under the column, and a misspelled server flag gets a warning naming
the flag meant — a warning, not an error, since the kit's list of flags may be out of date."""

import subprocess

import pytest

from conftest import LAUNCHLAB, write_params

pytestmark = pytest.mark.slow  # each test runs the CLI (a process)

SGLANG = """\
experiment: messages
hosts:
  box: {transport: sim, gpus: 2}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --tp, "1", --host, 127.0.0.1, --port, "{port}"]
  ready: {timeout_s: 30}
factors:
  mem:
    "0.85": {flags: {--mem-fraction-static: "0.85"}}
baseline: {mem: "0.85"}
repetitions: 2
"""

VLLM = """\
experiment: messages
hosts:
  box: {transport: local, gpus: 1}
server:
  kind: vllm
  command: [vllm, serve, /tmp/model, --port, "{port}", --gpu-memory-utilization, "0.5", --no-enable-prefix-caching]
"""


def launchlab(tmp_path, text: str, *args: str) -> tuple[subprocess.CompletedProcess, str]:
    path = write_params(tmp_path, text, "messages.yaml")
    proc = subprocess.run([*LAUNCHLAB, *(args or ("validate",)), str(path)], capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc, str(path)


def test_a_count_written_as_a_word_is_shown_with_what_to_write(tmp_path):
    proc, path = launchlab(tmp_path, SGLANG.replace("repetitions: 2", "repetitions: four"))
    assert proc.returncode == 2, proc.stdout
    assert f"{path}: 1 problem(s)" in proc.stderr
    assert ("line 12: repetitions: Input should be a valid integer, but the file holds 'four'; write a whole number, "
            "e.g. `repetitions: 4`") in proc.stderr, proc.stderr


@pytest.mark.parametrize("ready, shown", [
    ("{timeout_s: soon}", "server.ready.timeout_s: Input should be a valid number, but the file holds 'soon'; write a "
                          "number, e.g. `timeout_s: 30`"),
    ("{timeout_s: 30, health_url: [http://x]}",
     "server.ready.health_url: Input should be a valid string, but the file holds a list ['http://x']; write text"),
    ("30", "server.ready: Input should be a valid dictionary, but the file holds 30; write a YAML mapping"),
])
def test_a_value_of_the_wrong_type_is_shown_as_the_file_holds_it(tmp_path, ready, shown):
    proc, _ = launchlab(tmp_path, SGLANG.replace("ready: {timeout_s: 30}", f"ready: {ready}"))
    assert proc.returncode == 2, proc.stdout
    assert f"line 7: {shown}" in proc.stderr, proc.stderr


def test_a_command_written_as_one_string_is_shown_as_the_yaml_list_of_its_words(tmp_path):
    one_line = "  command: python -m sglang.launch_server --model-path /tmp/model --port '{port}'"
    proc, _ = launchlab(tmp_path, SGLANG.replace(SGLANG.splitlines()[5], one_line))
    assert proc.returncode == 2, proc.stdout
    assert ("line 6: server.command: Input should be a valid list, but the file holds one string; write it as a YAML "
            "list of its words: `command: [python, -m, sglang.launch_server, --model-path, /tmp/model, …]`"
            ) in proc.stderr, proc.stderr


def test_a_string_where_a_list_belongs_is_shown_as_a_list_of_it(tmp_path):
    proc, _ = launchlab(tmp_path, SGLANG.replace("ready: {timeout_s: 30}", "ready: {fatal_patterns: Boom}"))
    assert proc.returncode == 2, proc.stdout
    assert "write it as a YAML list: `fatal_patterns: [Boom]`" in proc.stderr, proc.stderr


def test_an_unclosed_flow_mapping_is_shown_at_its_line_and_column_with_a_caret(tmp_path):
    proc, path = launchlab(tmp_path, SGLANG.replace("{transport: sim, gpus: 2}", "{transport: sim, gpus: 2"))
    assert proc.returncode == 2, proc.stdout
    lines = proc.stderr.splitlines()
    # PyYAML notices the missing `}` at the next key (line 4, `server:`): the colon where it expected , or }
    assert f"line 4: not valid YAML: expected ',' or '}}', but got ':' ({path}:4:7)" in proc.stderr, proc.stderr
    noticed = next(i for i, line in enumerate(lines) if line.endswith("4 | server:"))
    assert lines[noticed + 1].index("^") == lines[noticed].index("server:") + len("server")
    # and where the mapping it was reading starts: the `{` left open on line 3
    assert f"while parsing a flow mapping, which starts at {path}:3:8: is its closing `}}` missing" in proc.stderr
    opened = next(i for i, line in enumerate(lines) if line.endswith("3 |   box: {transport: sim, gpus: 2"))
    assert lines[opened + 1].index("^") == lines[opened].index("{")


def test_a_yaml_error_inside_a_line_gets_its_column(tmp_path):
    proc, path = launchlab(tmp_path, SGLANG.replace("repetitions: 2", "repetitions: a: 2"))
    assert proc.returncode == 2, proc.stdout
    assert f"line 12: not valid YAML: mapping values are not allowed here ({path}:12:15)" in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    shown = next(i for i, line in enumerate(lines) if line.endswith("12 | repetitions: a: 2"))
    assert lines[shown + 1].index("^") == lines[shown].index("a: 2") + 1


def warning(path: str, line: int, field: str, flag: str, kind: str, meant: str) -> str:
    return (f"launchlab: warning: {path}: line {line}: {field}: `{flag}` is not a flag launchlab knows for {kind}; "
            f"did you mean `{meant}`? (the list may be out of date: if the server accepts it, ignore this)")


def test_a_misspelled_flag_of_a_level_is_a_warning_with_the_flag_meant_and_validate_still_passes(tmp_path):
    proc, path = launchlab(tmp_path, SGLANG.replace("--mem-fraction-static:", "--mem-fraction-statc:"))
    assert proc.returncode == 0, proc.stderr
    assert "valid — 1 variant(s) × 2 repetition(s)" in proc.stdout
    assert warning(path, 10, "factors.mem.0.85.flags", "--mem-fraction-statc", "sglang 0.5.17",
                   "--mem-fraction-static") in proc.stderr, proc.stderr
    proc, _ = launchlab(tmp_path, SGLANG)  # spelled right: not a word
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_a_misspelled_flag_of_the_command_is_a_warning_and_right_ones_are_not(tmp_path):
    proc, path = launchlab(tmp_path, VLLM.replace("--gpu-memory-utilization", "--gpu-memory-utilizaton"))
    assert proc.returncode == 0, proc.stderr
    assert warning(path, 6, "server.command[5]", "--gpu-memory-utilizaton", "vllm 0.26",
                   "--gpu-memory-utilization") in proc.stderr, proc.stderr
    assert proc.stderr.count("warning:") == 1  # vLLM's `--no-enable-prefix-caching` is its flag turned off
    proc, _ = launchlab(tmp_path, VLLM)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_only_a_near_miss_of_a_flag_the_kit_knows_is_a_warning(tmp_path):
    """A flag like no known one (the server's own, or newer than the list), or any flag of a kind without a list, may
    well be right: it passes without a word; the near miss beside it does not."""
    far = SGLANG.replace('"0.85": {flags: {--mem-fraction-static: "0.85"}}',
                         '"0.85": {flags: {--mem-fraction-statc: "0.85", --my-own-patched-option: "1"}}')
    proc, path = launchlab(tmp_path, far)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("warning:") == 1 and "--mem-fraction-statc" in proc.stderr, proc.stderr
    no_list = far.replace("kind: sglang", "kind: transformers").replace("ready: {timeout_s: 30}",
                                                                       "ready: {timeout_s: 30, log_pattern: ready}")
    proc, _ = launchlab(tmp_path, no_list)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_run_warns_of_a_misspelled_flag_before_it_launches(tmp_path):
    proc, path = launchlab(tmp_path, SGLANG.replace("--mem-fraction-static:", "--mem-fraction-statc:"), "run",
                           "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert warning(path, 10, "factors.mem.0.85.flags", "--mem-fraction-statc", "sglang 0.5.17",
                   "--mem-fraction-static") in proc.stderr, proc.stderr
    assert "--mem-fraction-statc 0.85" in proc.stdout  # the plan, as it would launch it
