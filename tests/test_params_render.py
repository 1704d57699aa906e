"""Templates are filled exactly once: `{{`/`}}` are literal braces everywhere, JSON flag values reach the server
byte for byte, and only a bare `{name}` of a known placeholder is a placeholder."""

import json

import pytest

from launchlab import params
from launchlab.errors import ParamsError
from launchlab.params import template

BASE = """\
experiment: t
hosts:
  box: {transport: sim, gpus: 2}
server:
  kind: vllm
  command: [vllm, serve, /models/m, --port, "{port}"]
  env: {RUN: "{run_id}"}
  ready: {health_url: "http://127.0.0.1:{port}/health"}
factors:
  compile:
    "none": {}
    "level3": {flags: {--compilation-config: '{{"level": 3, "cudagraph_capture_sizes": [1, 2, 4]}}'}}
baseline: {compile: "none"}
"""

JSON_FLAGS = {
    "--compilation-config": ('{{"level": 3, "cudagraph_capture_sizes": [1, 2, 4]}}',
                             '{"level": 3, "cudagraph_capture_sizes": [1, 2, 4]}'),
    "--speculative-config": ('{{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}}',
                             '{"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}'),
    "--json-model-override-args": ('{{"rope_scaling": {{"rope_type": "yarn", "factor": 4.0}}, "note": "a}}b{{c"}}',
                                   '{"rope_scaling": {"rope_type": "yarn", "factor": 4.0}, "note": "a}b{c"}'),
}


def render_level(text: str, level: str, **kw) -> params.LaunchSpec:
    exp = params.loads(text)
    [variant] = [v for v in params.expand(exp) if v.levels == {"compile": level}]
    return params.render(exp, variant, port=4321, run_id="r1", host="box", **kw)


def problems_of(text: str) -> list[str]:
    with pytest.raises(ParamsError) as info:
        params.loads(text)
    return info.value.problems


@pytest.mark.parametrize("flag", list(JSON_FLAGS))
def test_a_json_flag_value_is_a_factor_level_and_reaches_argv_byte_for_byte(flag):
    written, expected = JSON_FLAGS[flag]
    text = BASE.replace('--compilation-config: \'{{"level": 3, "cudagraph_capture_sizes": [1, 2, 4]}}\'',
                        f"{flag}: {json.dumps(written)}")
    argv = render_level(text, "level3").argv
    assert argv[argv.index(flag) + 1] == expected
    json.loads(expected)


def test_a_json_value_may_hold_a_placeholder():
    text = BASE.replace('[1, 2, 4]}}', '[1, 2, 4], "port": {port}}}')
    argv = render_level(text, "level3").argv
    assert argv[-1] == '{"level": 3, "cudagraph_capture_sizes": [1, 2, 4], "port": 4321}'


def test_doubled_braces_around_a_placeholder_name_stay_literal_and_are_not_the_port():
    text = BASE.replace('"{port}"]', '"{port}", --note, "{{port}}"]').replace('RUN: "{run_id}"', 'RUN: "{{run_id}}-{run_id}"')
    text = text.replace('"http://127.0.0.1:{port}/health"', '"http://127.0.0.1:{port}/health?q={{x}}"')
    spec = render_level(text, "none")
    assert spec.argv[-2:] == ("--note", "{port}")
    assert spec.env == {"RUN": "{run_id}-r1"}
    assert spec.health_url == "http://127.0.0.1:4321/health?q={x}"


def test_every_known_placeholder_is_filled():
    command = ", ".join(f'"{{{p}}}"' for p in params.PLACEHOLDERS)
    text = BASE.replace('[vllm, serve, /models/m, --port, "{port}"]', f"[vllm, {command}]")
    argv = render_level(text, "none", node_rank=1, nnodes=2).argv
    assert argv == ("vllm", "4321", "r1", "box", "1", "2", "127.0.0.1")


@pytest.mark.parametrize("written", ["{port:>2000000000}", "{port!r}", "{port[0]}", "{port.x}", "{port!s:>9}"])
def test_format_specs_conversions_indexes_and_attributes_are_refused(written):
    [problem] = problems_of(BASE.replace('"{port}"]', f'"{written}"]'))
    assert "server.command[4]" in problem
    assert "is not a bare {port}" in problem and "write {port}" in problem


@pytest.mark.parametrize("written", ["{}", "{0}", "{ port }", "{prot}"])
def test_positional_spaced_and_unknown_placeholders_are_refused(written):
    [problem] = problems_of(BASE.replace('RUN: "{run_id}"', f'RUN: "{written}"'))
    assert "server.env.RUN" in problem and "write {{ and }} for literal braces" in problem


def test_following_the_validators_advice_on_braces_gives_a_valid_literal():
    single = BASE.replace("'{{\"level\"", "'{\"level\"").replace("4]}}'", "4]}'")
    [problem] = problems_of(single)
    assert "factors.compile.level3.flags.--compilation-config" in problem
    assert "write {{ and }} for literal braces" in problem
    assert render_level(BASE, "level3").argv[-1] == '{"level": 3, "cudagraph_capture_sizes": [1, 2, 4]}'


@pytest.mark.parametrize("written", ["a{b", "a}b", "{{port}", "{port}}"])
def test_a_single_brace_is_refused_with_its_position(written):
    [problem] = problems_of(BASE.replace('"{port}"]', f'"{written}"]'))
    assert "has a single" in problem and "at character" in problem


def test_braces_in_a_flag_name_are_refused():
    problems = problems_of(BASE.replace('"level3": {flags: {--compilation-config:', '"level3": {flags: {"--x-{port}":'))
    assert any("factors.compile.level3.flags" in p and "braces" in p for p in problems)


def test_fill_never_uses_str_format():
    assert template.fill("{port}{{port}}{{{port}}}", {"port": "{run_id}"}) == "{run_id}{port}{{run_id}}"
    with pytest.raises(template.TemplateError):
        template.fill("{port:>9}", {"port": "1"})
