"""What the schema refuses beyond types: names that would become paths, values that reach ssh, URLs and JSON,
numbers past sane bounds, and plans too large to run — each with the field, its line and what to do."""

import subprocess
import time

import pytest

from conftest import LAUNCHLAB, ROOT
from launchlab import params
from launchlab.errors import ParamsError
from launchlab.runner.plan import make_plan

DEMO_TEXT = (ROOT / "params" / "demo.yaml").read_text()


def problems_of(text: str) -> list[str]:
    with pytest.raises(ParamsError) as info:
        params.loads(text, "exp.yaml")
    return info.value.problems


def with_factors(count: int, levels: int, repetitions: int = 1, name: str = "f{i}", level: str = "l{j}") -> str:
    """The demo with `count` extra factors of `levels` levels each (levels change nothing)."""
    factors = "".join(f"  {name.format(i=i)}:\n" + "".join(f'    "{level.format(i=i, j=j)}": {{}}\n'
                                                           for j in range(levels)) for i in range(count))
    baseline = "".join(f"{name.format(i=i)}: {level.format(i=i, j=0)}, " for i in range(count))
    return (DEMO_TEXT.replace("factors:\n", "factors:\n" + factors)
            .replace("baseline: {", "baseline: {" + baseline)
            .replace("repetitions: 4", f"repetitions: {repetitions}"))


@pytest.mark.parametrize("name", ["../../x", "a/b", ".hidden", "-x", "x" * 65, "é"])
def test_a_host_name_that_is_not_a_slug_is_refused(name):
    [problem] = problems_of(DEMO_TEXT.replace("hosts:\n  box:", f"hosts:\n  {name!r}:"))
    assert problem.startswith("line 8: hosts:") and "must be a slug" in problem


@pytest.mark.parametrize("field", ["host: ../../x", "nodes: [box, ../../x]"])
def test_names_in_host_and_nodes_must_be_slugs(field):
    problems = problems_of(DEMO_TEXT.replace("hosts:\n", f"{field}\nhosts:\n"))
    assert any(p.startswith("line 8: ") and "`../../x` must be a slug" in p for p in problems)


def test_a_plan_of_billions_of_runs_is_refused_with_its_size_without_building_it():
    tic = time.monotonic()
    [problem] = problems_of(with_factors(9, 10))  # 10**9 × the demo's 2 × 2
    assert "4,000,000,000 variant(s) × 1 repetition(s) = 4,000,000,000 runs" in problem
    assert "limit of 10,000 runs" in problem and "`variants:`" in problem
    assert time.monotonic() - tic < 5


def test_repetitions_that_push_the_plan_over_the_limit_are_named():
    text = with_factors(2, 10, repetitions=1000)
    [problem] = problems_of(text)
    line = text.splitlines().index("repetitions: 1000") + 1
    assert problem.startswith(f"line {line}: repetitions:") and "400 variant(s) × 1,000 repetition(s) = 400,000 runs" in problem


def test_a_plan_at_the_limit_is_valid_and_every_run_id_fits_a_file_name():
    exp = params.loads(with_factors(2, 25, repetitions=4))
    plan = make_plan(exp)
    assert len(plan) == params.MAX_RUNS == params.plan_size(exp).runs
    assert max(len(r.run_id) for r in plan) <= 200


def test_make_plan_refuses_an_experiment_grown_past_the_limit_after_validation():
    exp = params.loads(with_factors(2, 25, repetitions=4)).model_copy(update={"repetitions": 1000})
    with pytest.raises(ParamsError, match="2,500,000 runs"):
        make_plan(exp)


