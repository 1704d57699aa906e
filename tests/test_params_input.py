"""Hostile or broken params files are refused with a ParamsError naming the file and the line, never crash the
loader: binary and non-UTF-8 files, deep nesting, alias bombs, NUL, surrogates and values past the limits."""

import os
import subprocess
from pathlib import Path

import pytest

from conftest import LAUNCHLAB, ROOT
from launchlab import params
from launchlab.errors import ParamsError
from launchlab.params import yamlfile

DEMO_TEXT = (ROOT / "params" / "demo.yaml").read_text()


def problems_of_bytes(tmp_path: Path, raw: bytes) -> list[str]:
    path = tmp_path / "exp.yaml"
    path.write_bytes(raw)
    with pytest.raises(ParamsError) as info:
        params.load(path)
    assert info.value.path == str(path)
    return info.value.problems


def problems_of(tmp_path: Path, text: str) -> list[str]:
    return problems_of_bytes(tmp_path, text.encode("utf-8", "surrogatepass"))


def with_smoke_body(body: str) -> str:
    """The demo with a smoke request whose body is `body` (YAML lines indented under `body:`)."""
    smoke = "  smoke:\n    url: http://127.0.0.1:{port}/v1/completions\n    body:\n" + body
    return DEMO_TEXT.replace("  ready: {timeout_s", smoke + "  ready: {timeout_s")


BILLION_LAUGHS = "".join(
    f"      {name}: &{name} [{', '.join([f'*{prev}' if prev else 'lol'] * 10)}]\n"
    for prev, name in zip(["", "a", "b", "c", "d", "e", "f", "g"], "abcdefghi", strict=False))


def test_a_binary_file_is_refused_as_binary(tmp_path):
    [problem] = problems_of_bytes(tmp_path, b"experiment: x\n\x00\x01\x02\xff")
    assert "line 2" in problem and "binary" in problem


def test_a_latin1_file_is_refused_with_the_line_of_the_first_bad_byte(tmp_path):
    [problem] = problems_of_bytes(tmp_path, DEMO_TEXT.replace("question: >-", "question: café >-").encode("latin-1", "replace"))
    assert "line 5" in problem and "0xe9" in problem and "save the file as UTF-8" in problem


def test_a_utf16_file_is_named_as_such(tmp_path):
    [problem] = problems_of_bytes(tmp_path, DEMO_TEXT.encode("utf-16"))
    assert "UTF-16" in problem


def test_an_endless_file_is_read_only_up_to_the_limit(tmp_path):
    with pytest.raises(ParamsError, match="it is a character device, not a regular file"):
        params.load("/dev/zero")  # refused at once, without reading it
    huge = tmp_path / "huge.yaml"
    with open(huge, "wb") as fh:
        fh.truncate(300 * 2**20)  # sparse: 300 MB that cost nothing to make
    with pytest.raises(ParamsError, match="larger than 256 KiB"):
        params.load(huge)


def test_a_fifo_is_refused_at_once_not_waited_on(tmp_path):
    fifo = tmp_path / "params.yaml"
    os.mkfifo(fifo)  # no writer ever comes: reading it would wait forever
    with pytest.raises(ParamsError, match="it is a FIFO \\(named pipe\\), not a regular file"):
        params.load(fifo)


def test_a_directory_is_a_params_error(tmp_path):
    with pytest.raises(ParamsError, match="cannot read the file"):
        params.load(tmp_path)


@pytest.mark.parametrize("deep", ["[" * 20_000 + "]" * 20_000, "{a: " * 20_000 + "1" + "}" * 20_000],
                         ids=["lists", "mappings"])
@pytest.mark.slow
def test_20000_deep_nesting_is_refused_without_a_recursion_error(tmp_path, deep):
    [problem] = problems_of(tmp_path, DEMO_TEXT + f"question: {deep}\n")
    assert "line 31" in problem and f"deeper than {yamlfile.MAX_DEPTH} levels" in problem


