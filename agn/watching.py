"""The one list+watch loop that every AGN watcher runs (the operator's informers, the gateway's
overlay follower, the xtask's convergence and idle waiters), and the one way they wire it to a
resource: :func:`follow_resource` in the calling thread, :func:`start_follower` on a thread of
its own, both as a :class:`FollowOptions` says.

List, then watch from the list's resourceVersion; when the server ends a watch, resume from
the last resourceVersion seen (BOOKMARK events carry one too); on ``410 Gone`` re-list at
once; on any other error back off (capped exponential) and re-list. It never decides what an
object means and never writes: callers get whole snapshots and single watch events (the
``ADDED``/``MODIFIED``/``DELETED`` of a watch, not Kubernetes Event objects).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from agn.kube import Gone, Kube, Resource
from agn.objects import Obj

# How long a watch may keep failing before its process reports itself unhealthy (and ``env up``
# or a kubelet liveness probe restarts it). Short outages, such as an API server restart on the
# same address, heal within it by themselves.
WATCH_FAILURE_BOUND = 30.0


class WatchHealth:
    """Whether one follower's list+watch is live, for ``/healthz``. Thread-safe enough: one writer."""

    def __init__(self, name: str, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._clock = clock
        self.synced = False
        self.failing_since: float | None = None
        self.last_error = ""

    def ok(self) -> None:
        self.synced = True
        self.failing_since = None

    def failed(self, exc: BaseException) -> None:
        if self.failing_since is None:
            self.failing_since = self._clock()
        self.last_error = str(exc) or type(exc).__name__

    def failing_for(self) -> float:
        return 0.0 if self.failing_since is None else self._clock() - self.failing_since

    def live(self, bound: float = WATCH_FAILURE_BOUND) -> bool:
        return self.failing_for() < bound

    def to_dict(self, bound: float = WATCH_FAILURE_BOUND) -> dict[str, Any]:
        out: dict[str, Any] = {"synced": self.synced, "live": self.live(bound)}
        if self.failing_since is not None:
            out.update(failingForSeconds=round(self.failing_for(), 1), lastError=self.last_error)
        return out


def capped_backoff(initial: float, maximum: float) -> Callable[[int], float]:
    """Delay before retry ``n`` (1-based): initial, doubling, never above maximum."""
    return lambda n: min(initial * 2 ** (n - 1), maximum)


DEFAULT_BACKOFF = capped_backoff(0.05, 2.0)
WATCH_TIMEOUT_SECONDS = 30  # the server ends each watch after this; the loop resumes it


@dataclasses.dataclass(frozen=True, kw_only=True)
class FollowOptions:
    """How a follower lists, watches and recovers; every field has a default.

    How a resource is listed and watched (:func:`follow_resource` and :func:`start_follower`
    read these): ``field_selector`` (``metadata.name=X``) narrows both the list and the watch: a
    watcher whose RBAC names only ``X`` can follow it, and one object among thousands costs one
    object's traffic. ``watch_timeout`` is the server-side end of each watch (seconds; the loop
    resumes it). ``listed``: a list of the resource the caller has already read (its items and
    its resourceVersion, as :meth:`agn.kube.Kube.list` returns them; any list of the kind, a
    wider one too, or one object's GET as ``([obj], its resourceVersion)``): the first snapshot,
    with the watch started from its resourceVersion instead of listing again. Events since that
    read arrive as events; a resourceVersion the server no longer keeps (``410 Gone``) re-lists
    as always.

    How the loop recovers (:func:`follow` reads these): ``backoff(n)`` is the delay before
    retry ``n`` (1-based); ``on_error(exc, delay)`` is told about every failure before the retry
    (``delay`` is 0 for ``Gone``, which re-lists at once); ``health`` (optional) records when the
    loop last worked and since when it has been failing."""

    field_selector: str | None = None
    listed: tuple[list[Obj], str] | None = None
    watch_timeout: int = WATCH_TIMEOUT_SECONDS
    backoff: Callable[[int], float] = DEFAULT_BACKOFF
    on_error: Callable[[Exception, float], None] | None = None
    health: WatchHealth | None = None


def follow(
    *,
    list_fn: Callable[[], tuple[list[Obj], str]],
    watch_fn: Callable[[str], Iterable[tuple[str, Obj]]],
    on_snapshot: Callable[[list[Obj]], None],
    on_event: Callable[[str, Obj], None],
    stop: threading.Event,
    options: FollowOptions = FollowOptions(),
) -> None:
    """Keep a caller in sync with one resource until ``stop`` is set, recovering as ``options``
    say (their ``backoff``, ``on_error`` and ``health``; ``list_fn`` and ``watch_fn`` are the
    caller's: :func:`follow_resource` makes them from the rest of the options).

    Any exception — API errors and surprises in the callbacks alike — leads to a backed-off
    re-list (``on_error`` told first), so a watcher thread never dies silently.
    """
    backoff, on_error, health = options.backoff, options.on_error, options.health
    failures = 0
    rv: str | None = None
    while not stop.is_set():
        try:
            if rv is None:
                items, rv = list_fn()
                failures = 0
                on_snapshot(items)
                if health is not None:
                    health.ok()
            for kind, obj in watch_fn(rv):
                failures = 0
                if health is not None:
                    health.ok()
                rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                if stop.is_set():
                    return
                if kind != "BOOKMARK":
                    on_event(kind, obj)
        except Gone as exc:
            rv = None  # too old: re-list
            if on_error is not None:
                on_error(exc, 0.0)
        except Exception as exc:  # noqa: BLE001 - see the docstring: log, back off, re-list
            failures += 1
            rv = None
            delay = backoff(failures)
            if health is not None:
                health.failed(exc)
            if on_error is not None:
                on_error(exc, delay)
            if stop.wait(delay):
                return


def follow_resource(
    kube: Kube,
    resource: Resource,
    namespace: str,
    *,
    on_snapshot: Callable[[list[Obj]], None],
    on_event: Callable[[str, Obj], None],
    stop: threading.Event,
    options: FollowOptions = FollowOptions(),
) -> None:
    """:func:`follow` one resource of ``namespace`` through ``kube`` until ``stop`` is set, in
    the calling thread, as ``options`` say."""
    field_selector = options.field_selector
    already = [options.listed] if options.listed is not None and options.listed[1] else []

    def list_fn() -> tuple[list[Obj], str]:
        return already.pop() if already else kube.list(resource, namespace, field_selector=field_selector)

    follow(
        list_fn=list_fn,
        watch_fn=lambda version: kube.watch(
            resource,
            namespace,
            resource_version=version,
            timeout_seconds=options.watch_timeout,
            field_selector=field_selector,
        ),
        on_snapshot=on_snapshot,
        on_event=on_event,
        stop=stop,
        options=options,
    )


def start_follower(
    kube: Kube,
    resource: Resource,
    namespace: str,
    *,
    name: str,
    on_snapshot: Callable[[list[Obj]], None],
    on_event: Callable[[str, Obj], None],
    stop: threading.Event,
    options: FollowOptions = FollowOptions(),
) -> threading.Thread:
    """:func:`follow_resource` on a daemon thread called ``name``, started; the thread is returned.

    A daemon: a watch blocked in a socket read cannot be interrupted, so a stopping process
    never waits for it (the loop itself ends at its next event or watch timeout)."""
    thread = threading.Thread(
        target=follow_resource,
        args=(kube, resource, namespace),
        kwargs=dict(on_snapshot=on_snapshot, on_event=on_event, stop=stop, options=options),
        name=name,
        daemon=True,
    )
    thread.start()
    return thread
