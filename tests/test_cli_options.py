"""`launchlab run --dry-run | --only | --repetitions`, `launchlab ls` and `launchlab schema` as a user calls them."""

import json
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from conftest import LAUNCHLAB, ROOT


def cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCHLAB, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


@pytest.mark.slow
def test_dry_run_prints_every_run_and_each_variants_command_with_secrets_masked_and_launches_nothing(tmp_path):
    spec = yaml.safe_load((ROOT / "params/demo.yaml").read_text())
    spec["server"]["env"] = {"HF_TOKEN": "hf_dryrunsecret123"}
    spec["server"]["command"] += ["--api-key", "sk-dryrun-456"]
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    proc = cli("run", str(path), "--dry-run", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "16 runs" in out and "nothing is launched" in out
    assert "01_custom_ar-off.mem_fraction-0.75_rep1" in out and "16_custom_ar-on.mem_fraction-0.85_rep4" in out
    assert "--disable-custom-all-reduce" in out and "--mem-fraction-static 0.85" in out
    assert "SGLANG_FORCE_CUSTOM_AR_PCIE=0" in out
    assert "hf_dryrunsecret123" not in out and "sk-dryrun-456" not in out and "HF_TOKEN=****" in out
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_only_and_repetitions_select_a_subset_of_the_plan(tmp_path):
    proc = cli("run", str(ROOT / "params/demo.yaml"), "--dry-run", "--only", "mem_fraction=0.85", "--repetitions", "1")
    assert proc.returncode == 0, proc.stderr
    runs = [line.split()[1] for line in proc.stdout.splitlines() if line.strip().startswith("[")]
    assert runs == ["02_custom_ar-off.mem_fraction-0.85_rep1", "04_custom_ar-on.mem_fraction-0.85_rep1"]
    proc = cli("run", str(ROOT / "params/demo.yaml"), "--dry-run", "--only", "on", "0.75")
    runs = [line.split()[1] for line in proc.stdout.splitlines() if line.strip().startswith("[")]
    assert runs == [f"{seq:02d}_custom_ar-on.mem_fraction-0.75_rep{rep}" for seq, rep in ((3, 1), (7, 2), (11, 3), (15, 4))]
    bad = cli("run", str(ROOT / "params/demo.yaml"), "--dry-run", "--only", "0.99")
    assert bad.returncode == 2 and "--only 0.99: no such level" in bad.stderr and "mem_fraction=0.85" in bad.stderr


@pytest.mark.slow
def test_only_runs_just_those_runs_and_ls_lists_the_run_directory(tmp_path, sim_root):
    out = tmp_path / "out"
    proc = cli("run", "--no-html", str(ROOT / "params/demo.yaml"), "--out", str(out), "--only", "custom_ar=off",
               "--repetitions", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["run_ids"] == ["01_custom_ar-off.mem_fraction-0.75_rep1", "02_custom_ar-off.mem_fraction-0.85_rep1"]
    listing = cli("ls", str(out))
    assert listing.returncode == 0, listing.stderr
    [line] = listing.stdout.splitlines()
    assert str(run_dir) in line and "demo-custom-ar-vs-mem-fraction" in line and "2/2 runs" in line
    # the subset cannot decide custom_ar, and the headline says so first
    assert "Inconclusive: custom_ar is undetermined: only custom_ar=off was planned" in line, line


@pytest.mark.slow
def test_more_repetitions_than_the_params_file_has_runs_every_one_of_them(tmp_path, sim_root):
    # the run notebook finds its run in the plan the batch made, not in the file's (4 repetitions in demo.yaml)
    out = tmp_path / "out"
    proc = cli("run", "--no-html", str(ROOT / "params/demo.yaml"), "--out", str(out), "--only", "custom_ar=off",
               "mem_fraction=0.75", "--repetitions", "5")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(proc.stdout.strip())
    records = {p.parent.name: json.loads(p.read_text()) for p in run_dir.glob("runs/*/status.json")}
    assert sorted(records) == [f"{seq:02d}_custom_ar-off.mem_fraction-0.75_rep{rep}"
                               for seq, rep in ((1, 1), (5, 2), (9, 3), (13, 4), (17, 5))]
    # the progress counts the selection: [5/5] for the run the full plan places 17th, never [17/5]
    assert "[5/5] 17_custom_ar-off.mem_fraction-0.75_rep5" in proc.stderr and "[17/5]" not in proc.stderr, proc.stderr
    # each ran its server (the same outcome five times), none is the kit's error
    assert {r["status"] for r in records.values()} == {records["01_custom_ar-off.mem_fraction-0.75_rep1"]["status"]}
    assert all(r["status"] != "error" and r["phase_reached"] for r in records.values()), records


def test_ls_of_an_empty_folder_says_so(tmp_path):
    proc = cli("ls", str(tmp_path))
    assert proc.returncode == 0 and "no run directory under" in proc.stderr


@pytest.mark.slow
def test_the_json_schema_describes_every_key_and_the_shipped_params_validate_against_it():
    proc = cli("schema")
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for path in sorted((ROOT / "params").glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if "runs" in data and "hosts" not in data:
            continue  # an imports file (`launchlab import`), checked in test_import.py
        errors = sorted(validator.iter_errors(data), key=str)
        assert errors == [], f"{path.name}: {errors[0].message if errors else ''}"
    assert "experiment" in schema["properties"] and "sampler" in schema["properties"]


def test_the_parser_is_built_one_small_function_per_subcommand_with_every_subcommand_and_option():
    """Issue 49: build_parser was 105 lines; each subcommand's options are now a function of their own."""
    import argparse
    import ast

    from launchlab import cli as cli_module
    from test_code_shape import body_lines

    tree = ast.parse((ROOT / "lib/launchlab/cli.py").read_text())
    builders = {n.name: body_lines(n) for n in tree.body if isinstance(n, ast.FunctionDef)
                and (n.name == "build_parser" or n.name.endswith("_parser"))}
    assert len(builders) == 11 and all(lines < 40 for lines in builders.values()), builders
    parser = cli_module.build_parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(sub.choices) == ["init", "validate", "run", "import", "report", "compare", "ls", "schema", "diagnose",
                                 "parse"]
    options = {name: sorted(o for a in p._actions for o in a.option_strings) for name, p in sub.choices.items()}
    assert options["run"] == sorted(["-h", "--help", "--out", "--resume", "--stop-leftovers", "--wait", "--dry-run",
                                     "--only", "--repetitions", "--no-html"])
    assert options["ls"] == ["--help", "--html", "-h"] and options["parse"] == ["--help", "--json", "--server", "-h"]
    assert cli_module.build_parser().parse_args(["ls", "examples", "--html"]).html == ""
