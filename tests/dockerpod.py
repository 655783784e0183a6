"""A rendered Deployment's pod as ``docker run`` arguments, for the container suite.

Pure: the pod template of one Deployment from :func:`xtask.manifests.render` in, a
:class:`ContainerRun` out. Every security setting is read from the manifest, never restated,
so a change to the manifests changes what the suite runs:

| pod spec | docker run |
| --- | --- |
| ``runAsUser`` / ``runAsGroup`` (container over pod) | ``--user UID:GID``; ``runAsNonRoot`` refuses uid 0 |
| ``readOnlyRootFilesystem: true`` | ``--read-only`` |
| ``allowPrivilegeEscalation: false`` | ``--security-opt no-new-privileges`` |
| ``capabilities.drop`` / ``add`` | ``--cap-drop`` / ``--cap-add`` |
| ``privileged: true`` | ``--privileged`` |
| ``seccompProfile: RuntimeDefault`` | the engine's default profile (``Unconfined``: ``seccomp=unconfined``) |
| ``emptyDir`` volume mounts | ``--tmpfs`` (the only writable paths) |
| ``limits.memory`` | ``--memory`` |
| service account token (``automountServiceAccountToken``) | a folder with that account's kubeconfig, mounted read-only; ``KUBECONFIG`` |
| ``command`` / ``args`` | the image's entrypoint when ``command`` equals it (else ``--entrypoint``), ``args`` |
| ``terminationGracePeriodSeconds`` | ``--stop-timeout`` |

One thing cannot be taken literally: a pod has its own network namespace, so every pod may
listen on ``0.0.0.0:8080``. The suite runs containers on the host network, on loopback only,
so each gets a free host port in place of its container port, and ``--*host 0.0.0.0``
becomes ``127.0.0.1`` (:func:`host_network_args`). Probes on the named port follow it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

# Where a workload's credentials folder (``kubeconfig`` and the files it names) is mounted.
CREDENTIALS_MOUNT = "/var/run/secrets/agn"
KUBECONFIG = f"{CREDENTIALS_MOUNT}/kubeconfig"
LOOPBACK = "127.0.0.1"

Obj = dict[str, Any]


class UnsupportedPodSpec(ValueError):
    """The pod asks for something this translation does not model; the message names it."""


@dataclasses.dataclass(frozen=True)
class Probe:
    role: str  # "readiness" | "liveness"
    kind: str  # "http" | "tcp"
    port: int  # on the host (loopback)
    path: str | None = None


@dataclasses.dataclass(frozen=True)
class ContainerRun:
    name: str
    argv: list[str]  # after "docker": run --detach ... IMAGE ARGS
    port: int | None  # the host port standing in for the container port
    probes: list[Probe]
    service_account: str | None  # whose kubeconfig is mounted


def pod_of(deployment: Obj) -> tuple[Obj, Obj]:
    """(pod spec, its one container)."""
    spec = deployment["spec"]["template"]["spec"]
    containers = spec["containers"]
    if len(containers) != 1:
        raise UnsupportedPodSpec(f"{deployment['metadata']['name']}: {len(containers)} containers, expected 1")
    return spec, containers[0]


def service_account(deployment: Obj) -> str | None:
    """The account whose token the pod gets mounted (None: no token)."""
    spec, _ = pod_of(deployment)
    if spec.get("automountServiceAccountToken") is False:
        return None
    return spec.get("serviceAccountName") or "default"


def host_network_args(args: Sequence[str], *, container_port: int, host_port: int) -> list[str]:
    """``args`` for the host network: ``--*port <container port>`` -> the host port, ``--*host 0.0.0.0`` -> loopback."""
    out = list(args)
    for i in range(1, len(out)):
        flag = out[i - 1]
        if not flag.startswith("--"):
            continue
        if flag.endswith("port") and out[i] == str(container_port):
            out[i] = str(host_port)
        elif flag.endswith("host") and out[i] == "0.0.0.0":
            out[i] = LOOPBACK
    return out


def _user(pod_sc: Obj, sc: Obj, name: str) -> list[str]:
    uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
    gid = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
    non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
    if non_root and uid == 0:
        raise UnsupportedPodSpec(f"{name}: runAsNonRoot with runAsUser 0 would never start")
    if uid is None:
        return []
    return ["--user", f"{uid}:{gid}" if gid is not None else str(uid)]


def _security(pod_sc: Obj, sc: Obj, name: str) -> list[str]:
    out = _user(pod_sc, sc, name)
    if sc.get("readOnlyRootFilesystem"):
        out.append("--read-only")
    if sc.get("allowPrivilegeEscalation") is False:
        out += ["--security-opt", "no-new-privileges"]
    if sc.get("privileged"):
        out.append("--privileged")
    caps = sc.get("capabilities") or {}
    for cap in caps.get("drop") or []:
        out += ["--cap-drop", cap]
    for cap in caps.get("add") or []:
        out += ["--cap-add", cap]
    seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type", "RuntimeDefault")
    if seccomp == "Unconfined":
        out += ["--security-opt", "seccomp=unconfined"]
    elif seccomp != "RuntimeDefault":
        raise UnsupportedPodSpec(f"{name}: seccompProfile {seccomp} is not modelled")
    return out


def memory_bytes(quantity: str) -> int:
    from kubernetes.utils.quantity import parse_quantity  # the client's own Kubernetes quantity parser

    return int(parse_quantity(quantity))


def _volumes(spec: Obj, container: Obj, name: str) -> list[str]:
    volumes = {v["name"]: v for v in spec.get("volumes") or []}
    out = []
    for mount in container.get("volumeMounts") or []:
        volume = volumes.get(mount["name"])
        if volume is None or "emptyDir" not in volume:
            raise UnsupportedPodSpec(f"{name}: volume {mount['name']!r} is not an emptyDir")
        options = "rw,exec,nosuid,nodev,mode=1777"
        limit = (volume["emptyDir"] or {}).get("sizeLimit")
        if limit:
            options += f",size={memory_bytes(str(limit))}"
        out += ["--tmpfs", f"{mount['mountPath']}:{options}"]
    return out


def _probe(role: str, probe: Obj | None, ports: Mapping[str, int], host_port: int | None) -> Probe | None:
    if not probe:
        return None

    def resolve(port: Any) -> int:
        declared = port in ports if isinstance(port, str) else int(port) in ports.values()
        if not declared or host_port is None:
            raise UnsupportedPodSpec(f"{role} probe on port {port!r}, which the container does not declare")
        return host_port

    if "httpGet" in probe:
        return Probe(role, "http", resolve(probe["httpGet"]["port"]), probe["httpGet"].get("path", "/"))
    if "tcpSocket" in probe:
        return Probe(role, "tcp", resolve(probe["tcpSocket"]["port"]))
    raise UnsupportedPodSpec(f"{role} probe {sorted(probe)} is not modelled")


def container_run(
    deployment: Obj,
    *,
    name: str,
    image_entrypoint: Sequence[str],
    host_port: int | None,
    credentials: Mapping[str, str],
) -> ContainerRun:
    """``docker run`` for ``deployment``'s pod on the host network.

    ``credentials`` maps a service account to a host folder holding ``kubeconfig`` (and the
    files it names) that authenticates as it; ``image_entrypoint`` is the image's (so an
    equal ``command`` uses it).
    """
    spec, container = pod_of(deployment)
    pod_sc = spec.get("securityContext") or {}
    sc = container.get("securityContext") or {}
    label = deployment["metadata"]["name"]
    argv = ["run", "--detach", "--name", name, "--network", "host"]
    argv += _security(pod_sc, sc, label)
    argv += _volumes(spec, container, label)
    memory = ((container.get("resources") or {}).get("limits") or {}).get("memory")
    if memory:
        argv += ["--memory", str(memory_bytes(str(memory)))]
    if "terminationGracePeriodSeconds" in spec:
        argv += ["--stop-timeout", str(spec["terminationGracePeriodSeconds"])]
    for env in container.get("env") or []:
        if "value" not in env:
            raise UnsupportedPodSpec(f"{label}: env {env['name']} is not a plain value")
        argv += ["--env", f"{env['name']}={env['value']}"]
    account = service_account(deployment)
    if account is not None:
        if account not in credentials:
            raise UnsupportedPodSpec(f"{label}: gets the token of {account!r}, but no credentials were given for it")
        argv += ["--mount", f"type=bind,source={credentials[account]},target={CREDENTIALS_MOUNT},readonly"]
        argv += ["--env", f"KUBECONFIG={KUBECONFIG}"]

    ports = {p.get("name", str(p["containerPort"])): int(p["containerPort"]) for p in container.get("ports") or []}
    if len(ports) > 1:
        raise UnsupportedPodSpec(f"{label}: {len(ports)} container ports, expected at most 1")
    if ports and host_port is None:
        raise UnsupportedPodSpec(f"{label}: declares a port, so it needs a host port")
    args = list(container.get("args") or [])
    if ports and host_port is not None:
        args = host_network_args(args, container_port=next(iter(ports.values())), host_port=host_port)
    command = container.get("command")
    if command and list(command) != list(image_entrypoint):
        argv += ["--entrypoint", command[0]]
        args = [*command[1:], *args]
    argv += [container["image"], *args]

    probes = [
        p
        for p in (
            _probe("readiness", container.get("readinessProbe"), ports, host_port),
            _probe("liveness", container.get("livenessProbe"), ports, host_port),
        )
        if p is not None
    ]
    return ContainerRun(name=name, argv=argv, port=host_port if ports else None, probes=probes, service_account=account)
