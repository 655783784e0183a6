"""The API resources the project reads and writes, by kind, plural and group/version.

:class:`Resource` names a namespaced REST collection the generic object methods of
:class:`agn.kube.Kube` serve (get, list, watch, create, replace, patch, delete); the constants
below are every one the project uses. Plain data: this module must not import ``kubernetes``
or make any request (callers import these names from :mod:`agn.kube`, which re-exports them).
"""

from __future__ import annotations

import dataclasses

from agn import GROUP, VERSION


@dataclasses.dataclass(frozen=True)
class Resource:
    kind: str
    plural: str
    group: str = GROUP
    version: str = VERSION

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def kubectl_name(self, name: str) -> str:
        """The object ``name`` of this resource as ``kubectl get -o name`` prints it."""
        return qualified_name(self.kind, self.api_version, name)


def qualified_name(kind: str, api_version: str, name: str) -> str:
    """``kind.group/name`` as ``kubectl get -o name`` prints it: ``inferenceprovider.agn.dev/p-one``,
    ``deployment.apps/x``, ``namespace/x`` (the core group has none)."""
    group = api_version.rpartition("/")[0]
    return f"{kind.lower()}.{group}/{name}" if group else f"{kind.lower()}/{name}"


PROVIDERS = Resource("InferenceProvider", "inferenceproviders")
NETWORKS = Resource("InferenceNetwork", "inferencenetworks")
CONSUMERS = Resource("InferenceConsumer", "inferenceconsumers")
OVERLAYS = Resource("RoutingOverlay", "routingoverlays")
# A sharded overlay's candidates (agn.shards): RoutingOverlay is then the index.
SHARDS = Resource("RoutingOverlayShard", "routingoverlayshards")
AGN_RESOURCES = (PROVIDERS, NETWORKS, CONSUMERS, OVERLAYS, SHARDS)
# Not an AGN resource, but its REST paths have the same shape, so the generic object methods
# of agn.kube.Kube (get/create/replace, conditional on resourceVersion) serve the operator's
# leader election.
LEASES = Resource("Lease", "leases", group="coordination.k8s.io", version="v1")
# Events (events.k8s.io/v1) go the same generic way, as plain dicts. The generated
# EventsV1Api would first validate the dict into its pydantic model and send ``eventTime``
# back through ``datetime.isoformat()``, which drops the fraction when the microseconds are
# zero — a MicroTime the API server then rejects — and its models cost ~0.15 s to load.
EVENTS = Resource("Event", "events", group="events.k8s.io", version="v1")