def test_the_cli_says_how_large_a_refused_plan_is(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text(with_factors(9, 10))
    res = subprocess.run([*LAUNCHLAB, "validate", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "4,000,000,000 runs" in res.stderr and "Traceback" not in res.stderr


def test_run_ids_longer_than_a_file_name_allows_are_refused():
    [problem] = problems_of(with_factors(6, 2, name="a_rather_long_factor_name_{i}", level="and_a_long_level_{j}"))
    assert "factors:" in problem and "run ids would be up to" in problem and "shorten factor or level names" in problem


def test_a_level_name_is_a_slug_of_at_most_64_characters():
    [problem] = problems_of(DEMO_TEXT.replace('"0.85": {flags', f'"{"x" * 65}": {{flags'))
    assert "level name of factor `mem_fraction`" in problem and "at most 64" in problem


@pytest.mark.parametrize("address", ["-oProxyCommand=touch x", "a b", "host;rm"])
def test_an_ssh_address_cannot_be_an_option_or_hold_spaces(address):
    text = DEMO_TEXT.replace("transport: sim                 # simulated GPUs; real processes on this machine",
                             f"transport: ssh\n    address: {address!r}").replace("    gpu_name:", "    #")
    text = text.replace("    mem_total_mib", "    #").replace("    weights_gib", "    #").replace("    pace:", "    #")
    [problem] = problems_of(text)
    assert problem.startswith("line 11: hosts.box.address:") and "not starting with '-'" in problem


def test_master_addr_and_ssh_user_cannot_be_options():
    problems = problems_of(DEMO_TEXT.replace("hosts:\n", "master_addr: '-x'\nhosts:\n"))
    assert any(p.startswith("line 8: master_addr: master_addr `-x` must be a host name") for p in problems)
    text = DEMO_TEXT.replace("transport: sim                 # simulated GPUs; real processes on this machine",
                             "transport: ssh\n    address: gpu-box\n    user: '-oX'").replace("    gpu_name:", "    #")
    [problem] = problems_of(text.replace("    mem_total_mib", "    #").replace("    weights_gib", "    #")
                            .replace("    pace:", "    #"))
    assert "hosts.box.user" in problem and "must be a user name" in problem


@pytest.mark.parametrize(("old", "new", "field"), [
    ("timeout_s: 120", "timeout_s: .inf", "server.ready.timeout_s"),
    ("timeout_s: 120", "timeout_s: .nan", "server.ready.timeout_s"),
    ("timeout_s: 120", "timeout_s: 10000000", "server.ready.timeout_s"),
    ("tolerance_mib: 64", "tolerance_mib: 99999999999999999999", "drain.tolerance_mib"),
    ("pace: 0.5 ", "gpus: 100000\n    pace: 0.5 ", "hosts.box.gpus"),
])
def test_infinite_nan_and_huge_numbers_are_refused(old, new, field):
    [problem] = problems_of(DEMO_TEXT.replace(old, new))
    assert field in problem


def test_a_smoke_body_must_be_json():
    smoke = "  smoke:\n    url: http://127.0.0.1:{port}/v1\n    body: {when: 2020-01-01, tags: !!set {a, b}}\n"
    problems = problems_of(DEMO_TEXT.replace("  ready: {timeout_s", smoke + "  ready: {timeout_s"))
    assert any("server.smoke.body" in p and "`when`: a date cannot be sent as JSON" in p for p in problems)


def test_a_json_smoke_body_is_kept_as_written():
    smoke = ("  smoke:\n    url: http://127.0.0.1:{port}/v1\n"
             "    body: {model: m, messages: [{role: user, content: hi}], max_tokens: 16, stream: false, stop: null}\n")
    exp = params.loads(DEMO_TEXT.replace("  ready: {timeout_s", smoke + "  ready: {timeout_s"))
    assert exp.server.smoke.body["messages"] == [{"role": "user", "content": "hi"}]


def test_urls_must_be_http():
    [problem] = problems_of(DEMO_TEXT.replace('"http://127.0.0.1:{port}/health"', '"file:///etc/passwd"'))
    assert "server.ready.health_url" in problem and "http://" in problem


def test_a_regex_that_overflows_the_regex_parser_is_a_params_error():
    [problem] = problems_of(DEMO_TEXT.replace("ready: {", "ready: {log_pattern: '" + "(" * 1500 + ")" * 1500 + "', "))
    assert "server.ready.log_pattern" in problem and "not a usable regular expression" in problem


def test_a_gpu_name_cannot_break_the_simulated_csv():
    [problem] = problems_of(DEMO_TEXT.replace("gpu_name: RTX", "gpu_name: a,b RTX"))
    assert "hosts.box.gpu_name" in problem and "commas" in problem


def test_a_command_of_more_than_4096_tokens_is_refused():
    command = "[" + ", ".join(["x"] * 4097) + "]"
    text = DEMO_TEXT.replace("command: [python3,", f"command: {command}\n  x: [python3,")
    problems = problems_of(text)
    assert any("server.command" in p and "4096" in p for p in problems)


def test_problems_across_fields_each_get_their_own_line():
    text = DEMO_TEXT.replace('baseline: {custom_ar: "off"', 'baseline: {custom_ar: "of"').replace('"{port}"', '"{prot}"')
    problems = problems_of(text)
    assert any(p.startswith("line 18: server.command[11]: unknown placeholder {prot}") for p in problems)
    assert any(p.startswith("line 28: baseline: factor `custom_ar` has no level `of`") for p in problems)


def test_a_field_of_another_transport_is_not_suggested_as_its_own_spelling():
    [problem] = problems_of(DEMO_TEXT.replace("transport: sim ", "transport: local\n    workdir: /w\n    #"
                                              ).replace("    gpu_name:", "    #").replace("    weights_gib", "    #")
                            .replace("    pace:", "    #"))
    assert "hosts.box.mem_total_mib: is not a field here" in problem


def test_secrets_lists_env_names_and_flags_and_survives_the_resolved_dump():
    exp = params.loads(DEMO_TEXT + "secrets: [DB_URL, --my-password, -p]\n")
    assert exp.secrets == ["DB_URL", "--my-password", "-p"]
    assert params.loads(params.dump_resolved(exp)).secrets == exp.secrets
    assert params.loads(DEMO_TEXT).secrets == []


def test_a_secret_that_is_neither_an_env_name_nor_a_flag_is_named():
    [problem] = problems_of(DEMO_TEXT + "secrets: [DB_URL, 'db url', '--a b', '-', '1X', '']\n")
    assert problem.startswith("line 31: secrets: `db url`, `--a b`, `-`, `1X`, ``: each entry is an environment")


def test_a_secret_written_as_a_number_must_be_quoted():
    [problem] = problems_of(DEMO_TEXT + "secrets: [123]\n")
    assert "secrets[0]" in problem and "quoted string" in problem


def test_an_empty_host_list_is_refused_rather_than_planning_on_no_host():
    [problem] = problems_of(DEMO_TEXT.replace("hosts:\n", "host: []\nhosts:\n"))
    assert problem.startswith("line 8: host: is an empty list")
