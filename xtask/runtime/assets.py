"""Finding the local control-plane binaries (kube-apiserver, etcd, kubectl).

Order: ``$KUBEBUILDER_ASSETS`` (the envtest convention) when it holds all three, else the
versioned cache that ``scripts/install-control-plane.sh`` fills. Building is that script's job;
this module only runs it (through :mod:`xtask.procs`) when asked to.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from xtask.errors import RuntimeUnavailable
from xtask.procs import RealCmdRunner
from xtask.state import REPO_ROOT

INSTALL_SCRIPT = REPO_ROOT / "scripts" / "install-control-plane.sh"
BINARIES = ("kube-apiserver", "etcd", "kubectl")


def versions() -> dict[str, str]:
    out = {}
    for line in (REPO_ROOT / "scripts" / "controlplane" / "versions.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
    return out


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    """``$AGN_CACHE_DIR``, else ``${XDG_CACHE_HOME:-~/.cache}/agn-xtask``: what is built once and reused."""
    root = environ.get("AGN_CACHE_DIR") or os.path.join(
        environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "agn-xtask"
    )
    return Path(root)


def cache_dir() -> Path:
    v = versions()
    return cache_root() / "controlplane" / f"kubernetes-{v['KUBERNETES_VERSION']}_etcd-{v['ETCD_VERSION']}"


def _complete(folder: Path) -> bool:
    return all(os.access(folder / b, os.X_OK) for b in BINARIES)


def find_assets() -> Path | None:
    env = os.environ.get("KUBEBUILDER_ASSETS")
    if env and _complete(Path(env)):
        return Path(env)
    cached = cache_dir()
    return cached if _complete(cached) else None


def ensure_assets(*, build: bool = True) -> Path:
    """The folder holding the binaries; builds them with the install script when allowed and possible."""
    found = find_assets()
    if found is not None:
        return found
    hint = (
        f"set KUBEBUILDER_ASSETS to a folder holding {', '.join(BINARIES)}, "
        f"or run {INSTALL_SCRIPT.relative_to(REPO_ROOT)} (needs Go) to build them into {cache_dir()}"
    )
    if not build or shutil.which("go") is None:
        raise RuntimeUnavailable("local control-plane binaries are missing and cannot be built here", hint=hint)
    print(
        f"control-plane binaries not found; building them into {cache_dir()} "
        "(once per version, about 5 minutes on 2 cores)",
        file=sys.stderr,
        flush=True,
    )
    RealCmdRunner().run_visible(["bash", str(INSTALL_SCRIPT)], timeout=3600)
    found = find_assets()
    if found is None:
        raise RuntimeUnavailable("building the control-plane binaries did not produce them", hint=hint)
    return found
