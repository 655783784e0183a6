"""The offline image build's recipes, digests and decisions (xtask.image), with the fake runner: no Docker."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from fakes import FakeCmdRunner
from xtask.errors import RuntimeUnavailable
from xtask.image import (
    BaseRecipe,
    Docker,
    ImageBuilder,
    WheelRecipe,
    docker_build_argv,
    mounts_below,
    read_requirements,
)
from xtask.state import REPO_ROOT


def test_base_digest_covers_what_decides_the_content_and_nothing_else():
    recipe = BaseRecipe(arch="amd64")
    assert recipe.digest == BaseRecipe(arch="amd64").digest  # stable across runs
    for change in (
        {"arch": "arm64"},
        {"release": "trixie"},
        {"variant": "buildd"},
        {"packages": ("python3", "curl")},
        {"trim": recipe.trim[1:]},
        {"env": ("PATH=/bin",)},
        {"format": 2},
    ):
        assert dataclasses.replace(recipe, **change).digest != recipe.digest, change
    # The mirror says where packages come from, not what they are: same digest, same cache entry.
    one = recipe.debootstrap_argv(Path("/r"), "http://deb.debian.org/debian")
    two = recipe.debootstrap_argv(Path("/r"), "http://mirror.example/debian")
    assert one[:-1] == two[:-1]
    assert recipe.digest[:16] in recipe.tag and recipe.digest[:16] in recipe.tarball_name


def test_base_commands():
    recipe = BaseRecipe(arch="amd64")
    assert recipe.debootstrap_argv(Path("/scratch/rootfs"), "http://m/debian") == [
        "debootstrap",
        "--variant=minbase",
        "--arch=amd64",
        "--include=python3",
        "bookworm",
        "/scratch/rootfs",
        "http://m/debian",
    ]
    tar = recipe.tar_argv(Path("/scratch/rootfs"), Path("/c/base.tar"))
    assert tar[:4] == ["tar", "--numeric-owner", "-C", "/scratch/rootfs"]
    assert {"--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*"} <= set(tar)
    imported = recipe.import_argv(Path("/c/base.tar"))
    assert imported[:2] == ["docker", "import"] and imported[-2:] == ["/c/base.tar", recipe.tag]
    assert [imported[i + 1] for i, a in enumerate(imported) if a == "--change"] == [f"ENV {e}" for e in recipe.env]


def test_wheels_are_chosen_for_the_base_python_and_cached_by_requirements():
    deps, build = read_requirements(REPO_ROOT / "pyproject.toml")
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    assert list(deps) == project["project"]["dependencies"]
    assert list(build) == project["build-system"]["requires"]
    recipe = WheelRecipe(requirements=deps, build_requirements=build, python="3.11", platform="linux-x86_64")
    argv = recipe.deps_argv("/venv/bin/python", Path("/c/deps"))
    assert argv[:4] == ["/venv/bin/python", "-m", "pip", "download"]
    assert "--only-binary=:all:" in argv  # no compiler needed, nothing built for the host's Python
    assert argv[argv.index("--python-version") + 1] == "3.11"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--abi"] == ["cp311", "abi3", "none"]
    assert argv[-len(deps) - 1 :] == [*deps, "pip"]
    for change in ({"python": "3.12"}, {"requirements": deps[1:]}, {"platform": "linux-aarch64"}):
        assert dataclasses.replace(recipe, **change).folder_name != recipe.folder_name, change


def test_docker_build_uses_no_network_and_the_offline_arguments():
    argv = docker_build_argv(
        dockerfile=Path("/repo/Dockerfile"), context=Path("/tmp/ctx"), base="agn-base:1", tag="agn:dev"
    )
    assert argv[:4] == ["docker", "build", "--network", "none"]
    assert argv[argv.index("-f") + 1] == "/repo/Dockerfile" and argv[-1] == "/tmp/ctx"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"] == ["BASE=agn-base:1", "WHEELS=wheels"]
    assert argv[argv.index("-t") + 1] == "agn:dev"


def test_dockerfile_takes_the_offline_arguments_and_defaults_to_the_public_image():
    text = (REPO_ROOT / "Dockerfile").read_text()
    assert "ARG BASE=python:3.11" in text and "\nARG WHEELS=\n" in text
    assert "--no-index" in text  # with wheels, nothing comes from an index


def test_mounts_below_finds_only_mounts_under_the_folder_deepest_first():
    mountinfo = "\n".join(
        [
            "22 1 0:21 / /proc rw - proc proc rw",
            "90 1 0:5 / /tmp/s/rootfs/proc rw - proc proc rw",
            "91 90 0:6 / /tmp/s/rootfs/proc/sys/fs/binfmt_misc rw - binfmt_misc x rw",
            "92 1 0:7 / /tmp/s/with\\040space rw - tmpfs t rw",
            "93 1 0:8 / /tmp/s2/other rw - tmpfs t rw",  # a sibling sharing the prefix
            "94 1 0:9 / /tmp/s rw - tmpfs t rw",  # the folder itself
        ]
    )
    assert mounts_below(Path("/tmp/s"), mountinfo) == [
        "/tmp/s/rootfs/proc/sys/fs/binfmt_misc",
        "/tmp/s/rootfs/proc",
        "/tmp/s/with space",
    ]


# -- decisions, with the fake runner --------------------------------------------------------------


def _builder(tmp_path: Path, runner: FakeCmdRunner, *, which=lambda name: f"/usr/bin/{name}") -> ImageBuilder:
    runner.handlers.setdefault(("dpkg", "--print-architecture"), lambda argv: (0, "amd64\n"))
    return ImageBuilder(
        Docker("unix:///nowhere.sock", runner=runner),
        runner=runner,
        cache=tmp_path,
        which=which,
        progress=lambda m: None,
    )


def test_a_base_already_in_the_engine_is_used_as_it_is(tmp_path):
    runner = FakeCmdRunner(handlers={("docker", "image", "inspect"): lambda argv: (0, "sha256:abc\n")})
    builder = _builder(tmp_path, runner)
    assert builder.base() == BaseRecipe(arch="amd64").tag
    assert not [c for c in runner.calls if c[0] in ("debootstrap", "tar") or c[:2] == ["docker", "import"]]


def test_a_cached_tarball_is_imported_without_debootstrap(tmp_path):
    recipe = BaseRecipe(arch="amd64")
    (tmp_path / "image").mkdir()
    tarball = tmp_path / "image" / recipe.tarball_name
    tarball.write_bytes(b"tar")
    runner = FakeCmdRunner(handlers={("docker", "image", "inspect"): lambda argv: (1, "No such image")})
    assert _builder(tmp_path, runner).base() == recipe.tag
    assert [c for c in runner.calls if c[0] != "dpkg" and c[:3] != ["docker", "image", "inspect"]] == [
        recipe.import_argv(tarball)
    ]


def test_without_debootstrap_the_build_says_so_and_runs_nothing(tmp_path):
    runner = FakeCmdRunner(handlers={("docker", "image", "inspect"): lambda argv: (1, "No such image")})
    builder = _builder(tmp_path, runner, which=lambda name: None if name == "debootstrap" else f"/usr/bin/{name}")
    with pytest.raises(RuntimeUnavailable, match="debootstrap` is not on PATH"):
        builder.base()
    assert not [c for c in runner.calls if c[0] in ("debootstrap", "tar") or c[:2] == ["docker", "import"]]
    assert not (tmp_path / "image").exists() or not any((tmp_path / "image").iterdir())


def test_a_new_base_is_trimmed_packed_cached_and_its_scratch_removed(tmp_path):
    recipe = BaseRecipe(arch="amd64")
    seen: dict[str, object] = {}

    def debootstrap(argv: list[str]) -> tuple[int, str]:
        rootfs = Path(argv[-2])
        for path in ("usr/share/doc/python3/copyright", "var/lib/apt/lists/x_Packages", "usr/bin/python3"):
            (rootfs / path).parent.mkdir(parents=True, exist_ok=True)
            (rootfs / path).write_text("x")
        return 0, ""

    def tar(argv: list[str]) -> tuple[int, str]:
        rootfs = Path(argv[argv.index("-C") + 1])
        seen["doc"] = sorted(p.name for p in (rootfs / "usr/share/doc").iterdir())
        seen["lists"] = sorted(p.name for p in (rootfs / "var/lib/apt/lists").iterdir())
        seen["python"] = (rootfs / "usr/bin/python3").exists()
        Path(argv[argv.index("-cf") + 1]).write_bytes(b"packed")
        return 0, ""

    runner = FakeCmdRunner(
        handlers={
            ("docker", "image", "inspect"): lambda argv: (1, "No such image"),
            ("debootstrap",): debootstrap,
            ("tar",): tar,
        }
    )
    assert _builder(tmp_path, runner).base() == recipe.tag
    assert seen == {"doc": [], "lists": [], "python": True}  # emptied what the recipe trims, kept the rest
    tarball = tmp_path / "image" / recipe.tarball_name
    assert tarball.read_bytes() == b"packed"
    assert sorted(p.name for p in (tmp_path / "image").iterdir()) == [recipe.tarball_name]  # no scratch left
    assert runner.calls[-1] == recipe.import_argv(tarball)


def test_the_build_refuses_early_without_an_engine(tmp_path):
    runner = FakeCmdRunner(handlers={("docker", "info"): lambda argv: (1, "Cannot connect to the Docker daemon")})
    with pytest.raises(RuntimeUnavailable, match="no Docker engine answers at unix:///nowhere.sock"):
        _builder(tmp_path, runner).build()
    assert [c[:2] for c in runner.calls] == [["docker", "info"]]
