"""The Host protocol (hosts/base.py) is the whole contract between a transport and the rest of the kit (issue 26):
every transport's host has every member of it, everything outside hosts/ asks a host only what the protocol
declares, and what a scheduler does differently is behind the protocol's methods — the run path asks every host
the same and never branches on a fact of the host to pick its steps. Read from the source with `ast`, and from
the hosts the transports open."""

import ast
from pathlib import Path

import pytest

from launchlab import hosts
from launchlab.hosts.base import Host

LIB = Path(__file__).resolve().parents[1] / "lib" / "launchlab"
CALLERS = ("run", "runner", "reporting", "verdicts")  # the packages above the transports that hold a host
# facts of a host the run path may decide on, and why that is no scheduler's branch
DECIDES_ON = {
    "concurrent_commands": "whether the host's commands may run from several threads: how to run them, not what",
}


def members() -> set[str]:
    """The protocol's attributes and methods."""
    methods = {name for name, value in vars(Host).items() if callable(value) and not name.startswith("_")}
    return set(Host.__annotations__) | methods


def data_members() -> set[str]:
    return set(Host.__annotations__)


def open_host(tmp_path, transport: str):
    """A host of the transport, opened from a params entry as a batch opens it; none connects or runs anything
    until a command runs (the ssh and Slurm logins name a machine never contacted here)."""
    from launchlab.hosts.local_spec import LocalSpec
    from launchlab.hosts.sim_spec import SimSpec
    from launchlab.hosts.slurm_spec import SlurmSpec
    from launchlab.hosts.ssh_spec import SshSpec

    specs = {"local": LocalSpec(transport="local", workdir=str(tmp_path / "w")),
             "sim": SimSpec(transport="sim", gpus=1, workdir=str(tmp_path / "w")),
             "ssh": SshSpec(transport="ssh", address="gpu-box"),
             "slurm": SlurmSpec(transport="slurm", login="login-node", partition="gpu")}
    assert set(specs) == set(hosts.TRANSPORTS), "a new transport: add its entry here"
    return hosts.connect(transport, specs[transport], sim_box=tmp_path / "box")


def host_attributes(tree: ast.AST) -> list[ast.Attribute]:
    """`host.x`, `node.host.x`, `n.host.x`, `self.host.x`: what the code reads or calls on a host."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id == "host") or \
                    (isinstance(owner, ast.Attribute) and owner.attr == "host"):
                found.append(node)
    return found


def callers() -> list[Path]:
    return [p for package in CALLERS for p in sorted((LIB / package).rglob("*.py"))]


def conditions(tree: ast.AST) -> list[ast.AST]:
    """The expressions the code decides on: if and while tests, conditional expressions, comprehension filters."""
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While, ast.IfExp)):
            found.append(node.test)
        elif isinstance(node, ast.comprehension):
            found.extend(node.ifs)
    return found


def branches_on_host_facts(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [f"{path.relative_to(LIB)}:{a.lineno} decides on host.{a.attr}"
            for test in conditions(tree) for a in host_attributes(test)
            if a.attr in data_members() and a.attr not in DECIDES_ON]


@pytest.mark.parametrize("transport", sorted(hosts.TRANSPORTS))
def test_every_transport_opens_a_host_with_every_member_of_the_protocol(tmp_path, sim_root, transport):
    host = open_host(tmp_path, transport)
    try:
        assert sorted(m for m in members() if not hasattr(host, m)) == []
    finally:
        host.close()


def test_the_in_memory_host_has_every_member_of_the_protocol_and_nothing_the_kit_does_not_ask():
    """tests/memhost.py stands in for a host in the run path's in-process tests: what it offers beyond the protocol
    is the tests' own handle on it (its processes, files and commands, and a process of someone else's)."""
    from memhost import MemoryHost, Program

    host = MemoryHost(server=Program())
    assert sorted(m for m in members() if not hasattr(host, m)) == []
    own = {n for n in dir(host) if not n.startswith("_")} - members()
    assert own == {"commands", "dirs", "files", "foreign", "gpus", "handler", "processes", "server"}


def test_outside_the_transports_a_host_is_asked_only_what_the_protocol_declares():
    used = {(str(p.relative_to(LIB)), a.attr) for p in callers() for a in host_attributes(ast.parse(p.read_text()))}
    assert {"run_on_gpu_node", "facts_before_start", "job_start", "final_state"} <= {attr for _, attr in used}
    assert sorted(f"{path}: host.{attr}" for path, attr in used if attr not in members()) == []


def test_the_run_path_decides_on_no_fact_of_a_host_the_scheduler_differs_in():
    assert [line for p in callers() for line in branches_on_host_facts(p)] == []


def test_the_check_finds_a_branch_on_a_fact_of_the_host(tmp_path):
    module = tmp_path / "steps.py"
    module.write_text("def start(run_nodes, node):\n"
                      "    if not all(n.host.workdir for n in run_nodes):\n        pass\n"
                      "    x = 1 if node.host.simulated else 2\n"
                      "    y = [n for n in run_nodes if n.host.per_task]\n"
                      "    if node.host.concurrent_commands:\n        pass\n")
    found = ast.parse(module.read_text())
    assert [(a.lineno, a.attr) for t in conditions(found) for a in host_attributes(t)
            if a.attr in data_members() and a.attr not in DECIDES_ON] == [(2, "workdir"), (4, "simulated"),
                                                                         (5, "per_task")]


@pytest.mark.parametrize("transport", ["local", "slurm"])
def test_a_scheduler_s_host_answers_the_run_path_s_questions_through_the_protocol(tmp_path, sim_root, transport):
    """The questions whose answers differ between a host that runs a process when it starts it and a scheduler's:
    asked the same way of both (the Slurm host here has an ssh login that is never contacted)."""
    host = open_host(tmp_path, transport)
    try:
        if transport == "slurm":
            assert host.run_on_gpu_node("nvidia-smi -L") is None
            assert host.facts_before_start() == {}
        else:
            assert host.run_on_gpu_node("echo looked") == "looked\n"
            assert host.facts_before_start() is None
            assert host.job_start(hosts.ProcessRef("server", 1, 1), lambda reason: None) is None
    finally:
        host.close()