def test_nesting_made_deep_through_aliases_is_refused(tmp_path):
    chain = "".join(f"      l{i}: &l{i} [[[[[[[[[[*l{i - 1}]]]]]]]]]]\n" for i in range(1, 10))
    [problem] = problems_of(tmp_path, with_smoke_body("      l0: &l0 x\n" + chain))
    assert f"deeper than {yamlfile.MAX_DEPTH} levels" in problem


def test_a_billion_laughs_in_the_smoke_body_is_refused_before_it_is_expanded(tmp_path):
    [problem] = problems_of(tmp_path, with_smoke_body(BILLION_LAUGHS))
    assert "alias bomb" in problem and "line 2" in problem


def test_a_billion_laughs_in_a_typed_field_is_refused(tmp_path):
    text = DEMO_TEXT.replace("server:\n", "x-lol:\n" + BILLION_LAUGHS.replace("      ", "  ") + "server:\n")
    [problem] = problems_of(tmp_path, text)
    assert "alias bomb" in problem


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path):
    [problem] = problems_of(tmp_path, with_smoke_body("      loop: &loop [1, *loop]\n"))
    assert "endless" in problem


def test_a_short_string_repeated_by_aliases_past_the_text_limit_is_refused(tmp_path):
    long = "x" * 60_000
    body = f"      s: &s {long}\n      t: [{', '.join(['*s'] * 20)}]\n"
    [problem] = problems_of(tmp_path, with_smoke_body(body))
    assert "KiB of text" in problem


def test_modest_aliases_still_work(tmp_path):
    text = DEMO_TEXT.replace('"0.75": {flags: {--mem-fraction-static: "0.75"}}',
                             '"0.75": &low {flags: {--mem-fraction-static: "0.75"}}')
    path = tmp_path / "exp.yaml"
    path.write_text(text.replace('"0.85": {flags: {--mem-fraction-static: "0.85"}}', '"0.85": *low'))
    exp = params.load(path)
    assert exp.factors["mem_fraction"]["0.85"].flags == {"--mem-fraction-static": "0.75"}


@pytest.mark.parametrize("escape", ["\\0", "\\x00", "\\u0000"])
def test_a_nul_written_as_an_escape_is_refused_in_any_string(tmp_path, escape):
    problems = problems_of(tmp_path, DEMO_TEXT.replace('"0.75"}}', f'"0.7{escape}5"}}}}', 1))
    assert any("NUL" in p and "line 26" in p for p in problems)


def test_a_nul_in_a_mapping_key_is_refused(tmp_path):
    problems = problems_of(tmp_path, with_smoke_body('      "a\\0b": 1\n'))
    assert any("NUL" in p for p in problems)


def test_a_lone_surrogate_is_refused_and_the_message_stays_printable(tmp_path):
    problems = problems_of(tmp_path, DEMO_TEXT.replace('question: >-', 'question: "\\ud800"\nx: >-'))
    assert any("surrogate" in p for p in problems)
    "\n".join(problems).encode("utf-8")  # the CLI must be able to print them


def test_a_lone_surrogate_where_pydantic_quotes_the_value_is_still_a_params_error(tmp_path):
    problems = problems_of(tmp_path, DEMO_TEXT.replace('baseline: {custom_ar: "off"', 'baseline: {custom_ar: "o\\ud800"'))
    assert any("surrogate" in p and "line 28" in p for p in problems)


def test_a_string_over_64_kib_is_refused(tmp_path):
    problems = problems_of(tmp_path, DEMO_TEXT.replace("question: >-", f"question: {'q' * 70_000}\nx: >-"))
    assert any("70,000 characters" in p and "64 KiB" in p for p in problems)


@pytest.mark.parametrize("value", ["2001-13-45", "!!float abc", "!!int abc", "!!timestamp abc", "9" * 5000, "!!set a"],
                         ids=["bad-date", "bad-float", "bad-int", "bad-timestamp", "5000-digit-int", "set-of-a-scalar"])
