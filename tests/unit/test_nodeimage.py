"""The kind node image made without a registry (xtask/images/nodeimage.py, xtask/images/archive.py), in its pure parts: the
control-plane image names kubeadm expects, the kubeadm patch, ``@NAME@`` filling, the recipe
digest (what makes a new image and what does not), and the archives (``docker save`` layout,
reproducible layers). Nothing is built and no engine is used."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest
import yaml

from fakes import FakeCmdRunner
from xtask.engine import Engine
from xtask.errors import XtaskError
from xtask.images.archive import EPOCH, Layer, RunConfig, write_archive
from xtask.images.nodeimage import (
    KUBEADM_PATCH_LABEL,
    REPOSITORY,
    NodeImageBuilder,
    component_images,
    etcd_tag,
    fill,
    kubeadm_patch,
    node_recipe,
    read_versions,
    rootfs_files,
)
from xtask.state import REPO_ROOT

VERSIONS = {
    "KUBERNETES_VERSION": "v1.37.2",
    "ETCD_VERSION": "v3.6.16",
    "COREDNS_VERSION": "v1.14.6",
    "PAUSE_TAG": "3.10.2",
}


# -- versions and names ---------------------------------------------------------------------------
def test_read_versions_drops_comments_and_trailing_comments(tmp_path):
    a = tmp_path / "a.env"
    a.write_text("# a comment\nKUBERNETES_VERSION=v1.37.2\n\n  ETCD_VERSION = v3.6.16  # trailing\nnot a setting\n")
    b = tmp_path / "b.env"
    b.write_text("COREDNS_VERSION=v1.14.6 # kubeadm's\nKUBERNETES_VERSION=v1.38.0\n")
    assert read_versions((a, b)) == {
        "KUBERNETES_VERSION": "v1.38.0",  # the later file wins
        "ETCD_VERSION": "v3.6.16",
        "COREDNS_VERSION": "v1.14.6",
    }


def test_the_repositorys_versions_name_everything_the_image_needs():
    versions = read_versions()
    for name in ("KUBERNETES_VERSION", "ETCD_VERSION", "COREDNS_VERSION", "PAUSE_TAG", "DEBIAN_SUITE"):
        assert versions.get(name), name
    assert component_images(versions)  # every name component_images reads is set


def test_etcd_tag_is_registry_k8s_ios_form():
    assert etcd_tag(VERSIONS) == "3.6.16-0"
    assert etcd_tag({"ETCD_VERSION": "3.5.0"}) == "3.5.0-0"


def test_component_images_are_named_as_kubeadm_expects_them():
    images = component_images(VERSIONS)
    assert [(i.ref, i.archive_name) for i in images] == [
        ("registry.k8s.io/kube-apiserver:v1.37.2", "kube-apiserver_v1.37.2.tar"),
        ("registry.k8s.io/kube-controller-manager:v1.37.2", "kube-controller-manager_v1.37.2.tar"),
        ("registry.k8s.io/kube-scheduler:v1.37.2", "kube-scheduler_v1.37.2.tar"),
        ("registry.k8s.io/kube-proxy:v1.37.2", "kube-proxy_v1.37.2.tar"),
        ("registry.k8s.io/etcd:3.6.16-0", "etcd_3.6.16-0.tar"),
        ("registry.k8s.io/coredns/coredns:v1.14.6", "coredns_coredns_v1.14.6.tar"),
        ("registry.k8s.io/pause:3.10.2", "pause_3.10.2.tar"),
    ]
    by_ref = {i.ref.split("/", 1)[1].rsplit(":", 1)[0]: i for i in images}
    # Only kube-proxy runs on the node's root filesystem (it calls iptables).
    assert [name for name, i in by_ref.items() if i.on_rootfs] == ["kube-proxy"]
    assert by_ref["kube-apiserver"].files == (("usr/local/bin/kube-apiserver", "kube-apiserver"),)
    assert by_ref["etcd"].files == (("usr/local/bin/etcd", "etcd"),)
    # kubeadm's manifests name the command for the control plane; CoreDNS and pause need their own.
    assert by_ref["coredns/coredns"].entrypoint == ("/coredns",)
    assert by_ref["pause"].entrypoint == ("/pause",)
    assert by_ref["kube-scheduler"].entrypoint == ()
    assert len({i.archive_name for i in images}) == len(images)  # one file each under /kind/images


def test_kubeadm_patch_pins_the_etcd_tag_built_here():
    patch = yaml.safe_load(kubeadm_patch(VERSIONS))
    assert patch == {"kind": "ClusterConfiguration", "etcd": {"local": {"imageTag": "3.6.16-0"}}}


# -- @NAME@ -----------------------------------------------------------------------------------------
def test_fill_replaces_known_names():
    text = 'sandbox = "registry.k8s.io/pause:@PAUSE_TAG@"\nk8s @KUBERNETES_VERSION@ @PAUSE_TAG@\n'
    assert fill(text, VERSIONS) == 'sandbox = "registry.k8s.io/pause:3.10.2"\nk8s v1.37.2 3.10.2\n'
    assert fill("user@example.com @lower@ @@", VERSIONS) == "user@example.com @lower@ @@"  # not names


def test_fill_refuses_an_unknown_name_naming_it():
    with pytest.raises(XtaskError, match=r"names @CONTAINERD_TAG@, which no versions file sets"):
        fill("containerd @CONTAINERD_TAG@", VERSIONS)


def test_every_name_the_repositorys_rootfs_uses_is_set():
    versions = read_versions()
    files = rootfs_files()
    assert files
    for path in files:
        fill(path.read_text(), versions)  # raises naming the first unknown one


# -- the recipe digest ------------------------------------------------------------------------------
RECIPE_FILES = (
    "scripts/controlplane/versions.env",
    "scripts/kindnode/versions.env",
    "scripts/kindnode/build-binaries.sh",
    "scripts/controlplane/kubernetes/go.sum",
)


@pytest.fixture
def repo(tmp_path) -> Path:
    """A copy of what the recipe reads from the repository."""
    root = tmp_path / "repo"
    for rel in RECIPE_FILES:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, root / rel)
    shutil.copytree(REPO_ROOT / "scripts/kindnode/rootfs", root / "scripts/kindnode/rootfs", symlinks=True)
    return root


def digest(repo: Path, arch: str = "amd64") -> str:
    return node_recipe(arch, repo=repo).digest


def test_a_copy_of_the_repository_has_the_same_recipe(repo):
    assert node_recipe("amd64", repo=repo) == node_recipe("amd64")
    recipe = node_recipe("amd64", repo=repo)
    version = dict(recipe.versions)["KUBERNETES_VERSION"]
    assert recipe.tag == f"{REPOSITORY}:{version}-{recipe.digest[:12]}"
    assert recipe.archive_name == f"node-{version}-{recipe.digest[:16]}.tar"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path} has no {old!r}"
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(
    "change",
    [
        lambda r: _edit(r / "scripts/kindnode/versions.env", "PAUSE_TAG=", "PAUSE_TAG=9"),
        lambda r: _edit(r / "scripts/controlplane/versions.env", "ETCD_VERSION=v", "ETCD_VERSION=v9"),
        lambda r: _edit(r / "scripts/kindnode/versions.env", "DEBIAN_SUITE=bookworm", "DEBIAN_SUITE=trixie"),
        lambda r: (r / "scripts/kindnode/versions.env").write_text(
            (r / "scripts/kindnode/versions.env").read_text() + "NEW_COMPONENT_VERSION=v1\n"
        ),
        lambda r: _edit(r / "scripts/kindnode/rootfs/etc/crictl.yaml", "\n", "\n# changed\n"),
        lambda r: (r / "scripts/kindnode/rootfs/etc/new-file").write_text("x\n"),
        lambda r: (r / "scripts/kindnode/rootfs/etc/crictl.yaml").rename(
            r / "scripts/kindnode/rootfs/etc/crictl2.yaml"
        ),
        lambda r: (r / "scripts/kindnode/rootfs/etc/crictl.yaml").unlink(),
        lambda r: (r / "scripts/kindnode/build-binaries.sh").write_text("# another build\n"),
        lambda r: (r / "scripts/controlplane/kubernetes/go.sum").write_text(""),
        lambda r: (r / "scripts/kindnode/rootfs/etc/crictl.yaml").chmod(0o600),
    ],
    ids=[
        "versions value",
        "controlplane versions value",
        "debian suite",
        "new version",
        "rootfs file content",
        "rootfs file added",
        "rootfs file renamed",
        "rootfs file removed",
        "build script",
        "go.sum",
        "rootfs file mode",
    ],
)
def test_the_digest_changes_with_what_goes_into_the_image(repo, change):
    before = digest(repo)
    change(repo)
    assert digest(repo) != before


@pytest.mark.parametrize(
    "change",
    [
        lambda r: (r / "scripts/kindnode/versions.env").write_text(
            "# a new comment\n" + (r / "scripts/kindnode/versions.env").read_text() + "\n# another\n"
        ),
        lambda r: _edit(r / "scripts/kindnode/versions.env", "PAUSE_TAG=3", "PAUSE_TAG=3"),  # rewritten, same
        lambda r: os.utime(r / "scripts/kindnode/rootfs/etc/crictl.yaml", (1, 1)),
        lambda r: (r / "scripts/kindnode/unrelated.txt").write_text("not part of the image\n"),
    ],
    ids=["comments", "same content rewritten", "mtime", "file outside rootfs"],
)
def test_the_digest_does_not_change_otherwise(repo, change):
    before = digest(repo)
    change(repo)
    assert digest(repo) == before


def test_the_digest_depends_on_the_architecture(repo):
    assert digest(repo, "amd64") != digest(repo, "arm64")


# -- layers -----------------------------------------------------------------------------------------
def _members(path: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(path) as tar:
        return tar.getmembers()


def test_a_layer_writes_parents_first_owned_by_root_at_a_fixed_time(tmp_path):
    src = tmp_path / "tool"
    src.write_bytes(b"#!/bin/sh\n")
    src.chmod(0o750)
    layer = Layer(tmp_path / "layer.tar")
    layer.add_file("usr/local/bin/tool", src)  # mode kept
    layer.add_file("usr/local/bin/forced", src, 0o644)  # mode given
    layer.add_bytes("etc/config", b"x=1\n")
    layer.add_bytes("usr/local/sbin/run", b"", 0o700)
    layer.add_symlink("etc/systemd/system/kubelet.service", "/dev/null")
    layer.close()

    members = _members(layer.path)
    assert [(m.name, m.type) for m in members] == [
        ("usr", tarfile.DIRTYPE),
        ("usr/local", tarfile.DIRTYPE),
        ("usr/local/bin", tarfile.DIRTYPE),
        ("usr/local/bin/tool", tarfile.REGTYPE),
        ("usr/local/bin/forced", tarfile.REGTYPE),  # its parents are not repeated
        ("etc", tarfile.DIRTYPE),
        ("etc/config", tarfile.REGTYPE),
        ("usr/local/sbin", tarfile.DIRTYPE),
        ("usr/local/sbin/run", tarfile.REGTYPE),
        ("etc/systemd", tarfile.DIRTYPE),
        ("etc/systemd/system", tarfile.DIRTYPE),
        ("etc/systemd/system/kubelet.service", tarfile.SYMTYPE),
    ]
    for m in members:
        assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "root", "root", EPOCH), m.name
    modes = {m.name: m.mode for m in members}
    assert modes["usr"] == modes["etc/systemd/system"] == 0o755
    assert modes["usr/local/bin/tool"] == 0o750
    assert modes["usr/local/bin/forced"] == 0o644
    assert modes["etc/config"] == 0o644
    assert modes["usr/local/sbin/run"] == 0o700
    link = next(m for m in members if m.issym())
    assert link.linkname == "/dev/null"
    with tarfile.open(layer.path) as tar:
        assert tar.extractfile("usr/local/bin/tool").read() == b"#!/bin/sh\n"
        assert tar.extractfile("etc/config").read() == b"x=1\n"


def _layer(path: Path, files: dict[str, bytes]) -> Path:
    layer = Layer(path)
    for name, data in files.items():
        layer.add_bytes(name, data)
    layer.close()
    return path


def test_layers_of_equal_content_are_byte_identical(tmp_path):
    a = tmp_path / "a"
    b = tmp_path / "b"
    for folder in (a, b):
        folder.mkdir()
        (folder / "bin").write_bytes(b"\x7fELF")
        (folder / "bin").chmod(0o755)
    os.utime(b / "bin", (1, 1))  # another source timestamp
    la, lb = Layer(a / "layer.tar"), Layer(b / "layer.tar")
    for layer, folder in ((la, a), (lb, b)):
        layer.add_file("usr/bin/x", folder / "bin")
        layer.close()
    assert (a / "layer.tar").read_bytes() == (b / "layer.tar").read_bytes()


# -- image archives ---------------------------------------------------------------------------------
def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _archive(folder: Path, *, touch: bool = False) -> tuple[Path, str]:
    folder.mkdir(parents=True, exist_ok=True)
    base = _layer(folder / "base.tar", {"etc/os-release": b"ID=debian\n"})
    top = _layer(folder / "top.tar", {"usr/local/bin/entrypoint": b'#!/bin/sh\nexec "$@"\n'})
    if touch:  # the layer files' own timestamps and modes are not the archive's
        for layer in (base, top):
            os.utime(layer, (1, 1))
            layer.chmod(0o600)
    out = folder / "image.tar"
    image_id = write_archive(
        out,
        layers=[base, top],
        repo_tags=["localhost/agn/kind-node:v1.37.2-abc"],
        run=RunConfig(
            entrypoint=("/usr/local/bin/entrypoint", "/sbin/init"),
            env=("PATH=/usr/bin", "container=docker"),
            labels={KUBEADM_PATCH_LABEL: kubeadm_patch(VERSIONS)},
            stop_signal="SIGRTMIN+3",
        ),
    )
    return out, image_id


def test_an_archive_has_the_docker_save_layout(tmp_path):
    out, image_id = _archive(tmp_path)
    with tarfile.open(out) as tar:
        files = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    manifest = json.loads(files["manifest.json"])
    assert len(manifest) == 1 and set(manifest[0]) == {"Config", "RepoTags", "Layers"}
    entry = manifest[0]
    assert entry["RepoTags"] == ["localhost/agn/kind-node:v1.37.2-abc"]
    config_bytes = files[entry["Config"]]
    assert entry["Config"] == f"{_sha(config_bytes)}.json"
    assert image_id == f"sha256:{_sha(config_bytes)}"
    config = json.loads(config_bytes)
    # Each layer is stored under its digest, which is the config's diff_id of it, in order.
    layers = [files[name] for name in entry["Layers"]]
    assert layers == [(tmp_path / "base.tar").read_bytes(), (tmp_path / "top.tar").read_bytes()]
    assert config["rootfs"] == {"type": "layers", "diff_ids": [f"sha256:{_sha(data)}" for data in layers]}
    assert entry["Layers"] == [f"{_sha(data)}/layer.tar" for data in layers]
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    assert len(config["history"]) == 2
    assert config["config"] == {
        "Env": ["PATH=/usr/bin", "container=docker"],
        "Entrypoint": ["/usr/local/bin/entrypoint", "/sbin/init"],
        "Labels": {KUBEADM_PATCH_LABEL: kubeadm_patch(VERSIONS)},
        "StopSignal": "SIGRTMIN+3",
    }
    # Every layer is a tar that ends where a reader expects (loadable by docker, podman, ctr).
    assert [m.name for m in tarfile.open(fileobj=io.BytesIO(layers[1])).getmembers()][-1] == "usr/local/bin/entrypoint"


def test_an_archive_without_entrypoint_or_labels_says_nothing_of_them(tmp_path):
    layer = _layer(tmp_path / "l.tar", {"pause": b"\0"})
    out = tmp_path / "pause.tar"
    write_archive(
        out, layers=[layer], repo_tags=["registry.k8s.io/pause:3.10.2"], run=RunConfig(env=("PATH=/",), cmd=("/pause",))
    )
    with tarfile.open(out) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
        config = json.loads(tar.extractfile(manifest[0]["Config"]).read())
    assert config["config"] == {"Env": ["PATH=/"], "Cmd": ["/pause"]}


def test_an_archive_is_byte_identical_when_built_twice(tmp_path):
    first, first_id = _archive(tmp_path / "one")
    second, second_id = _archive(tmp_path / "two", touch=True)
    assert first_id == second_id
    assert first.read_bytes() == second.read_bytes()
    for m in _members(first):
        assert (m.mtime, m.uid, m.gid, m.mode) == (EPOCH, 0, 0, 0o644), m.name


# -- loading into an engine -------------------------------------------------------------------------
def _builder(tmp_path: Path, runner: FakeCmdRunner, cli: str) -> NodeImageBuilder:
    return NodeImageBuilder(Engine(cli, runner=runner), runner=runner, cache=tmp_path, progress=lambda _: None)


def test_load_does_nothing_when_the_engine_has_the_image(tmp_path):
    runner = FakeCmdRunner(handlers={("dpkg",): lambda argv: (0, "amd64\n")})
    tag = _builder(tmp_path, runner, "podman").load()
    assert tag == node_recipe("amd64").tag
    assert runner.calls == [
        ["dpkg", "--print-architecture"],
        ["podman", "image", "inspect", "--format", "{{.Id}}", tag],
    ]


def test_load_loads_a_cached_archive_into_the_engine(tmp_path):
    runner = FakeCmdRunner(
        handlers={
            ("dpkg",): lambda argv: (0, "amd64\n"),
            ("podman", "image", "inspect"): lambda argv: (1, ""),
        }
    )
    recipe = node_recipe("amd64")
    cached = tmp_path / "kindnode" / recipe.archive_name
    cached.parent.mkdir()
    cached.write_bytes(b"an archive")
    assert _builder(tmp_path, runner, "podman").load() == recipe.tag
    assert ["podman", "load", "-i", str(cached)] in runner.calls  # the cached archive, as it is


def test_on_docker_the_image_check_is_dockers(tmp_path):
    runner = FakeCmdRunner(handlers={("dpkg",): lambda argv: (0, "amd64\n")})
    tag = _builder(tmp_path, runner, "docker").load()
    assert runner.calls[-1] == ["docker", "image", "inspect", "--format", "{{.Id}}", tag]


def test_loading_a_new_recipe_removes_older_node_images_and_archives(tmp_path):
    recipe = node_recipe("amd64")
    removed: list[str] = []
    runner = FakeCmdRunner(
        handlers={
            ("dpkg",): lambda argv: (0, "amd64\n"),
            ("podman", "image", "inspect"): lambda argv: (1, ""),
            ("podman", "image", "ls"): lambda argv: (
                0,
                f"localhost/agn/kind-node:v1.37.2-aaaaaaaaaaaa\n{recipe.tag}\nlocalhost/agn:dev\n"
                "localhost/agn/kind-node:v1.37.2-bbbbbbbbbbbb\n",
            ),
            ("podman", "image", "rm"): lambda argv: (
                (removed.append(argv[-1]), (0, ""))[1]
                if argv[-1].endswith("aaaaaaaaaaaa")
                else (2, "image is in use by a container")
            ),
        }
    )
    cache = tmp_path / "kindnode"
    cache.mkdir()
    for i, name in enumerate(("node-v1.37.2-old1.tar", "node-v1.37.2-old2.tar", recipe.archive_name)):
        (cache / name).write_bytes(b"x")
        os.utime(cache / name, (1000 + i, 1000 + i))
    assert _builder(tmp_path, runner, "podman").load() == recipe.tag
    assert removed == ["localhost/agn/kind-node:v1.37.2-aaaaaaaaaaaa"]  # the one in use is kept
    assert not any(
        argv[-1] in (recipe.tag, "localhost/agn:dev") for argv in runner.calls if argv[1:3] == ["image", "rm"]
    )
    assert sorted(p.name for p in cache.iterdir()) == sorted([recipe.archive_name, "node-v1.37.2-old2.tar"])
