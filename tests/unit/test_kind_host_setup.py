"""``scripts/kind-host-setup.sh`` lists what it would change and changes the host only with
``--yes`` or ``CI=true``; it never replaces a kubectl (or kind) that is not its own link. Run
against a folder standing for the host (``AGN_HOST_ROOT``) and a cache of fake binaries."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "kind-host-setup.sh"


class Host:
    def __init__(self, tmp: Path) -> None:
        self.root, self.cache, fake = tmp / "root", tmp / "cache", tmp / "fakebin"
        for name in ("podman", "runc", "debootstrap", "gcc"):
            self.executable(fake / name)
        (self.root / "usr/include").mkdir(parents=True)
        (self.root / "usr/include/seccomp.h").write_text("")
        self.env = {k: v for k, v in os.environ.items() if k not in ("CI", "KUBEBUILDER_ASSETS")}
        self.env |= {"AGN_HOST_ROOT": str(self.root), "AGN_CACHE_DIR": str(self.cache)}
        self.env["PATH"] = f"{fake}{os.pathsep}{os.environ['PATH']}"
        self.kind = self.executable(self.cache / "tools/kind-v0.33.0/kind")
        cp = subprocess.run(
            [str(SCRIPT.parent / "install-control-plane.sh"), "--print-dir"],
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        self.kubectl = self.executable(Path(cp.stdout.strip()) / "kubectl")
        self.bindir = self.root / "usr/local/bin"
        self.bindir.mkdir(parents=True)
        self.conf = self.root / "etc/containers/containers.conf.d/50-agn-kind.conf"

    @staticmethod
    def executable(path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\nexit 0\n")
        path.chmod(0o755)
        return path

    def run(self, *args: str, ci: bool = False) -> subprocess.CompletedProcess:
        env = {**self.env, **({"CI": "true"} if ci else {})}
        return subprocess.run([str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=60)

    def tree(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in self.root.rglob("*"))


@pytest.fixture
def host(tmp_path) -> Host:
    return Host(tmp_path)


def test_without_yes_it_lists_the_steps_and_changes_nothing(host):
    before = host.tree()
    for args in ((), ("--check",)):
        proc = host.run(*args)
        assert proc.returncode == 1, proc.stderr
        for step in (f"write {host.conf}", f"mkdir {host.root / 'lib/modules'}", f"link {host.bindir / 'kind'}"):
            assert step in proc.stderr
        assert "nothing changed; run with --yes" in proc.stderr and "doing:" not in proc.stderr
        assert host.tree() == before


@pytest.mark.parametrize("how", ["--yes", "CI=true"])
def test_yes_or_ci_lists_then_applies_and_a_foreign_kubectl_is_left_alone(host, how):
    theirs = host.bindir / "kubectl"
    theirs.write_text("someone else's kubectl")
    proc = host.run("--yes") if how == "--yes" else host.run(ci=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.index("missing steps:") < proc.stderr.index("doing:")
    assert host.conf.read_text().startswith("# Written by scripts/kind-host-setup.sh")
    assert (host.root / "lib/modules").is_dir()
    assert os.readlink(host.bindir / "kind") == str(host.kind)
    assert not theirs.is_symlink() and theirs.read_text() == "someone else's kubectl"
    assert f"leaving {theirs} alone" in proc.stderr
    again = host.run()
    assert again.returncode == 0 and "nothing missing" in again.stderr, again.stderr


def test_its_own_link_to_an_older_kubectl_is_repointed(host):
    old = host.executable(host.cache / "controlplane/kubernetes-v1.0.0_etcd-v3.0.0/kubectl")
    (host.bindir / "kubectl").symlink_to(old)
    assert host.run().returncode == 1 and os.readlink(host.bindir / "kubectl") == str(old)
    assert host.run("--yes").returncode == 0
    assert os.readlink(host.bindir / "kubectl") == str(host.kubectl)


def test_an_unknown_argument_is_exit_2(host):
    proc = host.run("--yes-please")
    assert proc.returncode == 2 and "--yes-please" in proc.stderr
    assert host.tree() == ["usr", "usr/include", "usr/include/seccomp.h", "usr/local", "usr/local/bin"]