def test_values_pyyaml_cannot_construct_are_params_errors(tmp_path, value):
    problems = problems_of(tmp_path, DEMO_TEXT.replace("repetitions: 4", f"repetitions: {value}"))
    assert any(p.startswith("line 29:") for p in problems), problems


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCHLAB, *args], capture_output=True, text=True, timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["deep", "bomb", "binary"])
def test_validate_refuses_hostile_files_with_exit_2_and_no_traceback(tmp_path, case):
    path = tmp_path / "exp.yaml"
    path.write_text({"deep": DEMO_TEXT + "question: " + "[" * 20_000 + "]" * 20_000 + "\n",
                     "bomb": with_smoke_body(BILLION_LAUGHS), "binary": "experiment: x\n\x00"}[case])
    res = cli("validate", str(path))
    assert res.returncode == 2, res.stderr
    assert str(path) in res.stderr and "Traceback" not in res.stderr


def test_run_refuses_an_alias_bomb_in_the_smoke_body_before_launching_anything(tmp_path, sim_root):
    path = tmp_path / "exp.yaml"
    path.write_text(with_smoke_body(BILLION_LAUGHS))
    res = cli("run", str(path), "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and "alias bomb" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("patch", ["x" * 300, "a/" * 3000, "a\\0b"], ids=["long-name", "long-path", "nul"])
def test_a_patch_path_the_file_system_cannot_take_is_a_params_error(tmp_path, patch):
    text = DEMO_TEXT.replace('"on": {}', f'"on": {{patches: ["{patch}"]}}')
    problems = problems_of(tmp_path, text)
    assert any("factors.custom_ar.on.patches[0]" in p for p in problems)


@pytest.mark.parametrize("char", ["\\N", "\\L", "\\P", "\\uFEFF", "\\t"], ids=["NEL", "LS", "PS", "BOM", "tab"])
def test_the_resolved_dump_reads_back_exactly_even_with_characters_yaml_reads_as_line_breaks(char):
    exp = params.loads(DEMO_TEXT.replace('--mem-fraction-static: "0.85"', f'--mem-fraction-static: "0.8{char}5"'))
    again = params.loads(params.dump_resolved(exp))
    assert again == exp


def test_a_control_character_yaml_refuses_is_named_with_its_line(tmp_path):
    [problem] = problems_of(tmp_path, DEMO_TEXT.replace("question: >-", "question: bell\x07\nx: >-"))
    assert problem == "line 5: character 0x0007 is not allowed in YAML; remove it"


def test_an_unquoted_flag_value_is_one_problem_named_once(tmp_path):
    # issue 28: it was listed twice, once per branch of the flag value's type
    demo = (ROOT / "params/demo.yaml").read_text()
    found = problems_of(tmp_path, demo.replace('--mem-fraction-static: "0.75"', "--mem-fraction-static: 0.75"))
    assert len(found) == 1 and "--mem-fraction-static: must be a quoted string, got the number 0.75" in found[0]


def test_a_misspelt_enum_value_or_params_path_gets_a_did_you_mean(tmp_path):
    """Issue 41, point 4: `server.kind: sglan` got pydantic's "Input should be 'sglang', …", and a params path
    that does not exist "No such file or directory"; key typos already got a did-you-mean."""
    path = tmp_path / "typo.yaml"
    path.write_text(DEMO_TEXT.replace("kind: sglang", "kind: sglan").replace("transport: sim", "transport: simm"))
    with pytest.raises(ParamsError) as err:
        params.load(path)
    text = str(err.value)
    assert "server.kind: 'sglan' is not one of: sglang, vllm" in text and "(did you mean `sglang`?)" in text
    assert "unknown transport 'simm' (did you mean `sim`?)" in text
    with pytest.raises(ParamsError, match=r"cannot read the file: no such file; did you mean .*demo\.yaml\?"):
        params.load(ROOT / "params" / "dem.yaml")
