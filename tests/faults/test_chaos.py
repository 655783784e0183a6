"""The chaos soak (tests/harness/chaos.py), CI-sized: a fixed seed for about three minutes on a whole
example environment (local runtime), real drains, faults and traffic; no invariant violated, and
faults of several kinds really happened."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from envcli import REPO

pytestmark = pytest.mark.faults
SEED = 21  # its first steps hold process faults, provider faults and interrupted runs


def test_a_seeded_soak_violates_no_invariant(tmp_path):
    report_file = tmp_path / "chaos.json"
    run = subprocess.run(
        [
            sys.executable,
            "tests/harness/chaos.py",
            "--seed",
            str(SEED),
            "--duration",
            "170",
            "--workdir",
            str(tmp_path / "soak"),
            "--report",
            str(report_file),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads(report_file.read_text())
    assert report["violations"] == {"I1": 0, "I2": 0, "I3": 0, "I4": 0, "I5": 0}, report["violationList"]
    kinds = {kind.split()[0] for kind in report["faults"]}
    assert {"kill", "stop", "restart"} & kinds, report["faults"]  # processes killed, paused, restarted
    assert len(kinds) >= 4, report["faults"]
    assert any(kind.startswith("cli ") for kind in report["faults"]), report["faults"]  # a run interrupted
    assert sum(report["operations"].values()) >= 5, report["operations"]
    assert report["requests"]["byCode"].get("200", 0) > 100, report["requests"]
    assert report["i1"]["checked"] >= 1, report["i1"]
    assert report["heal"]["count"] >= 2, report["heal"]
