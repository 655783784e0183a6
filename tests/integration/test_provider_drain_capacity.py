"""The load-aware capacity guard (``spec.capacity.maxConcurrent``, ``--capacity-margin``) against the
real API server, the real operator (which scrapes the fake providers and publishes the load of a
provider that declares a capacity) and the real consumer gateways, through the real CLI. Loads
are fixed over the fake providers' loopback ``/admin/state`` (``waiting``)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from agn.kube import PROVIDERS
from agnprocs import http_json, wait_for
from drainenv import CONSUMER_NAMES, DrainEnv
from xtask.drain.edges.planfile import load_plan

pytestmark = pytest.mark.integration


@pytest.fixture
def env(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up()


def declare(env: DrainEnv, provider: str, max_concurrent: int) -> None:
    env.kube.merge_patch(PROVIDERS, env.ns, provider, {"spec": {"capacity": {"maxConcurrent": max_concurrent}}})


def load(env: DrainEnv, provider: str, waiting: int) -> None:
    """Fix ``provider``'s load at ``waiting`` queued requests, and wait until the operator has
    published it in the provider's status."""
    http_json(f"{env.urls[provider]}/admin/state", method="POST", body={"waiting": waiting})
    wait_for(
        lambda: (env.provider(provider).get("status") or {}).get("load", {}).get("waiting") == waiting,
        timeout=60,
        what=f"{provider}'s published load to show waiting {waiting}",
    )


def chat(report: dict) -> dict:
    (group,) = [g for g in report["capacity"]["groups"] if g["group"] == "chat"]
    return group


def test_a_drain_past_the_headroom_is_refused_naming_the_numbers_and_one_that_fits_passes(env: DrainEnv):
    declare(env, "p-one", 10)
    declare(env, "p-three", 10)
    load(env, "p-one", 6)
    load(env, "p-three", 5)
    code, report = env.run_json("--provider", "p-one", *env.targets())
    assert code == 3, report
    (refusal,) = report["refused"]
    assert "selection group 'chat'" in refusal and "carry load 6 (p-one 6)" in refusal, refusal
    assert "over the headroom 5" in refusal and "(capacity 10, load 5, margin 0)" in refusal, refusal
    group = chat(report)
    assert (group["load"], group["headroom"], group["verdict"]) == (6, 5, "exceeds")
    assert env.drain_value("p-one") is None and env.journal_paths() == []  # nothing written

    load(env, "p-three", 2)  # headroom 8 now
    code, report = env.run_json("--provider", "p-one", "--capacity-margin", "30%", *env.targets())
    assert code == 3 and "over the headroom 5" in report["refused"][0] and "margin 3" in report["refused"][0]

    plan = env.tmp / "plan.yaml"
    code, report = env.run_json("--provider", "p-one", *env.targets(), "--plan-out", str(plan))
    assert code == 0, report
    (planned,) = [g for g in load_plan(plan).spec["capacity"]["groups"] if g["group"] == "chat"]
    assert (planned["load"], planned["headroom"], planned["verdict"]) == (6, 8, "fits")

    code, report = env.run_json("--plan", str(plan))
    assert code == 0, report
    group = chat(report)
    assert (group["load"], group["capacity"], group["stayingLoad"], group["headroom"]) == (6, 10, 2, 8)
    assert group["verdict"] == "fits" and report["capacity"]["forced"] is False
    assert report["capacity"]["checked"] == "before writing"
    assert env.drain_value("p-one") is True


def test_an_unknown_capacity_or_load_refuses_and_force_overrides_it_on_the_record(env: DrainEnv):
    declare(env, "p-one", 10)  # p-three, the other chat provider, declares none: no load is published for it
    load(env, "p-one", 1)
    code, report = env.run_json("--provider", "p-one", *env.targets())
    assert code == 3, report
    (refusal,) = report["refused"]
    assert "not assumed to fit" in refusal and "p-three: capacity unknown" in refusal, refusal
    assert "p-three: load unknown (no load reading yet)" in refusal, refusal
    assert chat(report)["verdict"] == "unknown" and chat(report)["headroom"] is None
    assert env.drain_value("p-one") is None

    code, report = env.run_json("--provider", "p-one", "--force", *env.targets())
    assert code == 0, report
    assert report["capacity"]["forced"] is True
    assert "p-three: capacity unknown" in report["capacity"]["overridden"][0]
    assert env.drain_value("p-one") is True
    (path,) = env.journal_paths()
    header = json.loads(path.read_text().splitlines()[0])
    assert "p-three: capacity unknown" in header["capacityOverride"][0]
    notes = wait_for(
        lambda: [
            n
            for e in env.kube.list_objects("events.k8s.io/v1", "Event", namespace=env.ns)
            if "capacity guard overridden (--force)" in (n := e.get("note") or "")
        ],
        timeout=30,
        what="a ProviderDrained Event saying the capacity guard was overridden",
    )
    assert any("network net, group 'chat': unknown" in n for n in notes), notes


class Traffic:
    """Completions through both consumers' gateways, one after another, until stopped (the wave
    gate reads them)."""

    def __init__(self, env: DrainEnv) -> None:
        self.urls = [f"{env.gateways[c]}/v1/completions" for c in CONSUMER_NAMES]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            for url in self.urls:
                req = urllib.request.Request(url, data=b'{"prompt":"hi"}', method="POST")
                try:
                    with urllib.request.urlopen(req, timeout=5):
                        pass
                except (urllib.error.URLError, OSError):
                    pass
            self.stop.wait(0.05)  # pacing of the load, not a wait for a condition

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


# p-keep (rank 0) serves every new request; w-1 and w-2 (rank 1) are drained in waves.
WAVED = {"p-keep": ("gw-b", "chat", 0), "w-1": ("gw-a", "chat", 1), "w-2": ("gw-a", "chat", 1)}


def test_each_wave_is_weighed_again_under_the_lock_and_refused_when_the_headroom_is_gone(
    kube, namespace, agn, control_plane, tmp_path
):
    env = DrainEnv(kube, namespace, agn, control_plane, tmp_path).up(providers=WAVED)
    declare(env, "p-keep", 100)
    for name in ("w-1", "w-2"):
        declare(env, name, 10)
        load(env, name, 2)
    args = ("--gateway", "gw-a", *env.targets(), "--wave-size", "1", "--soak", "20", "--max-error-ratio", "0.5")
    with Traffic(env):
        run = env.spawn(*args)
        wait_for(lambda: any("wave 1: soaking" in line for line in run.lines), timeout=90, what="wave 1's soak")
        load(env, "p-keep", 99)  # meanwhile, the provider that stays fills up
        code = run.wait(timeout=120)
    assert code == 3, run.output
    assert "refused before wave 2 of 2: capacity: network net, selection group 'chat'" in run.output, run.output
    assert "carry load 2 (w-2 2)" in run.output, run.output
    assert env.drain_value("w-1") is True and env.drain_value("w-2") is None  # wave 1 kept, wave 2 never written
