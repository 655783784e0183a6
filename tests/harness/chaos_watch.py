"""The chaos soak's watch recorder and its invariants I6 (the declared budget) and I7 (holds are
released only by their owner or a granted releaser).

The recorder watches, with the plain ``kubernetes`` client, the InferenceProviders, the
InferenceNetworks and the probes heartbeat Lease (``agn-probes``): everything
``xtask/drain/core/budget.py`` reads. After every event it counts each selection group's
unavailable providers with that module's pure ``group_budgets`` (drained by anyone, or out for a
hard failure as of the heartbeat and the moment of the event), so "unavailable" means exactly
what the budget the CLI enforces means.

**I6.** A *budgeted drain write* is an event where a provider's ``spec.trafficPolicy.drain``
turns true stamped with an ``agn.dev/drain-operation`` id never seen on that provider before:
a CLI run's drain (a restore puts back an older id; the harness's raw writer never touches the
flag; no harness run passes ``--override-budget``). It violates I6 when, right after it, its
group has more unavailable providers than the declared budget allows, counting the drained ones
and those out for a hard failure continuously for at least ``GRACE`` seconds; a drain of a
provider that was itself out for a hard failure adds nothing (budget.py does not refuse it). A failure younger
than that may have appeared between the run's read under the network's lock and its write (the
operator writes status without the lock, and readings go stale by the clock alone): the budget
cannot order it. Every other moment above the budget (a provider killed while its partner is
drained, a restore, a failure appearing) is counted, not a violation.

**I7.** The watch sees each hold that disappears (a ``holds.drain.agn.dev/<id>`` annotation in
one version, gone in the next) with its owner (the ``owners.drain.agn.dev/<id>`` annotation of
the version before). Who removed it comes from kube-apiserver's audit log (the local runtime
writes one when ``AGN_XTASK_AUDIT_LOG`` names a file): the successful write of that provider
whose resulting resourceVersion is in (before, after] and whose request removed the key, with
the authenticated ``user.username``. A removal by anyone but the owner or a granted releaser
violates I7, and so does every such write in the audit log, whether the watch saw it or not. A
removal the watch saw that no audit record explains counts as *unattributed*.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from xtask.drain.core.budget import group_budgets  # noqa: E402 - the repo root is on the path now

GRACE = 3.0  # seconds a hard failure must have lasted to count against a drain write (see above)
HOLD_PREFIX = "holds.drain.agn.dev/"
OWNER_PREFIX = "owners.drain.agn.dev/"
OPERATION = "agn.dev/drain-operation"


def annotations(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def flag(obj: Mapping[str, Any] | None) -> bool:
    return bool((((obj or {}).get("spec") or {}).get("trafficPolicy") or {}).get("drain"))


def hold_owners(obj: Mapping[str, Any] | None) -> dict[str, str | None]:
    """hold id -> its owner annotation (None: no owner recorded)."""
    ann = annotations(obj)
    return {
        k[len(HOLD_PREFIX) :]: ann.get(OWNER_PREFIX + k[len(HOLD_PREFIX) :]) for k in ann if k.startswith(HOLD_PREFIX)
    }


def rv(obj: Mapping[str, Any] | None) -> int:
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


class BudgetChecker:
    """I6 over a sequence of states (pure: the recorder feeds it, a unit test too)."""

    def __init__(self, grace: float = GRACE) -> None:
        self.grace = grace
        self.failed_since: dict[tuple[str, str, str], float] = {}
        self.ops_seen: dict[str, set[str]] = collections.defaultdict(set)
        self.evaluations = 0
        self.drain_writes = 0
        self.excused = collections.Counter()  # drain writes over the budget let pass, by why
        self.above_budget = 0  # evaluations where some group was above its budget, whatever the cause
        self.max_unavailable: dict[str, int] = {}  # group -> most unavailable seen

    def observe(
        self,
        providers: Mapping[str, Mapping[str, Any]],
        networks: Iterable[Mapping[str, Any]],
        heartbeat: float | None,
        now: float,
        changed: tuple[Mapping[str, Any] | None, Mapping[str, Any]] | None = None,
    ) -> list[str]:
        """The state after one event (``changed``: the provider's version before and after, when
        the event was a provider's); the I6 violations it shows."""
        self.evaluations += 1
        failed_before = set(self.failed_since)
        rows = group_budgets(providers.values(), list(networks), list(providers), None, heartbeat=heartbeat, now=now)
        live = set()
        above = False
        for row in rows:
            for p in row.failed:
                live.add((row.network, row.group, p))
                self.failed_since.setdefault((row.network, row.group, p), now)
            key = f"{row.network}/{row.group}"
            self.max_unavailable[key] = max(self.max_unavailable.get(key, 0), row.unavailable_now)
            above |= row.budget is not None and row.unavailable_now > row.budget
        self.above_budget += above
        self.failed_since = {k: v for k, v in self.failed_since.items() if k in live}
        fresh = False
        if changed is not None:
            before, after = changed
            name = after["metadata"]["name"]
            op = annotations(after).get(OPERATION)
            fresh = flag(after) and not flag(before) and isinstance(op, str) and op not in self.ops_seen[name]
        for version in [*providers.values(), *(changed or ())]:
            if isinstance(annotations(version).get(OPERATION), str):
                self.ops_seen[version["metadata"]["name"]].add(annotations(version)[OPERATION])
        if not fresh:
            return []
        self.drain_writes += 1
        out = []
        for row in rows:
            if name not in row.drained or row.budget is None:
                continue
            if (row.network, row.group, name) in failed_before:
                if row.unavailable_now > row.budget:
                    self.excused["drained a provider already out"] += 1
                continue  # it was out for a hard failure already: draining it adds nothing (as budget.py says)
            settled = [p for p in row.failed if now - self.failed_since[(row.network, row.group, p)] >= self.grace]
            count = len(row.drained) + len(settled)
            if count <= row.budget < row.unavailable_now:
                self.excused[f"a failure younger than {self.grace:g} s"] += 1
            if count > row.budget:
                out.append(
                    f"drain write of {name} (operation {op}) left network {row.network} group {row.group!r} with "
                    f"{count} unavailable over its budget {row.budget}: drained {list(row.drained)}, "
                    f"out for a hard failure {list(settled)}"
                )
        return out


@dataclasses.dataclass(frozen=True)
class Removal:
    provider: str
    hold: str  # the hold id
    owner: str | None
    before: int  # resourceVersion of the last version that had it
    after: int  # ... of the first version seen without it
    at: float


def removals(before: Mapping[str, Any] | None, after: Mapping[str, Any], at: float) -> list[Removal]:
    gone = hold_owners(before).items() - hold_owners(after).items()
    still = hold_owners(after)
    name = after["metadata"]["name"]
    return [Removal(name, h, owner, rv(before), rv(after), at) for h, owner in gone if h not in still]


@dataclasses.dataclass(frozen=True)
class AuditWrite:
    """One successful write of a provider, from the audit log: who, which resourceVersion it
    made, and the hold ids its request removed."""

    provider: str
    user: str
    rv: int
    removed: frozenset[str]


def removed_holds(verb: str, request: Any, response: Mapping[str, Any] | None) -> frozenset[str]:
    """The hold ids a write's request removes: a merge patch's ``null`` annotations, a JSON
    patch's ``remove`` of one, an update whose object lacks a hold the response... cannot say
    (an update names only what stays: compared by the caller with the version before)."""
    out = set()
    if verb == "patch" and isinstance(request, dict):
        for k, v in annotations(request).items():
            if k.startswith(HOLD_PREFIX) and v is None:
                out.add(k[len(HOLD_PREFIX) :])
    elif verb == "patch" and isinstance(request, list):
        for op in request:
            path = str(op.get("path", "")) if isinstance(op, dict) else ""
            marker = "/metadata/annotations/" + HOLD_PREFIX.replace("/", "~1")
            if op.get("op") in ("remove", "replace") and path.startswith(marker):
                out.add(path[len(marker) :])
    return frozenset(out)


def read_audit(path: Path) -> tuple[list[AuditWrite], list[dict]]:
    """The successful provider writes in an audit log, and the updates (PUT) among them whose
    removals must be read from the watch's versions."""
    writes, updates = [], []
    if not path.exists():
        return [], []
    for line in path.read_text(errors="replace").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        ref = ev.get("objectRef") or {}
        code = (ev.get("responseStatus") or {}).get("code") or 0
        if ref.get("resource") != "inferenceproviders" or ref.get("subresource") or not 200 <= code < 300:
            continue
        verb = ev.get("verb", "")
        response = ev.get("responseObject") if isinstance(ev.get("responseObject"), dict) else None
        user = (ev.get("user") or {}).get("username", "")
        writes.append(
            AuditWrite(ref.get("name", ""), user, rv(response), removed_holds(verb, ev.get("requestObject"), response))
        )
        if verb == "update":
            updates.append(ev)
    return writes, updates


class HoldChecker:
    """I7: every hold removal attributed to its writer, who must own it or be a releaser."""

    def __init__(self, owners_by_id: Mapping[str, str], releasers: Iterable[str]) -> None:
        self.owners_by_id = dict(owners_by_id)
        self.releasers = set(releasers)

    def allowed(self, user: str, owner: str | None) -> bool:
        return user in self.releasers or (owner is not None and user == owner)

    def check(self, seen: list[Removal], writes: list[AuditWrite]) -> tuple[list[str], dict[str, int]]:
        out = []
        for w in writes:
            for h in sorted(w.removed):
                owner = self.owners_by_id.get(h)
                if not self.allowed(w.user, owner):
                    out.append(f"{w.user} removed hold {h} (owner {owner}) of {w.provider} (audit, rv {w.rv})")
        unattributed = 0
        by = collections.Counter()
        for r in seen:
            if r.owner is not None:
                self.owners_by_id.setdefault(r.hold, r.owner)
            writers = [
                w for w in writes if w.provider == r.provider and r.before < w.rv <= r.after and r.hold in w.removed
            ]
            if not writers:
                unattributed += 1
                continue
            for w in writers:
                by[f"{w.user} removed {r.owner}'s"] += 1
                if not self.allowed(w.user, r.owner):
                    out.append(f"{w.user} removed hold {r.hold} (owner {r.owner}) of {r.provider} (watch rv {r.after})")
        return sorted(set(out)), {"removals": len(seen), "unattributed": unattributed, **dict(sorted(by.items()))}


class Recorder:
    """Watches providers, networks and the heartbeat Lease; feeds I6 at every event and keeps
    every hold removal for I7."""

    def __init__(self, objects: Any, namespace: str, violate: Callable[[str], None]) -> None:
        self.objects, self.ns, self.violate = objects, namespace, violate
        self.providers: dict[str, dict] = {}
        self.networks: dict[str, dict] = {}
        self.heartbeat: float | None = None
        self.budget = BudgetChecker()
        self.removals: list[Removal] = []
        self.events = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        kinds = (("agn.dev", "v1alpha1", "inferenceproviders"), ("agn.dev", "v1alpha1", "inferencenetworks"))
        kinds += (("coordination.k8s.io", "v1", "leases"),)
        self.threads = [threading.Thread(target=self._watch, args=k, daemon=True) for k in kinds]

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=40)

    def _watch(self, group: str, version: str, plural: str) -> None:
        from kubernetes import watch

        extra = {"field_selector": "metadata.name=agn-probes"} if plural == "leases" else {}
        list_fn = self.objects.list_namespaced_custom_object
        while not self.stop.is_set():
            try:
                listed = list_fn(group, version, self.ns, plural, _request_timeout=5, **extra)
                self._relist(plural, listed["items"])
                stream = watch.Watch().stream(
                    list_fn,
                    group,
                    version,
                    self.ns,
                    plural,
                    resource_version=listed["metadata"]["resourceVersion"],
                    timeout_seconds=15,
                    _request_timeout=25,
                    **extra,
                )
                for ev in stream:
                    if self.stop.is_set() or ev["type"] == "ERROR":
                        break
                    self._apply(plural, ev["type"], ev["object"])
            except Exception:  # the API server is down on purpose at times: list again
                self.stop.wait(0.5)

    def _relist(self, plural: str, items: list[dict]) -> None:
        names = {i["metadata"]["name"] for i in items}
        for item in items:
            self._apply(plural, "MODIFIED", item)
        table = self.providers if plural == "inferenceproviders" else self.networks
        if plural != "leases":
            with self.lock:
                for gone in set(table) - names:
                    table.pop(gone)

    def _apply(self, plural: str, kind: str, obj: dict) -> None:
        now = time.time()
        with self.lock:
            self.events += 1
            changed = None
            if plural == "inferenceproviders":
                name = obj["metadata"]["name"]
                before = self.providers.get(name)
                if kind == "DELETED":
                    self.providers.pop(name, None)
                else:
                    if before is not None and rv(before) >= rv(obj):
                        return  # a relist of a version already seen
                    self.providers[name] = obj
                    changed = (before, obj)
                    self.removals += removals(before, obj, now)
            elif plural == "inferencenetworks":
                if kind == "DELETED":
                    self.networks.pop(obj["metadata"]["name"], None)
                else:
                    self.networks[obj["metadata"]["name"]] = obj
            else:
                self.heartbeat = None if kind == "DELETED" else lease_time(obj)
            for v in self.budget.observe(self.providers, self.networks.values(), self.heartbeat, now, changed):
                self.violate(v)


def lease_time(obj: Mapping[str, Any]) -> float | None:
    """The heartbeat Lease's ``spec.renewTime`` in unix seconds (as agn/operator/heartbeat.py reads it)."""
    import datetime as dt

    text = (obj.get("spec") or {}).get("renewTime")
    if not isinstance(text, str):
        return None
    try:
        at = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (at if at.tzinfo else at.replace(tzinfo=dt.UTC)).timestamp()
