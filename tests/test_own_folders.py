"""Issue 39, part 1: the kit's folders where other users can make names first (the shared temp directory: the
simulated boxes' folder; a host's work folder wherever it is) are used only when they are the user's alone —
made 0700 when missing, refused with an error naming the folder and its owner when another user made them, when
others can write them, or when they are links. Before, the kit used `$TMPDIR/launchlab-host-<uid>` whoever had made
it: a package planted in a future run folder ran as the victim (the server starts there), and `server.env` was
written through a planted link. Another user is played by uid 65534 (nobody) where the tests run as root; else
by a folder root owns."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import LAUNCHLAB
from launchlab import safefiles
from launchlab.errors import HostError, NotYours
from launchlab.hosts.local import LocalHost

OTHER_UID = 65534


def anothers_folder(tmp_path: Path, name: str) -> Path:
    """A folder another user made first (as root: chowned to nobody; else one root owns)."""
    if os.getuid() != 0:
        return Path("/")
    folder = tmp_path / name
    folder.mkdir(mode=0o777)
    os.chmod(folder, 0o777)  # as `mkdir` under a umask of 0 leaves it: anyone may plant files in it
    os.chown(folder, OTHER_UID, OTHER_UID)
    return folder


def test_a_missing_folder_is_made_for_the_user_alone(tmp_path):
    made = safefiles.own_folder(tmp_path / "shared-tmp" / "launchlab-sim-1000", "the simulated boxes' folder")
    assert made.is_dir() and made.stat().st_mode & 0o777 == 0o700 and made.stat().st_uid == os.getuid()
    assert safefiles.own_folder(made, "again") == made  # and used as it is the next time


def test_another_users_folder_is_refused_naming_it_and_its_owner(tmp_path):
    folder = anothers_folder(tmp_path, "launchlab-sim-0")
    with pytest.raises(NotYours, match=r"belongs to (nobody|uid 65534|root), not to you .*will not use it"):
        safefiles.own_folder(folder, "the simulated boxes' folder")


def test_a_folder_others_can_write_or_a_link_is_refused_even_when_it_is_the_users(tmp_path):
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    os.chmod(open_folder, 0o777)
    with pytest.raises(NotYours, match=r"writable by other users \(mode drwxrwxrwx\): `chmod go-w"):
        safefiles.own_folder(open_folder, "the work folder")
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    link = tmp_path / "launchlab-sim-0"
    link.symlink_to(mine)  # planted by someone else, pointing at a folder the victim owns
    with pytest.raises(NotYours, match="is a symbolic link"):
        safefiles.own_folder(link, "the simulated boxes' folder")
    (tmp_path / "file").write_text("")
    with pytest.raises(NotYours, match="not a folder"):
        safefiles.own_folder(tmp_path / "file", "the work folder")


def test_a_hosts_work_folder_is_checked_on_the_host_before_anything_is_made_in_it(tmp_path):
    foreign = anothers_folder(tmp_path, "launchlab-host-0")
    host = LocalHost("box", workdir=str(foreign))
    with pytest.raises(HostError, match=r"the work folder .* belongs to \w+, not to you .*nothing was launched"):
        host.claim_workdir()
    run_folder = f"{foreign}/exp/20261203-120000/01_rep1"
    with pytest.raises(HostError, match="belongs to"):
        host.make_dir(run_folder)  # checked again for every run folder: it could be swapped between runs
    assert not Path(run_folder).exists()

    writable = tmp_path / "writable"
    writable.mkdir()
    os.chmod(writable, 0o775)
    with pytest.raises(HostError, match=r"writable by other users \(drwxrwxr-x\)"):
        LocalHost("box", workdir=str(writable)).claim_workdir()
    link = tmp_path / "link"
    link.symlink_to(writable)
    with pytest.raises(HostError, match="symbolic link"):
        LocalHost("box", workdir=str(link)).make_dir(f"{link}/exp/run")

    fresh = LocalHost("box", workdir=str(tmp_path / "new" / "work"))
    fresh.claim_workdir()
    fresh.make_dir(f"{tmp_path}/new/work/exp/run")
    assert (tmp_path / "new/work").stat().st_mode & 0o777 == 0o700
    assert (tmp_path / "new/work/exp/run").stat().st_mode & 0o777 == 0o700


def test_the_local_hosts_default_work_folder_is_the_one_its_docs_name(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert LocalHost("box").workdir == str(tmp_path / ".launchlab/work")
    assert LocalHost("box", workdir="~/runs").workdir == str(tmp_path / "runs")


@pytest.mark.slow
def test_a_batch_refuses_another_users_work_folder_and_launches_nothing(tmp_path, small_params, sim_root):
    params = small_params(pace=0.05)
    foreign = anothers_folder(tmp_path, "hostwork-of-another")
    planted = None
    if foreign != Path("/"):
        # what the attack planted: a package the server (`python3 -m launchlab.sim…`, started in its run folder)
        # would import before the kit's own
        planted = foreign / "planted"
        planted.mkdir()
    params.write_text(params.read_text().replace(str(tmp_path / "hostwork"), str(foreign)))
    proc = subprocess.run([*LAUNCHLAB, "run", str(params)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the work folder" in proc.stderr and "not to you" in proc.stderr and "nothing was launched" in proc.stderr
    assert "Traceback" not in proc.stderr
    if planted is not None:
        assert sorted(p.name for p in foreign.iterdir()) == ["planted"]  # no run folder made in it
    assert not list((tmp_path / "outputs").glob("*/*/runs/*/server.log"))


@pytest.mark.slow
def test_a_batch_refuses_a_simulated_boxes_folder_another_user_made(tmp_path, small_params, sim_root, monkeypatch):
    params = small_params(pace=0.05)
    foreign = anothers_folder(tmp_path, "launchlab-sim-of-another")
    monkeypatch.setenv("LAUNCHLAB_SIM_ROOT", str(foreign))
    proc = subprocess.run([*LAUNCHLAB, "run", str(params)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the simulated boxes' folder" in proc.stderr and "not to you" in proc.stderr
    assert "Traceback" not in proc.stderr
    if foreign != Path("/"):
        assert list(foreign.iterdir()) == []  # no box made in it
