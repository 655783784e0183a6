"""The kind runtime's Kubernetes objects, rendered from an environment definition.

``render(envdef)`` returns plain dicts in apply order: the Namespace, ServiceAccounts,
least-privilege Roles and RoleBindings, a Service and a Deployment for the operator, for
one gateway per consumer and for one fake provider per provider, then the env's own AGN
objects. Each Deployment runs one :class:`xtask.components.Component` (its arguments,
probe paths and whether it has metrics), made from the env definition as the local
runtime's processes are. The operator's and gateways' pods carry the usual
``prometheus.io/scrape``, ``/port`` and ``/path`` annotations for their ``/metrics``. The AGN
objects come from :class:`xtask.envdef.EnvDef` itself (with Service URLs as provider
endpoints), so the kind and local runtimes share one source of truth.

Pure: no API calls, no subprocesses, no clock. The only input besides the arguments are
the static Role templates under ``manifests/rbac/`` (part of the program, read once). The
CRDs are not rendered here; they live in ``manifests/crds/`` (:mod:`xtask.crds`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from typing import Any

import yaml

from agn.model import selects
from agn.netshards import network_shard_names
from agn.objects import Obj, network_view
from agn.shards import DEFAULT_SHARD_COUNT, check_shard_count, shard_names
from xtask import components
from xtask.drain.core.lock import lock_name
from xtask.envdef import EnvDef
from xtask.errors import EnvDefinitionError
from xtask.record import Record
from xtask.resources import data_dir

RBAC_DIR = data_dir("manifests") / "rbac"
SHARDS_PLACEHOLDER = "{consumer_shards}"  # a list item in a Role template: the consumer's shard names
NETWORK_SHARDS_PLACEHOLDER = "{network_shards}"  # a list item: its network's shard names
IMAGE = "agn:dev"
PORT = 8080
OPERATOR = "agn-operator"
PROVIDER_DRAIN = "agn-provider-drain"
# Matches the Dockerfile's USER: the pods refuse to start as root even if the image changed.
RUN_AS = 10001
METRICS_PATH = "/metrics"
# The annotations Prometheus' kubernetes_sd pod relabelling conventionally reads.
SCRAPE_ANNOTATIONS = {
    "prometheus.io/scrape": "true",
    "prometheus.io/port": str(PORT),
    "prometheus.io/path": METRICS_PATH,
}


def gateway_name(consumer: str) -> str:
    """ServiceAccount, Role, RoleBinding, Deployment and Service name of one consumer gateway."""
    return f"agn-gateway-{consumer}"


def fake_provider_name(provider: str) -> str:
    """Deployment name of one fake provider (its Service is named after the provider)."""
    return f"fake-{provider}"


def provider_endpoint(provider: str, namespace: str) -> str:
    return f"http://{provider}.{namespace}.svc:{PORT}"


def provider_endpoints(envdef: EnvDef) -> dict[str, str]:
    """Service URL of every provider the env runs a fake for (external endpoints are left alone)."""
    return {p.name: provider_endpoint(p.name, envdef.namespace) for p in envdef.providers if not p.endpoint}


def env_objects(envdef: EnvDef) -> list[Obj]:
    """The env's AGN objects exactly as :class:`EnvDef` renders them, with in-cluster endpoints."""
    return envdef.network_objects() + envdef.consumer_objects() + envdef.provider_objects(provider_endpoints(envdef))


def refuse_engines(envdef: EnvDef) -> None:
    """A provider served by a real engine (``engine:``) runs on the local runtime only."""
    engines = [p.name for p in envdef.providers if p.engine is not None]
    if engines:
        raise EnvDefinitionError(
            f"env file {envdef.source}: providers {', '.join(engines)} declare an engine, which only the "
            "local runtime starts (no engine image is built for a cluster)",
            hint="bring it up with --runtime local",
        )


