"""The registry of server kinds (logparse/kinds.py) is the one list of kinds: params, the CLI and the parsers
read it, each kind's module exports the record registered under its name, and params stays cheap to import."""

import importlib
import subprocess
import sys

import pytest

from conftest import ROOT
from launchlab import logparse, params
from launchlab.cli import main
from launchlab.errors import ParamsError
from launchlab.logparse import KINDS

DEMO_TEXT = (ROOT / "params" / "demo.yaml").read_text()
DEMO_READY = '  ready: {timeout_s: 120, health_url: "http://127.0.0.1:{port}/health"}\n'


def test_each_kind_module_exports_the_record_registered_under_its_name():
    for name, kind in KINDS.items():
        assert kind.name == name
        assert importlib.import_module(f"launchlab.logparse.{name}").KIND is kind
        assert logparse.parser_for(name).result().server == name


def test_the_params_schema_offers_exactly_the_registered_kinds():
    kind = params.json_schema()["$defs"]["ServerSpec"]["properties"]["kind"]
    assert kind["enum"] == list(KINDS)


def test_parse_offers_auto_and_every_registered_kind(capsys):
    with pytest.raises(SystemExit):
        main(["parse", "server.log", "--server", "no-such-kind"])
    assert "(choose from 'auto', " + ", ".join(f"'{k}'" for k in KINDS) + ")" in capsys.readouterr().err


def test_a_params_ready_pattern_replaces_the_kinds_and_its_fatal_patterns_add_to_the_kinds():
    own = DEMO_TEXT.replace(DEMO_READY, "  ready: {log_pattern: 'serving', fatal_patterns: ['boom']}\n")
    rules = params.loads(own, "exp.yaml").server.rules()
    assert rules.ready_pattern == "serving"
    assert rules.fatal_patterns == (*KINDS["sglang"].fatal_patterns, "boom")
    assert params.loads(DEMO_TEXT, "exp.yaml").server.rules() == KINDS["sglang"].rules()


def test_a_kind_without_a_ready_line_of_its_own_needs_a_log_pattern_or_a_health_url():
    assert KINDS["generic"].ready_pattern is None
    bare = DEMO_TEXT.replace("kind: sglang", "kind: generic").replace(DEMO_READY, "")
    with pytest.raises(ParamsError, match="a generic server needs ready.log_pattern or ready.health_url"):
        params.loads(bare, "exp.yaml")
    assert params.loads(DEMO_TEXT.replace("kind: sglang", "kind: generic"), "exp.yaml").server.kind == "generic"


def test_importing_params_loads_neither_pandas_nor_matplotlib():
    code = "import sys, launchlab.params; print(sorted(m for m in ('pandas', 'matplotlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
