"""``scripts/test.sh tests/unit`` needs only Python: no Go, no control-plane binaries."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_the_unit_suite_runs_without_go_or_control_plane_binaries(tmp_path):
    stamp = REPO / ".venv/.agn-installed"
    if not stamp.exists() or any(
        (REPO / f).stat().st_mtime > stamp.stat().st_mtime for f in ("pyproject.toml", "constraints.txt")
    ):
        pytest.skip("scripts/setup.sh has not installed this pyproject.toml yet (it would install packages)")
    bare = tmp_path / "bin"  # a PATH with only what the scripts use: no go
    bare.mkdir()
    for tool in ("bash", "dirname", "env", "realpath"):
        found = next((Path(d) / tool for d in os.environ["PATH"].split(os.pathsep) if (Path(d) / tool).exists()), None)
        if found:
            (bare / tool).symlink_to(found)
    env = {k: v for k, v in os.environ.items() if k not in ("KUBEBUILDER_ASSETS", "PYTEST_ADDOPTS")}
    env |= {"PATH": str(bare), "AGN_CACHE_DIR": str(tmp_path / "empty-cache")}
    proc = subprocess.run(
        [str(REPO / "scripts/test.sh"), "tests/unit/test_amounts.py", "-q", "-p", "no:cacheprovider"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout
    assert not (tmp_path / "empty-cache").exists()  # nothing was built or looked up in a cache
