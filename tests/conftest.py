"""Shared fixtures.

``control_plane`` starts one real etcd + kube-apiserver for the whole test session (the
same code the ``local`` runtime uses), installs the AGN CRDs and writes a kubeconfig with a
``local-tests`` context. ``namespace`` gives each test its own namespace and deletes it after.
Integration tests need the binaries (``scripts/install-control-plane.sh`` or
``KUBEBUILDER_ASSETS``); when they are missing the tests fail loudly rather than skip.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import uuid
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests"))
# Every Python process a test starts (the CLI, the operator, gateways, providers) inherits this:
# a crash by signal then prints each thread's stack instead of only a negative exit code.
os.environ.setdefault("PYTHONFAULTHANDLER", "1")


@dataclasses.dataclass
class ControlPlaneHandle:
    kubeconfig: Path
    context: str
    assets: Path
    state_dir: Path
    server: str

    def kube(self, *, field_manager: str = "agn-tests"):
        from agn.kube import Kube

        return Kube.from_kubeconfig(kubeconfig=str(self.kubeconfig), context=self.context, field_manager=field_manager)

    def env(self) -> dict[str, str]:
        """Environment for child processes: kubeconfig pointed at the test control plane."""
        out = dict(os.environ)
        out["KUBECONFIG"] = str(self.kubeconfig)
        out["PYTHONPATH"] = str(REPO_ROOT)
        out.pop("NO_COLOR", None)
        return out


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory):
    from agn import kubeconfig
    from agn.kube import Kube
    from xtask.crds import install_crds
    from xtask.runtime.assets import ensure_assets
    from xtask.runtime.controlplane import ControlPlane

    assets = ensure_assets(build=False)
    state = tmp_path_factory.mktemp("controlplane")
    cp = ControlPlane(state, assets)
    try:
        cp.start()
        path = state / "kubeconfig"
        kubeconfig.add_context(
            path,
            cp.admin_context("local-tests", namespace="default"),
        )
        kube = Kube.from_kubeconfig(kubeconfig=str(path), context="local-tests", field_manager="agn-tests")
        install_crds(kube)
        kube.close()
        yield ControlPlaneHandle(path, "local-tests", assets, state, cp.server)
    finally:
        cp.stop()


@pytest.fixture
def kube(control_plane: ControlPlaneHandle):
    k = control_plane.kube()
    yield k
    k.close()


@pytest.fixture
def namespace(control_plane: ControlPlaneHandle, kube) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    kube.ensure_namespace(name)
    yield name
    kube.delete_namespace(name)


@pytest.fixture
def agn(control_plane: ControlPlaneHandle, namespace: str, tmp_path: Path):
    """Real AGN processes for one test, in its own namespace; all stopped by pid afterwards."""
    from agnprocs import AgnProcesses

    procs = AgnProcesses(
        tmp_path,
        kubeconfig=control_plane.kubeconfig,
        context=control_plane.context,
        namespace=namespace,
        env=control_plane.env(),
    )
    yield procs
    procs.stop_all()