def render(
    envdef: EnvDef, *, namespace: str | None = None, image: str = IMAGE, image_id: str | None = None
) -> list[Obj]:
    """Every object of the env in apply order. ``namespace`` overrides the env's (for tests).

    ``image_id`` (the built image's digest) goes into each pod template, so a rebuilt
    ``agn:dev`` rolls the Deployments even though the tag did not change.
    """
    refuse_engines(envdef)
    if namespace:
        envdef = dataclasses.replace(envdef, namespace=namespace)
    ns = envdef.namespace
    pod = _PodSpec(image=image, image_id=image_id)
    consumers = [c.name for c in envdef.consumers]

    objects: list[Obj] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": _labels("namespace", ns)}}
    ]
    identities = [OPERATOR, *(gateway_name(c) for c in consumers), PROVIDER_DRAIN]
    objects += [_service_account(name, ns) for name in identities]
    roles = _roles(envdef)
    objects += roles
    objects += [_role_binding(role["metadata"]["name"], ns) for role in roles]

    # Every component serves HTTP on PORT on every address of its pod (xtask.components).
    placement = components.Placement(bind="0.0.0.0")
    # /healthz answers 200 once every cache is synced and the reconcile worker runs. The Service
    # gives its /metrics a stable address (``env status`` shows it).
    objects.append(_service(OPERATOR, ns, component="operator"))
    objects.append(
        pod.component(components.env_operator(envdef, port=PORT, placement=placement), OPERATOR, ns, OPERATOR)
    )
    for gateway in components.env_gateways(envdef, port_for=lambda name: PORT, placement=placement):
        name = gateway_name(gateway.serves)
        objects.append(_service(name, ns, component="gateway"))
        # Ready once it serves an overlay (/readyz); alive while the process answers (/healthz).
        objects.append(pod.component(gateway, name, ns, name))
    for fake in components.env_fake_providers(envdef, port_for=lambda name: PORT, placement=placement):
        provider = fake.serves
        objects.append(_service(provider, ns, component="provider", selector_name=fake_provider_name(provider)))
        # Liveness is a TCP check, not /healthz: a fake provider made unhealthy on purpose must
        # stay unhealthy for the operator to see, not be restarted back to healthy.
        objects.append(
            pod.component(
                fake,
                fake_provider_name(provider),
                ns,
                None,
                liveness={"tcpSocket": {"port": "http"}, "periodSeconds": 10},
            )
        )
    return objects + env_objects(envdef)


def _roles(envdef: EnvDef) -> list[Obj]:
    """The Roles of the operator, each consumer's gateway and the drain, filled in for ``envdef``."""
    ns = envdef.namespace
    return [
        _secrets(_role("operator.yaml", ns), "{provider_secrets}", provider_secrets(envdef)),
        *(
            _secrets(
                _role("gateway.yaml", ns, consumer=c.name, network=c.network, shard_count=envdef.overlay_shards),
                "{consumer_secrets}",
                provider_secrets(envdef, consumer=c.name),
            )
            for c in envdef.consumers
        ),
        _expand(_role("provider-drain.yaml", ns), "{drain_leases}", _drain_leases(envdef)),
    ]


def provider_secrets(envdef: EnvDef, *, consumer: str | None = None) -> list[str]:
    """The Secrets the env's providers name in ``authorization`` (their engines' tokens), sorted:
    every provider's for the operator, those of the providers the consumer's network selects for
    ``consumer``'s gateway. Only these names are readable (RBAC ``resourceNames``); a provider
    added outside the env file naming another Secret gets ``SecretForbidden`` until the Role lists it."""
    providers = envdef.providers
    if consumer is not None:
        network = next(c.network for c in envdef.consumers if c.name == consumer)
        view = next(network_view(n) for n in envdef.network_objects() if n["metadata"]["name"] == network)
        providers = tuple(p for p in providers if selects(view, p.labels))
    return sorted({str(p.authorization["credentials"]["name"]) for p in providers if p.authorization})


def _secrets(role: Obj, placeholder: str, names: list[str]) -> Obj:
    """``role`` with its Secret rule naming ``names``, or without that rule when there are none
    (an empty ``resourceNames`` would grant every Secret)."""
    rules = [r for r in role["rules"] if placeholder not in (r.get("resourceNames") or ())]
    if names:
        rules = _expand(role["rules"], placeholder, names)
    return {**role, "rules": rules}


def _drain_leases(envdef: EnvDef) -> list[str]:
    """The drain locks of the env's networks. Never an empty list: empty ``resourceNames`` would
    mean every Lease; ``agn-drain-`` is no object name, so it grants nothing."""
    return [lock_name(n.name) for n in envdef.networks] or ["agn-drain-"]


def deployment_names(objects: list[Obj]) -> list[str]:
    return [o["metadata"]["name"] for o in objects if o["kind"] == "Deployment"]


def metrics_url(name: str, namespace: str) -> str:
    """The in-cluster address of the ``/metrics`` of the operator or a gateway (through its Service)."""
    return f"http://{name}.{namespace}.svc:{PORT}{METRICS_PATH}"


# -- pieces ------------------------------------------------------------------------------------


def _labels(component: str, name: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/part-of": "agn",
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/managed-by": "agn-xtask",
    }


def _meta(name: str, namespace: str, component: str) -> Obj:
    return {"name": name, "namespace": namespace, "labels": _labels(component, name)}


def _service_account(name: str, namespace: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(name, namespace, "rbac")}


