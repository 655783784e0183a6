"""What a single drain asks the API server: its own selection group, never the whole fleet, and
a number of requests that may shrink but never grow unnoticed.

The real CLI runs through ``scripts/bench/requestprobe.py`` (it records every request the
official client sends) against the real API server, operator and gateways, in a namespace where
most providers are in another selection group than the drained one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from agn.kube import PROVIDERS
from agnprocs import wait_for
from drainenv import CONSUMER_NAMES, DrainEnv
from reportschema import parse_report
from xtask.drain.edges.members import read_members

pytestmark = pytest.mark.integration

PROBE = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "requestprobe.py"
BULK = 24  # providers of another group, sharing one fake provider

# The requests of a converged single drain with two targets (16 measured):
#  1 the caller's identity (SelfSubjectReview), 2 the networks (LIST), 3 the provider (GET):
#    what names the drain locks, and all that is read before them;
#  4 the lock (POST: created without a look, as it is absent unless another run holds it) and
#    the one snapshot under it: 5 the group (LIST by spec.selectionGroup), 6 consumers (LIST),
#    7 overlay indexes (LIST), 8 the heartbeat (LIST by name: the budget and capacity guards
#    judge freshness with it), 9 the consumers' network shard (GET; the networks read a moment
#    before are reused);
#  10-12 the waiter's three WATCHes (the provider by name, consumers, overlay indexes), started
#    from those lists' resourceVersions (no LIST of its own), with the shards the guards read;
#  13 the write (PATCH), 14 its Event (POST), 15 the lock's release (DELETE);
#  16 the shard read again at the new digest the consumers' indexes give it (once: the cache
#    keeps the old digest for the index that has not moved yet).
# No server-side dry run: it makes a fan-out all-or-nothing, and one PATCH is that by itself
# (the API server applies it whole or refuses it, changing nothing; a refusal is then reported
# per provider and exits 3: tests/integration/test_provider_drain_failures.py). --dry-run and a
# drain of more than one provider send it.
# The heartbeat is not watched: it judges only a provider absent from an overlay (here p-one is
# in both), so the waiter holds the look's read of it and follows it from there only once a
# verdict finds a provider absent (tests/unit/test_drain_waiter_confirm.py). The provider is
# watched although the PATCH response gives its new resourceVersion: the operator's status of
# it and any other writer's change (a concurrent undrain) during the wait must reach the verdict.
# A WATCH of the network's shards instead of 9 and 16 would cost as much (a LIST and a WATCH).
# The two reads before the lock (2, 3) name the per-network locks, so they stay before it.
# No fresh LISTs confirm the cached view (there were four). The confirming observation must
# judge every kind as of the write or later: a kind whose watch has delivered an event at or
# after the write's resourceVersion is that recent already (a watch delivers in order), and the
# provider's (the write itself), the overlays' (the operator's publication of it) and the
# consumers' (the gateways' accepted and serving revisions of that publication) always have by
# then. A verdict that used the heartbeat lists it again unless its renewal came after the
# write. A watch that failed and re-listed counts only as recent as the list's newest object,
# so it is listed again (tests/unit/test_drain_waiter_confirm.py).
# The operator may publish the change in more revisions than one (a shard read each): the bound
# allows two more. Lower it when a change removes requests; raising it is a decision for review
# (a second look, or a LIST of the fleet, is 7 or more).
MAX_REQUESTS = 18


@pytest.fixture
def env(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    env = DrainEnv(kube, namespace, agn, control_plane, tmp_path).up()
    for i in range(BULK):
        env.add_provider(f"bulk-{i:02d}", "gw-bulk", "bulk", i, env.urls["p-two"])
    total = len(env.urls) + BULK
    wait_for(
        lambda: all(env.serving_all_admitted(c, total) for c in CONSUMER_NAMES),
        timeout=60,
        what=f"both consumers serving all {total} providers admitted",
    )
    return env


def probed_run(env: DrainEnv, out: Path, *args: str) -> tuple[int, dict, list[tuple[str, str, dict]]]:
    """Run the CLI through the request probe: exit code, report, and each request as (verb, path, query)."""
    argv = env.argv(*args, "--output", "json")
    assert argv[1:3] == ["-m", "xtask"]
    run = subprocess.run(
        [sys.executable, str(PROBE), str(out), *argv[1:]], capture_output=True, text=True, env=env.env(), timeout=120
    )
    seen = json.loads(out.read_text())
    calls = []
    for line in seen["calls"]:
        _, verb, target = line.split(" ", 2)
        parts = urlsplit("/" + target)
        calls.append((verb, parts.path, parse_qs(parts.query)))
    assert seen["requests"] == len(calls) > 0, seen
    return run.returncode, parse_report(run.stdout), calls


def provider_lists(calls: list[tuple[str, str, dict]]) -> list[dict]:
    """The queries of every LIST (or WATCH) of the InferenceProvider collection."""
    return [q for verb, path, q in calls if verb == "GET" and path.endswith("/inferenceproviders")]


def test_a_single_drain_reads_its_group_not_the_fleet(env: DrainEnv, tmp_path):
    code, report, calls = probed_run(env, tmp_path / "calls.json", "--provider", "p-one", *env.targets())
    assert code == 0, report
    assert report["convergence"]["state"] == "converged"
    lists = provider_lists(calls)
    assert lists, calls
    # Every read of the collection names what it wants: the drained provider (the waiter) or its group.
    assert [q for q in lists if "fieldSelector" not in q] == [], "a LIST of every provider"
    selectors = sorted({q["fieldSelector"][0] for q in lists})
    assert selectors == ["metadata.name=p-one", "spec.selectionGroup=chat"], selectors
    assert len(calls) <= MAX_REQUESTS, "\n".join(f"{v} {p} {q}" for v, p, q in calls)
    # One look: the networks are listed once, the group once, and the lock is created, not read first.
    assert len([p for v, p, q in calls if v == "GET" and p.endswith("/inferencenetworks")]) == 1, calls
    assert len([q for q in lists if q["fieldSelector"] == ["spec.selectionGroup=chat"]]) == 1, calls
    assert [p for v, p, q in calls if v == "GET" and "/leases/agn-drain" in p] == [], calls
    # One write is its own dry run: none is sent (a fan-out's is sent under the lock, after the
    # look: tests/integration/test_drain_guards.py). The write comes after the lock's POST.
    lock = next(i for i, (v, p, q) in enumerate(calls) if v == "POST" and p.endswith("/leases"))
    assert [q for v, p, q in calls if v == "PATCH" and q.get("dryRun")] == [], calls
    (write,) = [i for i, (v, p, q) in enumerate(calls) if v == "PATCH"]
    assert write > lock, calls
    # The waiter lists nothing itself: each kind it follows is listed by the look under the lock
    # and watched once, from that list's resourceVersion. Its confirming look lists again only a
    # kind no watch has shown at or after the write: none here (the operator's publication and
    # the gateways' status come after the write). The heartbeat is listed by the look (the
    # guards weigh freshness with it) and never watched: no verdict needs it, p-one being in
    # both overlays.
    for kind, watched_too in (("/inferenceconsumers", 1), ("/routingoverlays", 1), ("/leases", 0)):
        reads = [q for v, p, q in calls if v == "GET" and p.endswith(kind)]
        watches = [q for q in reads if q.get("watch") == ["true"]]
        assert (len(reads) - len(watches), len(watches)) == (1, watched_too), (kind, reads)
        assert all(q.get("resourceVersion") for q in watches), watches
    watched = [q for q in lists if q.get("watch") == ["true"]]
    assert len(watched) == 1 and watched[0]["resourceVersion"], lists


def test_the_budget_counts_the_whole_group_read_by_its_field(env: DrainEnv, tmp_path):
    code, report = env.run_json("--provider", "p-three")
    assert code == 0, report
    code, report, calls = probed_run(env, tmp_path / "calls.json", "--provider", "p-one", "--max-unavailable", "1")
    assert code == 3, report  # p-three of the same group is drained already
    (row,) = report["budget"]["groups"]
    assert (row["group"], row["size"], row["drained"], row["budget"]) == ("chat", 2, ["p-three"], 1)
    assert [q for q in provider_lists(calls) if "fieldSelector" not in q] == []
    assert env.drain_value("p-one") is None  # refused: nothing written


def test_group_names_are_escaped_in_the_field_selector(env: DrainEnv):
    odd = ("a,b", "a=b", "a\\b", "a")
    for i, group in enumerate(odd):
        env.add_provider(f"odd-{i}", "gw-odd", group, 0, env.urls["p-two"])
    for i, group in enumerate(odd):
        members = read_members(env.kube, env.ns, {f"odd-{i}": group})
        assert [p["metadata"]["name"] for p in members] == [f"odd-{i}"], group
    # A provider whose group moved away from the one given: every provider is read instead.
    moved = read_members(env.kube, env.ns, {"odd-3": "elsewhere"})
    assert len(moved) == len(env.kube.list(PROVIDERS, env.ns)[0])
