from pathlib import Path

import pytest

from conftest import ROOT, write_params
from launchlab import params
from launchlab.errors import ParamsError

DEMO = ROOT / "params" / "demo.yaml"


def problems_of(tmp_path: Path, body: str) -> list[str]:
    path = write_params(tmp_path, body)
    with pytest.raises(ParamsError) as info:
        params.load(path)
    assert info.value.path == str(path)
    assert str(path) in str(info.value)
    return info.value.problems


BASE = """\
experiment: t
hosts:
  box: {transport: sim, gpus: 2}
server:
  kind: sglang
  command: [python3, -m, launchlab.sim.sglang_server, --port, "{port}"]
factors:
  mem:
    "0.5": {flags: {--mem-fraction-static: "0.5"}}
    "0.9": {flags: {--mem-fraction-static: "0.9"}}
baseline: {mem: "0.5"}
"""


def test_the_demo_params_validate():
    exp = params.load(DEMO)
    assert exp.simulated
    assert [v.name for v in params.expand(exp)] == [
        "custom_ar=off, mem_fraction=0.75", "custom_ar=off, mem_fraction=0.85",
        "custom_ar=on, mem_fraction=0.75", "custom_ar=on, mem_fraction=0.85"]


def test_unknown_key_is_rejected_with_its_field_path_line_and_a_suggestion(tmp_path):
    body = BASE.replace('"0.9": {flags:', '"0.9": {flagz:')
    [problem] = problems_of(tmp_path, body)
    assert "factors.mem.0.9.flagz" in problem
    assert "line 10" in problem
    assert "did you mean `flags`" in problem


def test_unquoted_on_is_an_error_not_a_boolean(tmp_path):
    body = BASE.replace('"0.9": {flags', 'on: {flags').replace('baseline: {mem: "0.5"}', "baseline: {mem: '0.5'}")
    problems = problems_of(tmp_path, body)
    assert any("`on` is read as a boolean" in p and "line 10" in p for p in problems)


def test_a_flag_value_written_as_a_number_must_be_quoted(tmp_path):
    problems = problems_of(tmp_path, BASE.replace('--mem-fraction-static: "0.9"', "--mem-fraction-static: 0.90"))
    assert any("factors.mem.0.9.flags.--mem-fraction-static" in p and "quoted string" in p for p in problems)


def test_duplicate_keys_are_reported(tmp_path):
    body = BASE.replace("experiment: t\n", "experiment: t\nexperiment: u\n")
    assert any("appears twice" in p for p in problems_of(tmp_path, body))


def test_every_problem_is_reported_at_once(tmp_path):
    body = BASE.replace("kind: sglang", "kind: sglangg").replace('{mem: "0.5"}', '{mem: "0.7"}').replace(
        '"{port}"', '"{prot}"')
    problems = problems_of(tmp_path, body)
    text = "\n".join(problems)
    assert "server.kind" in text


def test_baseline_and_placeholders_are_checked_against_the_design(tmp_path):
    text = "\n".join(problems_of(tmp_path, BASE.replace('{mem: "0.5"}', '{mem: "0.7"}').replace('"{port}"', '"{prot}"')))
    assert "factor `mem` has no level `0.7`" in text
    assert "unknown placeholder {prot}" in text


def test_a_missing_required_field_is_named(tmp_path):
    problems = problems_of(tmp_path, BASE.replace("  kind: sglang\n", ""))
    assert any("server.kind" in p and "required" in p for p in problems)


def test_unknown_transport_is_named(tmp_path):
    problems = problems_of(tmp_path, BASE.replace("transport: sim", "transport: telnet"))
    assert any("hosts.box" in p and "telnet" in p for p in problems)


def test_invalid_yaml_gives_the_line(tmp_path):
    problems = problems_of(tmp_path, BASE + "factors: [\n")
    assert any("not valid YAML" in p for p in problems)


def test_a_missing_file_is_a_params_error(tmp_path):
    with pytest.raises(ParamsError, match="cannot read"):
        params.load(tmp_path / "nope.yaml")


def test_flags_replace_remove_and_add():
    argv = ["srv", "--tp", "8", "--mem-fraction-static", "0.8", "--trust-remote-code"]
    out = params.apply_flags(argv, {"--mem-fraction-static": "0.55", "--trust-remote-code": False,
                                    "--disable-custom-all-reduce": True, "--port": "1"})
    assert out == ["srv", "--tp", "8", "--mem-fraction-static", "0.55", "--disable-custom-all-reduce", "--port", "1"]


def test_render_fills_placeholders_in_command_env_and_health_url(tmp_path):
    extra = "env: {RUN: '{run_id}'}\n  ready: {health_url: 'http://127.0.0.1:{port}/health'}\n  command:"
    exp = params.loads(BASE.replace("command:", extra))
    variant = params.expand(exp)[1]
    spec = params.render(exp, variant, port=4321, run_id="r1", host="box")
    assert spec.argv[-3:] == ("4321", "--mem-fraction-static", "0.9")
    assert spec.env == {"RUN": "r1"}
    assert spec.health_url == "http://127.0.0.1:4321/health"


def test_explicit_variants_replace_the_product():
    body = BASE.replace("baseline:", 'variants: [{mem: "0.9"}, {mem: "0.5"}]\nbaseline:')
    exp = params.loads(body)
    assert [v.levels for v in params.expand(exp)] == [{"mem": "0.9"}, {"mem": "0.5"}]
    assert params.baseline_variant(exp).levels == {"mem": "0.5"}
