"""What the kind runtime needs of the host, and its pure helpers: whether kind, kubectl and a
container engine are there (:func:`kind_problems`), the host settings privileged nodes need on
Podman (:func:`podman_host_problems`; ``scripts/kind-host-setup.sh`` makes them), whether the
registry of kind's default node image answers, what an engine or a node holds of an image, the
kind configuration a node image and the host need (:func:`render_kind_config`), and a pod as
``env status`` shows it.

Reads host files and asks the engine through a :class:`xtask.procs.CmdRunner`; creates nothing.
:mod:`xtask.runtime.kind` is the runtime itself.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agn.objects import name_of
from xtask.engine import detect_engine
from xtask.envdef import ENVS_DIR
from xtask.errors import CommandFailed
from xtask.host import Host
from xtask.procs import CmdRunner, RealCmdRunner

REGISTRY_PROBE = "https://registry-1.docker.io/v2/"  # where kind's default node image comes from
SETUP_HINT = "scripts/kind-host-setup.sh"


def kind_problems(runner: CmdRunner | None = None, *, host: Host, engine: str | None = None) -> list[str]:
    """What keeps the kind runtime from working on ``host`` (empty when it can be used)."""
    runner = runner or RealCmdRunner()
    problems = [f"`{tool}` is not on PATH" for tool in ("kind", "kubectl") if host.which(tool) is None]
    cli, reasons = (engine, []) if engine else detect_engine(environ=host.environ, which=host.which, runner=runner)
    if cli is None:
        problems.append("no container engine for kind: " + "; ".join(reasons))
    elif engine and host.which(engine) is None:
        problems.append(f"the env file pins kind.engine {engine}, and `{engine}` is not on PATH")
    elif cli == "podman":
        problems.extend(podman_host_problems(runner, host=host))
    return problems


def _containers_conf_files(host: Host) -> list[Path]:
    """containers.conf files podman reads, in its order (the last setting wins)."""
    if host.environ.get("CONTAINERS_CONF"):
        return [Path(host.environ["CONTAINERS_CONF"])]
    files = [host.path("/usr/share/containers/containers.conf"), host.path("/etc/containers/containers.conf")]
    dropins = host.path("/etc/containers/containers.conf.d")
    if dropins.is_dir():
        files += sorted(dropins.glob("*.conf"))
    return files


def _sets_nofile(files: list[Path]) -> bool:
    """Whether a containers.conf podman reads sets ``default_ulimits`` with a nofile entry
    (comments do not count: podman's own file carries a commented-out example)."""
    import tomllib

    for path in files:
        try:
            data = tomllib.loads(path.read_text(errors="replace"))
        except (OSError, tomllib.TOMLDecodeError):
            continue
        ulimits = (data.get("containers") or {}).get("default_ulimits") or []
        if isinstance(ulimits, list) and any(isinstance(u, str) and u.startswith("nofile=") for u in ulimits):
            return True
    return False


def podman_host_problems(runner: CmdRunner, *, host: Host) -> list[str]:
    """Host settings privileged kind nodes need on podman, each named with its fix."""
    problems = []
    modules = host.path("/lib/modules")
    if not modules.is_dir():
        problems.append(f"/lib/modules does not exist (kind mounts it into every node; run {SETUP_HINT})")
    hard = host.nofile_hard()
    if 0 <= hard < 1048576 and not _sets_nofile(_containers_conf_files(host)):
        problems.append(
            f"podman asks for 1048576 open files per container and this host allows {hard}: no containers.conf "
            f"sets default_ulimits nofile (run {SETUP_HINT})"
        )
    try:
        info = json.loads(runner.run(["podman", "info", "--format", "json"], timeout=30).stdout or "{}")
    except CommandFailed as exc:
        problems.append(f"`podman info` fails: {exc.output.strip()[-300:] or exc}")
        return problems
    except ValueError as exc:
        problems.append(f"`podman info` fails: {exc}")
        return problems
    info_host = info.get("host") or {}
    runtime = (info_host.get("ociRuntime") or {}).get("name")
    if info_host.get("cgroupVersion") == "v1" and runtime == "crun":
        problems.append(f"podman runs crun, which refuses cgroup v1 hosts: set runtime runc (run {SETUP_HINT})")
    return problems


def host_cgroup_v1(host: Host) -> bool:
    return not host.path("/sys/fs/cgroup/cgroup.controllers").exists()


def image_labels(runner: CmdRunner, cli: str, image: str) -> dict:
    """The labels of an image the engine holds (empty when it has none, or holds no such image)."""
    out = runner.run([cli, "image", "inspect", "--format", "{{json .Config.Labels}}", image], check=False, timeout=60)
    try:
        labels = json.loads(out.stdout or "null")
    except ValueError:
        labels = None
    return labels if isinstance(labels, dict) else {}


def node_has_image(runner: CmdRunner, cli: str, node: str, image: str, image_id: str) -> bool:
    """Whether a kind node's containerd holds ``image`` with this id already."""
    res = runner.run([cli, "exec", node, "crictl", "inspecti", "-o", "json", image], check=False, timeout=60)
    try:
        have = json.loads(res.stdout or "{}").get("status", {}).get("id", "")
    except ValueError:
        have = ""
    return res.returncode == 0 and have.removeprefix("sha256:") == image_id.removeprefix("sha256:")


def render_kind_config(
    base: Mapping[str, Any] | None, *, kubeadm_patches: list[str], own_node_image: bool, cgroup_v1: bool
) -> dict:
    """The env's kind configuration plus what the node image and the host need:

    - our node image has no kindnetd: kind's default CNI is disabled (the image networks pods);
    - its kubeadm patch (etcd image tag) from the image's label;
    - on cgroup v1 hosts, ``failCgroupV1: false`` (kubelets since 1.35 refuse v1 otherwise).
    """
    config: dict[str, Any] = dict(base or {"kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4"})
    patches = list(config.get("kubeadmConfigPatches") or [])
    if own_node_image:
        config["networking"] = {**(config.get("networking") or {}), "disableDefaultCNI": True}
        patches += kubeadm_patches
    if cgroup_v1:
        patches.append("kind: KubeletConfiguration\nfailCgroupV1: false\n")
    if patches:
        config["kubeadmConfigPatches"] = patches
    return config


def kind_config_path(env: str, *, envs_dir: Path = ENVS_DIR) -> Path:
    return envs_dir / f"kind-{env}.yaml"


def registry_reachable(url: str = REGISTRY_PROBE, timeout: float = 5.0) -> bool:
    """Whether the registry kind's default node image comes from answers at all (any HTTP status)."""
    try:
        urllib.request.urlopen(url, timeout=timeout)  # noqa: S310 - a fixed https URL
    except urllib.error.HTTPError:
        return True  # 401 from a registry is an answer
    except (OSError, ValueError):
        return False
    return True


def pod_row(pod: dict) -> dict:
    """A pod as ``kubectl get pods`` shows it: ready containers, phase, restarts."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    return {
        "name": name_of(pod),
        "ready": f"{ready}/{len((pod.get('spec') or {}).get('containers') or statuses)}",
        "phase": (pod.get("status") or {}).get("phase", "Unknown"),
        "restarts": sum(int(s.get("restartCount") or 0) for s in statuses),
        "node": (pod.get("spec") or {}).get("nodeName"),
    }


def remove_images(runner: CmdRunner, cli: str, images: list[str]) -> list[str]:
    """Remove ``images`` from the engine ``cli``; what was removed, and each one kept (in use) with
    how to remove it later."""
    # Newest first would be ideal; an image another one still needs fails and is retried
    # once the others are gone. Images in use elsewhere (another cluster) are kept.
    left = list(images)
    removed: list[str] = []
    gone = 0
    for _ in range(3):
        kept = []
        for image in left:
            res = runner.run([cli, "image", "rm", image], check=False, timeout=120)
            if res.returncode == 0:
                gone += 1
            elif runner.run([cli, "image", "inspect", image], check=False, timeout=60).returncode == 0:
                kept.append(image)
        if len(kept) == len(left):
            break
        left = kept
    if gone:
        removed.append(f"{gone} {cli} image{'s' if gone > 1 else ''} this env built or loaded")
    for image in left:  # another cluster or container uses it: kept, and said
        removed.append(f"kept {cli} image {image[:19]} (in use; `{cli} image rm {image}` once it is not)")
    return removed
