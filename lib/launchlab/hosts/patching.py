"""Instrumentation as a declared factor: unified diffs applied to the server's installed package on the host
before a launch and reverted after it (also when the run fails), with the wheel's RECORD hashes as the proof
that the package is pristine again. A patch that does not apply stops everything before any launch.
"""

from __future__ import annotations

from pathlib import Path

from launchlab.errors import HostError
from launchlab.hosts import Host, commands, provenance
from launchlab.logparse.kinds import KINDS
from launchlab.store import workspace


def _root(host: Host, argv) -> tuple[str, dict]:
    facts = provenance.integrity(host, argv)
    if not facts or "root" not in facts:
        raise HostError(host.name, "patches need the server to be started as `PYTHON -m PACKAGE…` so the kit can find "
                                   f"the installed package; could not locate it ({(facts or {}).get('error', argv[:3])})")
    return facts["root"], facts


def of_variant(host: Host, argv, variant, kind: str) -> tuple[str, ...]:
    """The patches a variant applies on this host: its own, and where it asks for the kind's instrumentation
    (`instrument: true`), the kind's patch for the server version installed there — read from the host's own
    package record; HostError naming the version when the kit has no patch for it, or none for the kind."""
    if not variant.instrument:
        return variant.patches
    inst = KINDS[kind].instrumentation
    if inst is None:
        raise HostError(host.name, f"`instrument: true` asks for the {kind} server's instrumentation, and the kit has "
                                   "none for that kind; give the patch under `patches:`; nothing was launched")
    _, facts = _root(host, argv)
    version = facts.get("version")
    if version not in inst.versions:
        raise HostError(host.name, f"{facts.get('package') or kind} {version or '(version unknown)'} is installed "
                                   f"there; the kit's instrumentation patch ({inst.patch}) is for "
                                   f"{', '.join(inst.versions)} only — give a patch for this version under "
                                   "`patches:`, or drop `instrument`; nothing was launched")
    return (*variant.patches, str(workspace.template("params", "patches", inst.patch)))


def check(host: Host, argv, patches: tuple[str, ...], host_dir: str) -> None:
    """Dry-run every patch against the installed package; raise with the patch's own complaint if one fails."""
    if not patches:
        return
    root, facts = _root(host, argv)
    host.make_dir(host_dir)
    for i, local in enumerate(patches):
        remote = f"{host_dir}/check-{i}.diff"
        host.write_text(remote, Path(local).read_text(encoding="utf-8"))
        res = host.run(commands.patch_check(root, remote), check=False)
        if res.exit_code != 0:
            raise HostError(host.name, f"patch {local} does not apply to {facts.get('package')} {facts.get('version')} "
                                       f"installed at {root}: {(res.stdout + res.stderr).strip()[-800:]} — "
                                       "regenerate it against that version (diff -u a/… b/… paths relative to "
                                       "site-packages); nothing was launched")


def apply(host: Host, argv, patches: tuple[str, ...], host_dir: str) -> tuple[str, list[str]]:
    """Apply the patches in order; return the package root and the host paths of the applied patches."""
    root, _ = _root(host, argv)
    applied: list[str] = []
    for i, local in enumerate(patches):
        remote = f"{host_dir}/patch-{i}.diff"
        host.write_text(remote, Path(local).read_text(encoding="utf-8"))
        res = host.run(commands.patch_check(root, remote), check=False)
        if res.exit_code != 0:
            revert(host, root, applied)
            raise HostError(host.name, f"patch {local} does not apply at {root}: {(res.stdout + res.stderr).strip()[-800:]}")
        host.run(commands.patch_apply(root, remote), idempotent=False)  # a second run would find it applied and fail
        applied.append(remote)
    return root, applied


def revert(host: Host, root: str, applied: list[str]) -> None:
    for remote in reversed(applied):
        host.run(commands.patch_revert(root, remote), idempotent=False)


def pristine(host: Host, argv) -> tuple[bool, dict]:
    """True when every installed file matches its RECORD hash again and nothing was added."""
    facts = provenance.integrity(host, argv) or {}
    return not (facts.get("modified") or facts.get("added") or facts.get("error")), facts
