"""A kind node image built without a registry: ``scripts/build-kind-node-image.sh``.

kind's own node image (``kindest/node``) comes from a registry. Where none is reachable, this
module makes an equivalent one for the Kubernetes release in
``scripts/controlplane/versions.env`` from what such a machine does have, the Go module proxy
and a Debian mirror:

1. **Binaries** (``scripts/kindnode/build-binaries.sh``): kubelet, kubeadm, kubectl,
   kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, etcd, containerd and
   its runc shim, ctr, runc, crictl, CoreDNS and the CNI plugins, built from the Go module
   proxy; pause compiled from the release's C source. Cached by their versions.
2. **Root filesystem**: ``debootstrap`` of Debian with systemd and the tools the kubelet and
   kube-proxy call (iptables, nftables, conntrack, mount, ...) — :data:`NODE_PACKAGES`,
   cached like the app image's base (:class:`xtask.images.recipes.BaseRecipe`).
3. **Control-plane images**: one small image per component (the binary, on the node's root
   filesystem for kube-proxy, which needs iptables), written as image archives under
   ``/kind/images`` and imported into the node's containerd at boot by
   ``agn-node-images.service``. kubeadm names them as on registry.k8s.io, so nothing is
   pulled.
4. **The node image**: two layers (the root filesystem; the binaries, the archives and the
   files under ``scripts/kindnode/rootfs``: entrypoint, containerd, kubelet and CNI
   configuration, kind's ``/kind`` files) written as an image archive and loaded into the
   engine (``docker load`` / ``podman load``).

The image is tagged ``localhost/agn/kind-node:<kubernetes version>-<recipe digest>``: the
digest covers every version, the package list and every file this module puts in, so a change
to any of them makes a new image, and nothing else does. Archives are written with fixed
owners and timestamps, so the same binaries and root filesystem give the same archive.

One node per cluster: pods get addresses from a bridge on the node (no kindnetd, which is
not on the Go module proxy), and the default StorageClass has no dynamic provisioner.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from xtask.engine import Engine
from xtask.errors import CommandFailed, RuntimeUnavailable, XtaskError
from xtask.images.agn_image import ImageBuilder, dpkg_arch
from xtask.images.archive import DEFAULT_PATH, Layer, RunConfig, file_sha256, sha256_hex, write_archive
from xtask.images.recipes import DEFAULT_MIRROR, BaseRecipe
from xtask.procs import CmdRunner, RealCmdRunner
from xtask.progress import Progress, to_stderr
from xtask.record import Record
from xtask.runtime.assets import cache_root
from xtask.state import REPO_ROOT

KINDNODE_DIR = REPO_ROOT / "scripts" / "kindnode"
ROOTFS_DIR = KINDNODE_DIR / "rootfs"  # files copied into the node as they are (@NAME@ filled in)
VERSION_FILES = (REPO_ROOT / "scripts" / "controlplane" / "versions.env", KINDNODE_DIR / "versions.env")
REPOSITORY = "localhost/agn/kind-node"
# The image label holding the kubeadm ClusterConfiguration patch that makes kubeadm use this
# image's etcd tag; the kind runtime passes it to kind as a kubeadmConfigPatch.
KUBEADM_PATCH_LABEL = "dev.agn.kind-node.kubeadm-patch"
FORMAT = 1  # bump when the way the image is assembled changes

# Debian packages of the node's root filesystem: systemd as init, and what the kubelet,
# kubeadm, kube-proxy and the CNI plugins call.
NODE_PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "iptables",
    "nftables",
    "conntrack",
    "ethtool",
    "socat",
    "iproute2",
    "util-linux",
    "mount",
    "ca-certificates",
    "procps",
    "libseccomp2",
    "kmod",
    "ebtables",
    "bash",
    "hostname",
)

# Node path -> file in the binaries folder.
NODE_BINARIES = {
    "usr/local/bin/kubelet": "kubelet",
    "usr/local/bin/kubeadm": "kubeadm",
    "usr/local/bin/kubectl": "kubectl",
    "usr/local/bin/containerd": "containerd",
    "usr/local/bin/containerd-shim-runc-v2": "containerd-shim-runc-v2",
    "usr/local/bin/ctr": "ctr",
    "usr/local/bin/crictl": "crictl",
    "usr/local/sbin/runc": "runc",
    "opt/cni/bin/bridge": "cni/bridge",
    "opt/cni/bin/host-local": "cni/host-local",
    "opt/cni/bin/loopback": "cni/loopback",
    "opt/cni/bin/portmap": "cni/portmap",
}
# Units the node starts at boot, and units that cannot work in a container.
ENABLED_UNITS = ("containerd.service", "agn-node-images.service", "kubelet.service")
MASKED_UNITS = (
    "systemd-udevd.service",
    "systemd-udevd-control.socket",
    "systemd-udevd-kernel.socket",
    "systemd-modules-load.service",
    "systemd-remount-fs.service",
    "kmod-static-nodes.service",
    "getty@tty1.service",
    "console-getty.service",
    "sys-kernel-debug.mount",
    "sys-kernel-tracing.mount",
    "sys-kernel-config.mount",
    "sys-fs-fuse-connections.mount",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "e2scrub_all.timer",
    "fstrim.timer",
)
ENV = (DEFAULT_PATH, "container=docker")


def read_versions(paths: Iterable[Path] = VERSION_FILES) -> dict[str, str]:
    """``NAME=value`` lines of the versions files (comments and trailing comments dropped)."""
    out: dict[str, str] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if "=" in line:
                key, value = line.split("=", 1)
                out[key.strip()] = value.strip()
    return out


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class ComponentImage(Record):
    """One control-plane image: its reference, its files (image path -> binary name) and entrypoint."""

    ref: str
    files: tuple[tuple[str, str], ...]
    entrypoint: tuple[str, ...] = ()
    on_rootfs: bool = False  # on the node's root filesystem (kube-proxy needs iptables)

    @property
    def archive_name(self) -> str:
        return re.sub(r"[^A-Za-z0-9.-]+", "_", self.ref.split("/", 1)[1]) + ".tar"


def etcd_tag(versions: Mapping[str, str]) -> str:
    """The etcd image tag, in registry.k8s.io's form (``3.6.16-0``)."""
    return versions["ETCD_VERSION"].removeprefix("v") + "-0"