@functools.cache
def _role_template(filename: str) -> Obj:
    return yaml.safe_load((RBAC_DIR / filename).read_text())


def _role(
    filename: str,
    namespace: str,
    *,
    consumer: str | None = None,
    network: str = "",
    shard_count: int = DEFAULT_SHARD_COUNT,
) -> Obj:
    """A Role from its template. With ``consumer``: ``{consumer}`` is replaced by the name, a
    list item ``{consumer_shards}`` by every shard name of that consumer and ``{network_shards}``
    by every shard name of its ``network`` (``shard_count`` shards each)."""
    role = copy.deepcopy(_role_template(filename))
    if consumer is not None:
        role = _expand(role, SHARDS_PLACEHOLDER, shard_names(consumer, check_shard_count(shard_count)))
        role = _expand(role, NETWORK_SHARDS_PLACEHOLDER, network_shard_names(network, shard_count))
        role = _substitute(role, "{consumer}", consumer)
    role["metadata"] = _meta(role["metadata"]["name"], namespace, "rbac")
    return role


def _expand(value: Any, placeholder: str, items: list[str]) -> Any:
    """``value`` with every list item equal to ``placeholder`` replaced by ``items``."""
    if isinstance(value, list):
        out: list[Any] = []
        for v in value:
            if v == placeholder:
                out.extend(items)
            else:
                out.append(_expand(v, placeholder, items))
        return out
    if isinstance(value, dict):
        return {k: _expand(v, placeholder, items) for k, v in value.items()}
    return value


def _substitute(value: Any, placeholder: str, text: str) -> Any:
    if isinstance(value, str):
        return value.replace(placeholder, text)
    if isinstance(value, list):
        return [_substitute(v, placeholder, text) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, placeholder, text) for k, v in value.items()}
    return value


def _role_binding(name: str, namespace: str) -> Obj:
    """Binds Role ``name`` to the ServiceAccount of the same name, and to nothing else."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(name, namespace, "rbac"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
    }


def _http_probe(path: str, *, period: int = 2) -> Obj:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period, "failureThreshold": 3}


def _service(name: str, namespace: str, *, component: str, selector_name: str | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, namespace, component),
        "spec": {
            "selector": {"app.kubernetes.io/name": selector_name or name},
            "ports": [{"name": "http", "port": PORT, "targetPort": "http", "protocol": "TCP"}],
        },
    }


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class _PodSpec(Record):
    image: str
    image_id: str | None

    def component(
        self,
        c: components.Component,
        name: str,
        namespace: str,
        service_account: str | None,
        *,
        liveness: Obj | None = None,
    ) -> Obj:
        """The Deployment running ``c`` as object ``name``: its arguments, probes and scrape annotations."""
        return self.deployment(
            name,
            namespace,
            component=c.kind,
            service_account=service_account,
            scrape=c.metrics_path is not None,
            probes=(_http_probe(c.ready_path), liveness or _http_probe(c.health_path, period=10)),
            args=c.module_args,
        )

    def deployment(
        self,
        name: str,
        namespace: str,
        *,
        component: str,
        args: list[str],
        service_account: str | None,
        probes: tuple[Obj, Obj] | None = None,
        scrape: bool = False,
    ) -> Obj:
        """One Deployment of one container; ``probes`` = (readiness, liveness) for a component serving HTTP on PORT."""
        template_meta: Obj = {
            "labels": {
                "app.kubernetes.io/name": name,
                "app.kubernetes.io/part-of": "agn",
                "app.kubernetes.io/component": component,
            }
        }
        annotations = dict(SCRAPE_ANNOTATIONS) if scrape else {}
        if self.image_id:
            annotations["agn.dev/image-id"] = self.image_id
        if annotations:
            template_meta["annotations"] = annotations
        pod: Obj = {
            "automountServiceAccountToken": service_account is not None,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": RUN_AS,
                "runAsGroup": RUN_AS,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "terminationGracePeriodSeconds": 10,
            "containers": [self._container(component, args, probes)],
        }
        if service_account:
            pod["serviceAccountName"] = service_account
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": _meta(name, namespace, component),
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
                "template": {"metadata": template_meta, "spec": pod},
            },
        }

    def _container(self, component: str, args: list[str], probes: tuple[Obj, Obj] | None) -> Obj:
        """The one container of a component's pod: non-root, read-only, no capabilities."""
        container: Obj = {
            "name": component,
            "image": self.image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["python", "-m"],
            "args": args,
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]},
            },
        }
        if probes:
            container["ports"] = [{"name": "http", "containerPort": PORT, "protocol": "TCP"}]
            container["readinessProbe"], container["livenessProbe"] = probes
        return container
