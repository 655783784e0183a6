"""What the kind runtime needs of the host, and its pure helpers: whether kind, kubectl and a
container engine are there (:func:`kind_problems`), the host settings privileged nodes need on
Podman (:func:`podman_host_problems`; ``scripts/kind-host-setup.sh`` makes them), whether the
registry of kind's default node image answers, the kind configuration a node image and the host
need (:func:`render_kind_config`), and a pod as ``env status`` shows it.

Reads host files and asks the engine through a :class:`xtask.procs.CmdRunner`; creates nothing.
:mod:`xtask.runtime.kind` is the runtime itself.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agn.objects import name_of
from xtask.engine import detect_engine
from xtask.envdef import ENVS_DIR
from xtask.errors import CommandFailed
from xtask.procs import CmdRunner, RealCmdRunner

REGISTRY_PROBE = "https://registry-1.docker.io/v2/"  # where kind's default node image comes from
SETUP_HINT = "scripts/kind-host-setup.sh"


def kind_problems(
    runner: CmdRunner | None = None,
    *,
    which: Callable[[str], str | None] = shutil.which,
    environ: Mapping[str, str] = os.environ,
    engine: str | None = None,
) -> list[str]:
    """What keeps the kind runtime from working here (empty when it can be used)."""
    runner = runner or RealCmdRunner()
    problems = [f"`{tool}` is not on PATH" for tool in ("kind", "kubectl") if which(tool) is None]
    cli, reasons = (engine, []) if engine else detect_engine(environ=environ, which=which, runner=runner)
    if cli is None:
        problems.append("no container engine for kind: " + "; ".join(reasons))
    elif engine and which(engine) is None:
        problems.append(f"the env file pins kind.engine {engine}, and `{engine}` is not on PATH")
    elif cli == "podman":
        problems.extend(podman_host_problems(runner, environ=environ))
    return problems


def _containers_conf_files(environ: Mapping[str, str]) -> list[Path]:
    """containers.conf files podman reads, in its order (the last setting wins)."""
    if environ.get("CONTAINERS_CONF"):
        return [Path(environ["CONTAINERS_CONF"])]
    files = [Path("/usr/share/containers/containers.conf"), Path("/etc/containers/containers.conf")]
    dropins = Path("/etc/containers/containers.conf.d")
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


def podman_host_problems(
    runner: CmdRunner, *, environ: Mapping[str, str] = os.environ, modules: Path = Path("/lib/modules")
) -> list[str]:
    """Host settings privileged kind nodes need on podman, each named with its fix."""
    problems = []
    if not modules.is_dir():
        problems.append(f"{modules} does not exist (kind mounts it into every node; run {SETUP_HINT})")
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1048576 and not _sets_nofile(_containers_conf_files(environ)):
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
    host = info.get("host") or {}
    runtime = (host.get("ociRuntime") or {}).get("name")
    if host.get("cgroupVersion") == "v1" and runtime == "crun":
        problems.append(f"podman runs crun, which refuses cgroup v1 hosts: set runtime runc (run {SETUP_HINT})")
    return problems


def host_cgroup_v1(root: Path = Path("/sys/fs/cgroup")) -> bool:
    return not (root / "cgroup.controllers").exists()


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