def component_images(versions: Mapping[str, str]) -> list[ComponentImage]:
    k8s = versions["KUBERNETES_VERSION"]
    out = [
        ComponentImage(f"registry.k8s.io/{name}:{k8s}", ((f"usr/local/bin/{name}", name),))
        for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
    ]
    out.append(
        ComponentImage(
            f"registry.k8s.io/kube-proxy:{k8s}", (("usr/local/bin/kube-proxy", "kube-proxy"),), on_rootfs=True
        )
    )
    out.append(ComponentImage(f"registry.k8s.io/etcd:{etcd_tag(versions)}", (("usr/local/bin/etcd", "etcd"),)))
    out.append(
        ComponentImage(
            f"registry.k8s.io/coredns/coredns:{versions['COREDNS_VERSION']}",
            (("coredns", "coredns"),),
            entrypoint=("/coredns",),
        )
    )
    out.append(
        ComponentImage(f"registry.k8s.io/pause:{versions['PAUSE_TAG']}", (("pause", "pause"),), entrypoint=("/pause",))
    )
    return out


def kubeadm_patch(versions: Mapping[str, str]) -> str:
    """The ClusterConfiguration patch that makes kubeadm run this image's etcd (its default tag
    for a release can be newer than the etcd built here)."""
    return f'kind: ClusterConfiguration\netcd:\n  local:\n    imageTag: "{etcd_tag(versions)}"\n'


def rootfs_files(root: Path = ROOTFS_DIR) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink())


def fill(text: str, versions: Mapping[str, str]) -> str:
    """Replace ``@NAME@`` with the versions' NAME; an unknown name is an error, not a blank."""

    def one(m: re.Match[str]) -> str:
        if m.group(1) not in versions:
            raise XtaskError(f"scripts/kindnode/rootfs names @{m.group(1)}@, which no versions file sets")
        return versions[m.group(1)]

    return re.sub(r"@([A-Z_]+)@", one, text)


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class NodeRecipe(Record):
    """Everything that decides the node image's content."""

    versions: tuple[tuple[str, str], ...]
    base_digest: str  # the root filesystem's recipe
    files: tuple[tuple[str, str, int], ...]  # rootfs overlay path, sha256, mode
    binaries_script: str  # sha256 of build-binaries.sh (how the binaries are built)
    go_sum: str  # sha256 of the Kubernetes wrapper's go.sum
    format: int = FORMAT

    @property
    def digest(self) -> str:
        return sha256_hex(json.dumps(dataclasses.asdict(self), sort_keys=True).encode())

    @property
    def tag(self) -> str:
        return f"{REPOSITORY}:{dict(self.versions)['KUBERNETES_VERSION']}-{self.digest[:12]}"

    @property
    def archive_name(self) -> str:
        return f"node-{dict(self.versions)['KUBERNETES_VERSION']}-{self.digest[:16]}.tar"


