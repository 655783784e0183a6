"""The chaos soak (tests/harness/chaos.py), CI-sized: a fixed seed for about three minutes on a whole
example environment (local runtime), real drains, faults and traffic, a second maintainer (bob,
his own identity) draining and undraining at the same time, a declared budget; no invariant
violated (I6: the budget at every watch event; I7: holds released only by their owner or a
granted releaser), and faults of several kinds, a SIGHUP and bob's runs really happened."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from envcli import REPO

pytestmark = pytest.mark.faults
SEED = 19  # its first steps hold a SIGHUP'd run (step 4), process faults, interrupted runs and bob's runs


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
    assert report["violations"] == {f"I{i}": 0 for i in range(1, 8)}, report["violationList"]
    kinds = {kind.split()[0] for kind in report["faults"]}
    assert {"kill", "stop", "restart"} & kinds, report["faults"]  # processes killed, paused, restarted
    assert len(kinds) >= 4, report["faults"]
    assert any(kind.startswith("cli ") for kind in report["faults"]), report["faults"]  # a run interrupted
    assert report["faults"].get("cli sighup", 0) >= 1, report["faults"]  # a dropped terminal among them
    assert any(kind.startswith("interrupted sighup:") for kind in report["exits"]), report["exits"]
    # A run stopped by SIGINT or SIGHUP ends as an interrupted run (or finished first), never by the signal.
    died = [k for k in report["exits"] if k.startswith("interrupted") and "sigkill" not in k and ":-" in k]
    assert died == [], report["exits"]
    assert sum(v for k, v in report["bob"].items() if k.startswith("bob ")) >= 3, report["bob"]  # the second maintainer
    assert any(k.startswith("bob ") and k.endswith((":0", ":3")) for k in report["exits"]), report["exits"]
    assert report["budget"]["watchEvents"] > 100, report["budget"]  # the watch recorder really watched
    assert report["holds"]["auditedWrites"] >= 1, report["holds"]  # the audit log was read
    assert sum(report["operations"].values()) >= 5, report["operations"]
    assert report["requests"]["byCode"].get("200", 0) > 100, report["requests"]
    assert report["i1"]["checked"] >= 1, report["i1"]
    assert report["heal"]["count"] >= 2, report["heal"]
