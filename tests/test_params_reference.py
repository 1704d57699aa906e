"""The params schema documents itself: every key described, the docs' params reference and the committed schema file
generated from it, and the shipped params files naming that file for their editors."""

import json

import jsonschema
import yaml

from conftest import ROOT
from launchlab import params
from launchlab.params import reference


def undescribed(node, path="") -> list[str]:
    """The properties anywhere in a JSON Schema that carry no description."""
    found = []
    if isinstance(node, dict):
        for key, child in (node.get("properties") or {}).items():
            if not (isinstance(child, dict) and child.get("description", "").strip()):
                found.append(f"{path}.{key}")
        for key, child in node.items():
            found += undescribed(child, f"{path}/{key}")
    elif isinstance(node, list):
        for child in node:
            found += undescribed(child, path)
    return found


def test_every_key_of_the_params_schema_has_a_description():
    schema = params.json_schema()
    assert undescribed(schema) == []
    # the sections an editor shows when hovering a key's value
    for name in ("ServerSpec", "ReadySpec", "SmokeSpec", "Level", "DrainSpec", "SamplerSpec", "SimSpec", "SshSpec",
                 "LocalSpec"):
        assert schema["$defs"][name]["properties"], name


def test_the_docs_params_reference_is_the_one_generated_from_the_schema():
    page = (ROOT / "docs" / "reference" / "params.md").read_text()
    assert reference.START in page and reference.END in page, "docs/reference/params.md lost its generated reference"
    section = page[page.index(reference.START): page.index(reference.END) + len(reference.END)]
    assert section == reference.markdown(params.json_schema()), (
        "docs/reference/params.md is out of step with the schema: replace the block between the markers with "
        "the output of `launchlab schema --markdown`")
    for key in ("question", "variants", "smoke", "drain", "log_pattern", "fatal_patterns", "stop_grace_s", "sampler",
                "gpu_slots", "nodes"):
        assert f"| `{key}` |" in section, key


def test_the_committed_schema_file_is_the_schema_and_the_shipped_params_name_it_and_validate_against_it():
    committed = json.loads((ROOT / "params" / "params.schema.json").read_text())
    assert committed == params.json_schema(), (
        "params/params.schema.json is out of step: regenerate it with `launchlab schema > params/params.schema.json`")
    validator = jsonschema.Draft202012Validator(committed)
    shipped = sorted((ROOT / "params").glob("*.yaml"))
    assert len(shipped) >= 3
    for path in shipped:
        text = path.read_text()
        if "runs" in yaml.safe_load(text) and "hosts" not in yaml.safe_load(text):
            continue  # an imports file (`launchlab import`), not a params file: checked in test_import.py
        assert text.splitlines()[0] == "# yaml-language-server: $schema=params.schema.json", path.name  # the header
        errors = sorted(validator.iter_errors(yaml.safe_load(text)), key=str)
        assert errors == [], f"{path.name}: {errors[0].message if errors else ''}"
        params.load(path)  # and the kit itself takes them, first line and all