def base_recipe(arch: str, release: str) -> BaseRecipe:
    return BaseRecipe(arch=arch, release=release, packages=NODE_PACKAGES)


def node_recipe(arch: str, *, repo: Path = REPO_ROOT) -> NodeRecipe:
    versions = read_versions((repo / "scripts/controlplane/versions.env", repo / "scripts/kindnode/versions.env"))
    root = repo / "scripts/kindnode/rootfs"
    return NodeRecipe(
        versions=tuple(sorted(versions.items())),
        base_digest=base_recipe(arch, versions["DEBIAN_SUITE"]).digest,
        files=tuple((str(p.relative_to(root)), file_sha256(p), p.stat().st_mode & 0o7777) for p in rootfs_files(root)),
        binaries_script=file_sha256(repo / "scripts/kindnode/build-binaries.sh"),
        go_sum=file_sha256(repo / "scripts/controlplane/kubernetes/go.sum"),
    )


# -- the build -----------------------------------------------------------------------------------


_stderr = to_stderr("build-kind-node-image")


class NodeImageBuilder:
    """Builds (or finds cached) the node image archive and loads it into one engine."""

    def __init__(
        self,
        engine: Engine,
        *,
        runner: CmdRunner | None = None,
        cache: Path | None = None,
        repo: Path = REPO_ROOT,
        mirror: str = DEFAULT_MIRROR,
        progress: Progress = _stderr,
    ) -> None:
        self.engine = engine
        self.cli = engine.cli
        self.runner = runner or RealCmdRunner()
        self.cache = (cache or cache_root()) / "kindnode"
        self.repo = repo
        self.mirror = mirror
        self.progress = progress

    def recipe(self) -> NodeRecipe:
        return node_recipe(dpkg_arch(self.runner), repo=self.repo)

    def binaries(self) -> Path:
        """The folder of built binaries (built now when the cache lacks one)."""
        script = self.repo / "scripts/kindnode/build-binaries.sh"
        self.progress("binaries: scripts/kindnode/build-binaries.sh (cached by version)")
        # Its progress goes to our stderr; its last line of output names the folder.
        out = RealCmdRunner().run_output(["bash", str(script)], timeout=7200)
        lines = out.strip().splitlines()
        if not lines or not Path(lines[-1]).is_dir():
            raise XtaskError(f"{script} did not print its binaries folder (output ended {out[-200:]!r})")
        return Path(lines[-1])

    def base(self, recipe: NodeRecipe) -> Path:
        versions = dict(recipe.versions)
        base = base_recipe(dpkg_arch(self.runner), versions["DEBIAN_SUITE"])
        maker = ImageBuilder(self.engine, runner=self.runner, mirror=self.mirror, progress=self.progress)
        tarball = maker.cache / base.tarball_name
        if tarball.exists():
            self.progress(f"root filesystem: cached {tarball}")
            return tarball
        problems = maker.debootstrap_problems()
        if problems:
            raise RuntimeUnavailable("cannot make the node's root filesystem: " + "; ".join(problems))
        maker._make_tarball(base, tarball)
        return tarball

    def archive(self, recipe: NodeRecipe | None = None) -> tuple[NodeRecipe, Path]:
        """The node image archive for ``recipe``: cached, or assembled now."""
        recipe = recipe or self.recipe()
        out = self.cache / recipe.archive_name
        if out.exists():
            self.progress(f"node image archive: cached {out}")
            return recipe, out
        binaries = self.binaries()
        base = self.base(recipe)
        self.cache.mkdir(parents=True, exist_ok=True)
        versions = dict(recipe.versions)
        with tempfile.TemporaryDirectory(prefix="node-", dir=self.cache) as tmp:
            work = Path(tmp)
            node_layer = Layer(work / "node-layer.tar")
            for comp in component_images(versions):
                self.progress(f"image {comp.ref}")
                layer = Layer(work / f"{comp.archive_name}.layer")
                for path, name in comp.files:
                    layer.add_file(path, binaries / name, 0o755)
                layer.close()
                archive = work / comp.archive_name
                write_archive(
                    archive,
                    layers=[base, layer.path] if comp.on_rootfs else [layer.path],
                    repo_tags=[comp.ref],
                    run=RunConfig(entrypoint=comp.entrypoint, env=ENV[:1]),
                )
                node_layer.add_file(f"kind/images/{comp.archive_name}", archive, 0o644)
                archive.unlink()
                layer.path.unlink()
            for path, name in NODE_BINARIES.items():
                node_layer.add_file(path, binaries / name, 0o755)
            root = self.repo / "scripts/kindnode/rootfs"
            for src in rootfs_files(root):
                rel = str(src.relative_to(root))
                node_layer.add_bytes(rel, fill(src.read_text(), versions).encode(), src.stat().st_mode & 0o7777)
            node_layer.add_bytes("kind/version", f"{versions['KUBERNETES_VERSION']}\n".encode())
            for unit in ENABLED_UNITS:
                node_layer.add_symlink(
                    f"etc/systemd/system/multi-user.target.wants/{unit}", f"/etc/systemd/system/{unit}"
                )
            for unit in MASKED_UNITS:
                node_layer.add_symlink(f"etc/systemd/system/{unit}", "/dev/null")
            node_layer.close()
            self.progress("node image archive")
            part = work / "node.tar"
            write_archive(
                part,
                layers=[base, node_layer.path],
                repo_tags=[recipe.tag],
                run=RunConfig(
                    entrypoint=("/usr/local/bin/entrypoint", "/sbin/init"),
                    labels={KUBEADM_PATCH_LABEL: kubeadm_patch(versions)},
                    stop_signal="SIGRTMIN+3",
                ),
            )
            os.replace(part, out)
        self.progress(f"node image archive: {out} ({out.stat().st_size / 2**20:.0f} MiB)")
        return recipe, out

    def load(self) -> str:
        """The node image's tag, loaded into the engine (nothing is done when it is there)."""
        recipe = self.recipe()
        if self.engine.image_exists(recipe.tag):
            self.progress(f"{recipe.tag}: already in {self.cli}")
            return recipe.tag
        recipe, archive = self.archive(recipe)
        self.progress(f"{self.cli} load {archive.name}")
        self.engine("load", "-i", str(archive), timeout=1800)
        self.prune(recipe)
        return recipe.tag

    def prune(self, recipe: NodeRecipe) -> None:
        """Remove what older recipes left: their node images in the engine (one that a node still
        runs on is kept: the engine refuses) and all but the newest other archive in the cache."""
        listed = self.engine("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", check=False, timeout=60).stdout
        for ref in listed.split():
            if ref.startswith(f"{REPOSITORY}:") and ref != recipe.tag:
                if self.engine("image", "rm", ref, check=False, timeout=120).returncode == 0:
                    self.progress(f"removed the older node image {ref}")
        archives = sorted(self.cache.glob("node-*.tar"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in [a for a in archives if a.name != recipe.archive_name][1:]:
            old.unlink(missing_ok=True)
            self.progress(f"removed the older node image archive {old}")


def main(argv: Sequence[str] | None = None, *, environ: Mapping[str, str] = os.environ) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/build-kind-node-image.sh",
        description="Build a kind node image with no container registry (binaries from the Go module proxy, "
        "a debootstrapped Debian) and load it into the container engine. Prints the image's name.",
    )
    parser.add_argument(
        "--engine",
        choices=("docker", "podman"),
        default=None,
        help="engine to load it into (default: as the kind runtime chooses: KIND_EXPERIMENTAL_PROVIDER, else "
        "the first of docker and podman that answers)",
    )
    parser.add_argument("--archive-only", action="store_true", help="build the archive, load it nowhere")
    parser.add_argument("--mirror", default=DEFAULT_MIRROR, help=f"Debian mirror (default {DEFAULT_MIRROR})")
    args = parser.parse_args(argv)
    cli = args.engine
    if cli is None and not args.archive_only:
        from xtask.engine import detect_engine

        cli, reasons = detect_engine(environ=environ, which=shutil.which, runner=RealCmdRunner())
        if cli is None:
            print("error: no container engine to load the image into: " + "; ".join(reasons), file=sys.stderr)
            return 1
    cli = cli or "docker"
    engine = Engine.from_environ(cli, environ)
    builder = NodeImageBuilder(engine, mirror=args.mirror)
    try:
        if args.archive_only:
            recipe, archive = builder.archive()
            print(f"{recipe.tag} {archive}")
        else:
            print(builder.load())
    except CommandFailed as exc:
        print(f"error: {exc}\n{exc.output.strip()[-2000:]}", file=sys.stderr)
        return 1
    except XtaskError as exc:
        print(f"error: {exc}" + (f"\nhint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
