"""A wheel that works alone: built from the checkout, installed into a fresh venv outside the
repository, it renders the example env and runs ``kubectl-agn`` from a folder outside the repo,
finding envs/, manifests/ and schemas/ inside the package (``xtask/_data``).

To save time and the network, the fresh venv gets the project venv's site-packages as a path
(a ``.pth`` line: its packages are importable, its ``.pth`` files, the editable install's
finder among them, are not processed), and the wheel is installed into it with ``--no-deps``."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]


def run(argv: list, *, cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict, Path]:
    tmp = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AGN_XTASK_ENVS_DIR", "VIRTUAL_ENV")}
    built = run([sys.executable, "-m", "pip", "wheel", REPO, "--no-deps", "-q", "-w", tmp / "dist"], cwd=tmp, env=env)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("agn_xtask-*.whl")
    venv.EnvBuilder(with_pip=False).create(tmp / "venv")
    python = tmp / "venv" / "bin" / "python"
    site = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=tmp, env=env)
    Path(site.stdout.strip(), "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = run([python, "-m", "pip", "install", "--no-deps", "--no-index", "-q", wheel], cwd=tmp, env=env)
    assert pip.returncode == 0, pip.stderr[-3000:]
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    env |= {"AGN_XTASK_HOME": str(tmp / "state"), "NO_COLOR": "1"}
    return tmp / "venv" / "bin", env, elsewhere


def test_the_installed_package_finds_its_data_inside_itself(installed):
    bin_dir, env, cwd = installed
    code = "import xtask, xtask.resources as r; print(xtask.__file__); print(r.data_dir('envs'))"
    proc = run([bin_dir / "python", "-c", code], cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    module, envs = proc.stdout.split()
    assert not Path(module).is_relative_to(REPO) and Path(envs) == Path(module).parent / "_data" / "envs"
    assert (Path(envs) / "example.yaml").is_file()


def test_xtask_env_render_and_kubectl_agn_help_run_outside_the_repo(installed):
    bin_dir, env, cwd = installed
    rendered = run([bin_dir / "xtask", "env", "render", "--env", "example"], cwd=cwd, env=env)
    assert rendered.returncode == 0, rendered.stderr
    assert "kind: CustomResourceDefinition" in rendered.stdout and "kind: InferenceProvider" in rendered.stdout
    shown = run([bin_dir / "kubectl-agn", "--help"], cwd=cwd, env=env)
    assert shown.returncode == 0 and "Usage: kubectl agn" in shown.stdout, shown.stderr


def test_installed_its_state_folder_is_the_users_not_site_packages(installed, tmp_path):
    bin_dir, env, cwd = installed
    env = {k: v for k, v in env.items() if k not in ("AGN_XTASK_HOME", "XDG_STATE_HOME")} | {"HOME": str(tmp_path)}
    proc = run([bin_dir / "python", "-c", "from xtask.state import state_root; print(state_root())"], cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(tmp_path / ".local" / "state" / "agn-xtask")
    status = run([bin_dir / "xtask", "env", "status", "--env", "example", "-o", "json"], cwd=cwd, env=env)
    assert status.returncode == 0 and '"state": "down"' in status.stdout, status.stderr
