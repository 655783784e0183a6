"""Kubeconfigs are written the way kubectl writes them, and only an env's own entries are removed.

* A kubeconfig that is a symlink is written through to its target; the link stays.
* Anything that is not a regular file (a device, a FIFO, a folder) is refused, naming it, and
  nothing is written.
* The temporary file is created exclusively with a random name: a planted ``<kubeconfig>.tmp``
  symlink is never followed.
* A lock left behind by a killed xtask does not block the next write; kubectl's lock still does.
* ``env down`` removes a context only when its cluster entry is still the one this env wrote.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agn import kubeconfig
from agn.kube import ConfigError
from envcli import REPO, run_xtask

HANG = 60  # seconds: each command here takes well under one; only a hang gets near this
CA = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCmZha2UKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="


def entry(name: str, server: str = "https://127.0.0.1:1", ca: str | None = CA) -> dict:
    cluster = {"server": server, **({"certificate-authority-data": ca} if ca else {})}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": {"token": "t"}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


def contexts(path: Path) -> list[str]:
    return [c["name"] for c in kubeconfig.read_for_update(path)["contexts"]]


def xtask(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return run_xtask(*args, env=env, timeout=HANG)


# -- symlinks, devices, FIFOs, planted temporary files ------------------------------------------------
def test_a_symlinked_kubeconfig_is_written_through_to_its_target(tmp_path):
    target = tmp_path / "real" / "config"
    target.parent.mkdir()
    kubeconfig.add_context(target, entry("kind-x"))
    link = tmp_path / "config"
    link.symlink_to(target)
    kubeconfig.add_context(link, entry("local-a"))
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert contexts(target) == ["kind-x", "local-a"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in target.parent.iterdir()) == ["config"]  # no temporary file left


def test_a_dangling_symlink_is_written_through_to_its_target(tmp_path):
    link = tmp_path / "config"
    link.symlink_to(tmp_path / "elsewhere")
    kubeconfig.add_context(link, entry("local-a"))
    assert link.is_symlink() and contexts(tmp_path / "elsewhere") == ["local-a"]


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero"])
def test_a_kubeconfig_linked_to_a_device_is_refused_and_nothing_is_written(tmp_path, device):
    link = tmp_path / "config"
    link.symlink_to(device)
    with pytest.raises(ConfigError) as exc:
        kubeconfig.add_context(link, entry("local-a"))
    assert str(exc.value) == f"kubeconfig {link} (a link to {device}): is a character device, not a regular file"
    assert link.is_symlink() and os.readlink(link) == device
    assert Path(device).is_char_device()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config"]  # no lock, no temporary file


def test_a_device_is_never_a_write_target():
    # Only read and checked, never written: as root, the old code replaced /dev/null.
    with pytest.raises(ConfigError, match=r"^kubeconfig /dev/null: is a character device, not a regular file$"):
        kubeconfig.read_for_update(Path("/dev/null"))
    with pytest.raises(ConfigError, match=r"^kubeconfig /dev/null: is a character device, not a regular file$"):
        kubeconfig.replaced_file(Path("/dev/null"))


def test_a_folder_is_refused(tmp_path):
    folder = tmp_path / "config"
    folder.mkdir()
    with pytest.raises(ConfigError, match=r": is a directory, not a regular file$"):
        kubeconfig.add_context(folder, entry("local-a"))
    assert folder.is_dir() and list(folder.iterdir()) == []


def test_a_planted_tmp_symlink_is_never_followed(tmp_path):
    path = tmp_path / "config"
    kubeconfig.add_context(path, entry("local-a"))
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (tmp_path / "config.tmp").symlink_to(victim)
    kubeconfig.add_context(path, entry("local-b"))
    assert victim.read_text() == "precious\n"
    assert os.readlink(tmp_path / "config.tmp") == str(victim)  # not ours: left alone
    assert contexts(path) == ["local-a", "local-b"]


@pytest.mark.e2e
def test_env_up_with_a_fifo_kubeconfig_is_refused_before_anything_starts(tmp_path):
    fifo = tmp_path / "kubeconfig"
    os.mkfifo(fifo)
    home = tmp_path / "state"
    proc = xtask("env", "up", "--env", "example", env={"KUBECONFIG": str(fifo), "AGN_XTASK_HOME": str(home)})
    assert proc.returncode == 1, proc.stderr
    assert f"error: kubeconfig {fifo}: is a FIFO (named pipe), not a regular file" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kubeconfig"]  # no lock, no state
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


# -- the lock ------------------------------------------------------------------------------------------
HOLD_LOCK = """
import sys, time
from pathlib import Path
from agn import kubeconfig
with kubeconfig.locked(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_lock_left_by_a_killed_xtask_does_not_block_the_next_write(tmp_path):
    path = tmp_path / "config"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        # While it lives, its lock holds (briefly waited for, then an error naming it).
        with pytest.raises(ConfigError, match="is locked"):
            with kubeconfig.locked(path, wait=0.2):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=HANG)
        holder.stdout.close()
    assert kubeconfig.lock_path(path).exists()  # left behind, as by `kill -9`
    kubeconfig.add_context(path, entry("local-a"))
    assert contexts(path) == ["local-a"] and not kubeconfig.lock_path(path).exists()


# -- only this env's contexts are removed ---------------------------------------------------------------
@pytest.mark.e2e
def test_env_down_of_another_home_keeps_a_running_envs_context(tmp_path):
    """Another env called example (another AGN_XTASK_HOME) wrote local-example; this home's
    `env down --env example` has no such env and must leave it alone."""
    path = tmp_path / "kubeconfig"
    kubeconfig.add_context(path, entry("local-example", server="https://127.0.0.1:6443"))
    before = path.read_bytes()
    proc = xtask("env", "down", "--env", "example", env={"KUBECONFIG": str(path), "AGN_XTASK_HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert path.read_bytes() == before
    assert yaml.safe_load(before)["current-context"] == "local-example"


def test_remove_context_removes_only_what_this_env_wrote(tmp_path):
    path = tmp_path / "config"
    theirs = entry("local-example", server="https://127.0.0.1:6443")
    kubeconfig.add_context(path, theirs)
    other_server = kubeconfig.Written("https://127.0.0.1:7443", CA)
    other_ca = kubeconfig.Written("https://127.0.0.1:6443", "b3RoZXI=")
    for ours in (None, other_server, other_ca):
        assert not kubeconfig.remove_context(path, "local-example", ours=ours)
        assert contexts(path) == ["local-example"]
    assert kubeconfig.remove_context(path, "local-example", ours=kubeconfig.Written.of(theirs, "local-example"))
    assert contexts(path) == []
