"""Is an environment serving? The last step of ``env up`` on every runtime.

Ready means: the operator has probed every provider, every consumer's published overlay is
what the overlay model (:mod:`agn.model`, the operator's own rules) gives for the objects as
they are now, and every consumer's gateway has accepted and serves that overlay's revision
(:func:`xtask.drain.core.converge.serving_lag`, the drain waiter's definition). On a fresh
bring-up, the fake providers the env itself runs must also answer their probes
(``must_be_healthy``). Otherwise a drained or unhealthy provider does not make an environment
unready: it is in its overlay as
``existing_only`` or kept out with its reason, and ``excluded`` lists the latter. A sharded
overlay whose shards do not match its index even after :func:`agn.overlays.list_overlays`'s
repeated reads is not ready, with the shards it waits for named.

:func:`evaluate_readiness` is pure; :func:`wait_ready` reads the API until ready or the
deadline, then names every lagging object and what the runtime knows about why (a stopped
process, its log).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence

from agn.model import ConsumerView, NetworkView, Overlay, ProviderView, compute_candidates, exclusion, selects
from agn.shards import Incomplete
from xtask.drain.core.converge import serving_lag
from xtask.errors import XtaskError
from xtask.record import Record


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Readiness(Record):
    problems: tuple[str, ...]  # why not ready; empty when ready
    served: Mapping[str, int]  # consumer -> the overlay revision its gateway serves
    excluded: tuple[str, ...]  # providers kept out of an overlay by a hard failure, with the reason

    @property
    def ready(self) -> bool:
        return not self.problems


@dataclasses.dataclass(frozen=True, kw_only=True, repr=False, eq=False)
class EnvLook(Record):
    """One look at an env, as the model reads it: its providers and networks, its consumers with
    their (accepted, serving) revisions, each consumer's overlay (None: none yet; Incomplete:
    shards pending), at ``now``; and each provider's last health error as its status has it."""

    providers: Sequence[ProviderView]
    networks: Mapping[str, NetworkView]
    consumers: Sequence[ConsumerView]
    revisions: Mapping[str, tuple[int | None, int | None]]
    overlays: Mapping[str, Overlay | Incomplete | None]
    now: float
    probe_errors: Mapping[str, str] = dataclasses.field(default_factory=dict)


def evaluate_readiness(look: EnvLook, *, must_be_healthy: frozenset[str] = frozenset()) -> Readiness:
    """Whether the env ``look`` saw is serving (``look.probe_errors`` are named with a provider
    that is waited for, so a timeout says what the probes see)."""
    providers, networks, consumers = look.providers, look.networks, look.consumers
    revisions, overlays, now, probe_errors = look.revisions, look.overlays, look.now, look.probe_errors
    problems = [f"provider {p.name}: not probed by the operator yet" for p in providers if p.healthy is None]
    # The fake providers a fresh bring-up has just started answer once their Service routes to
    # them: a failed first probe there is start-up, not a finding to report as "kept out".
    problems += [
        f"provider {p.name}: its probes fail (just started; waiting for it to answer"
        + (f"; last: {probe_errors[p.name]}" if probe_errors.get(p.name) else "")
        + ")"
        for p in providers
        if p.healthy is False and p.name in must_be_healthy
    ]
    served: dict[str, int] = {}
    excluded: list[str] = []
    for consumer in consumers:
        network = networks.get(consumer.network)
        if network is None:
            problems.append(f"consumer {consumer.name}: network {consumer.network!r} does not exist")
            continue
        overlay = overlays.get(consumer.name)
        lag = serving_lag(consumer.name, overlay, *revisions.get(consumer.name, (None, None)))
        if lag:
            problems.append(lag)
        elif isinstance(overlay, Overlay):
            served[consumer.name] = overlay.revision
        if isinstance(overlay, Overlay):
            want = {c.provider: c.admission_state for c in compute_candidates(providers, network, consumer, now=now)}
            have = {c.provider: c.admission_state for c in overlay.candidates}
            for name in sorted(set(want) | set(have)):
                if want.get(name) != have.get(name):
                    problems.append(
                        f"consumer {consumer.name}: overlay revision {overlay.revision} has {name} "
                        f"{have.get(name, 'absent')}, the operator's rules give {want.get(name, 'absent')}"
                    )
        for p in providers:
            why = (
                exclusion(p, network, consumer, now=now)
                if p.healthy is not None and selects(network, p.labels)
                else None
            )
            if why is not None:
                excluded.append(f"{p.name} for {consumer.name}: {why.value}")
    return Readiness(tuple(problems), served, tuple(excluded))


def wait_ready(
    kube,
    envdef,
    *,
    timeout: float,
    diagnose: Callable[[], list[str]],
    interval: float = 0.2,
    must_be_healthy: frozenset[str] = frozenset(),
) -> Readiness:
    """Read the env's objects until :func:`evaluate_readiness` says ready; on timeout raise,
    naming every lagging object and whatever ``diagnose`` (the runtime) can tell about why."""
    from agn.kube import KubeError

    deadline = time.monotonic() + timeout
    last: list[str] = ["nothing read yet"]
    while True:
        try:
            last, result = _read_readiness(kube, envdef, must_be_healthy=must_be_healthy)
            if not last:
                return result
        except KubeError as exc:
            last = [f"API server: {exc}"]
        if time.monotonic() > deadline:
            causes = diagnose()
            raise XtaskError(
                f"the environment did not become ready within {timeout:.0f}s: "
                + "; ".join(last[:8])
                + (f" (and {len(last) - 8} more)" if len(last) > 8 else ""),
                hint="; ".join(causes) if causes else "run `python -m xtask env status` to see every component",
            )
        time.sleep(interval)


def _read_readiness(kube, envdef, *, must_be_healthy: frozenset[str]) -> tuple[list[str], Readiness]:
    """One read of the env's objects: what still lags (empty: ready) and the readiness found."""
    from agn.kube import CONSUMERS, NETWORKS, PROVIDERS
    from agn.objects import consumer_revisions, consumer_view, name_of, network_view, provider_view
    from agn.operator.heartbeat import read_heartbeat
    from agn.overlays import list_overlays

    ns = envdef.namespace
    names = {c.name for c in envdef.consumers}
    heartbeat = read_heartbeat(kube, ns)
    provider_objs = kube.list(PROVIDERS, ns)[0]
    probe_errors = {
        name_of(o): str(error)
        for o in provider_objs
        if (error := (((o.get("status") or {}).get("probe") or {}).get("healthError")))
    }
    consumer_objs = [o for o in kube.list(CONSUMERS, ns)[0] if name_of(o) in names]
    overlays: dict[str, Overlay | Incomplete | None] = {
        name: spec if isinstance(spec, Incomplete) else Overlay.from_spec(spec)
        for name, spec in list_overlays(kube, ns).items()
    }
    look = EnvLook(
        providers=[provider_view(o, heartbeat) for o in provider_objs],
        networks={name_of(o): network_view(o) for o in kube.list(NETWORKS, ns)[0]},
        consumers=[consumer_view(o) for o in consumer_objs],
        revisions={name_of(o): consumer_revisions(o) for o in consumer_objs},
        overlays=overlays,
        now=time.time(),
        probe_errors=probe_errors,
    )
    result = evaluate_readiness(look, must_be_healthy=must_be_healthy)
    missing = sorted(names - {name_of(o) for o in consumer_objs})
    return [f"consumer {n}: does not exist" for n in missing] + list(result.problems), result
