"""Runs in waves re-check the declared budget under the drain lock before every wave: three
runs started at once, each draining a whole gateway of two providers of one selection group
in waves of one, against a network that declares ``maxUnavailable: 3``. Each run alone fits
(two of six), together they do not (six): they must stop at exactly three drained, and a watch
opened before the start never sees more than three drained at any moment."""

from __future__ import annotations

import pytest
from test_provider_drain_budget import Recorder, declare, finish, spawn_json

from drainenv import DrainEnv

pytestmark = pytest.mark.integration

GATEWAYS = ("gw-a", "gw-b", "gw-c")
LAYOUT = {f"p-{gw[-1]}{i}": (gw, "chat", i) for gw in GATEWAYS for i in range(2)}


@pytest.fixture
def nine(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up(providers=LAYOUT)


def test_three_runs_in_waves_stop_together_at_the_declared_budget(nine: DrainEnv):
    env = nine
    declare(env, 3)
    recorder = Recorder(env)
    waves = [*env.targets(), "--wave-size", "1", "--soak", "0", "--lock-timeout", "120"]
    procs = {gw: spawn_json(env, "--gateway", gw, *waves) for gw in GATEWAYS}
    results = {gw: finish(p) for gw, p in procs.items()}
    counts = recorder.close()

    assert max(counts) <= 3, counts
    drained = sorted(n for n in LAYOUT if env.drain_value(n))
    assert len(drained) == 3, drained
    summaries = {gw: (code, r["summary"]) for gw, (code, r) in results.items()}
    assert sorted(code for code, _ in summaries.values()) in ([0, 3, 3], [3, 3, 3]), summaries
    written = []
    for gw, (code, report) in results.items():
        mine = [o["provider"] for o in report["outcomes"] if o["outcome"] == "changed"]
        if code == 0:
            assert sorted(mine) == sorted(n for n, v in LAYOUT.items() if v[0] == gw), report
        else:
            assert "disruptionBudget.maxUnavailable 3 (3)" in report["refused"][-1], report["refused"]
        written += mine
        for taken in (report["lock"] or {}).get("acquisitions", []):  # a run refused at its first look took none
            assert taken["network"] == "net" and taken["lease"] == "agn-drain-net"
    # What the runs say they wrote is what the cluster holds: the waves written before a refusal are kept.
    assert sorted(written) == drained
    # A run refused after its first wave says so.
    later = [s for code, s in summaries.values() if "before wave 2" in s or "before wave 3" in s]
    assert all("the waves written so far are kept" in s for s in later), summaries
