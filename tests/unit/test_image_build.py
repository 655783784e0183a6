"""The offline image build's recipes, digests and decisions (xtask.images), with the fake runner: no Docker."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tomllib
from pathlib import Path

import pytest

from fakes import FakeCmdRunner
from xtask.errors import RuntimeUnavailable
from xtask.images.agn_image import Docker, ImageBuilder
from xtask.images.agn_image import main as image_main
from xtask.images.recipes import BaseRecipe, WheelRecipe, docker_build_argv, mounts_below, read_requirements
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


# -- on podman ------------------------------------------------------------------------------------


def test_podman_commands_take_the_same_arguments_and_name_images_under_localhost():
    recipe = BaseRecipe(arch="amd64")
    docker = recipe.import_argv(Path("/c/base.tar"))
    podman = recipe.import_argv(Path("/c/base.tar"), cli="podman")
    assert podman == ["podman", *docker[1:-1], f"localhost/{recipe.tag}"]
    argv = docker_build_argv(
        dockerfile=Path("/repo/Dockerfile"), context=Path("/tmp/ctx"), base="agn-base:1", tag="agn:dev", cli="podman"
    )
    assert argv[:4] == ["podman", "build", "--network", "none"]
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"] == [
        "BASE=localhost/agn-base:1",  # no short-name lookup: the base is the one just imported
        "WHEELS=wheels",
    ]
    assert argv[argv.index("-t") + 1] == "localhost/agn:dev"


def _podman_runner(images: set[str]) -> FakeCmdRunner:
    """A podman that knows ``images``, builds and imports into them, and pip that writes its folders."""

    def inspect(argv: list[str]) -> tuple[int, str]:
        ref = argv[-1]
        if ref not in images:
            return 125, f"Error: {ref}: image not known"
        return 0, "sha256:1\n" if "--format" in argv else json.dumps([{"Id": "f00d", "Size": 238_000_000}])

    def add(argv: list[str]) -> tuple[int, str]:
        images.add(argv[argv.index("-t") + 1] if "-t" in argv else argv[-1])
        return 0, ""

    def folder(flag: str):
        def make(argv: list[str]) -> tuple[int, str]:
            dest = Path(argv[argv.index(flag) + 1])
            dest.mkdir(parents=True)
            (dest / "x-1-py3-none-any.whl").write_bytes(b"wheel")
            return 0, ""

        return make

    return FakeCmdRunner(
        handlers={
            ("podman", "info"): lambda argv: (0, "4.3.1\n"),
            ("podman", "image", "inspect"): inspect,
            ("podman", "import"): add,
            ("podman", "build"): add,
            ("podman", "run"): lambda argv: (0, "3.11\n"),
            ("/venv/bin/python", "-m", "pip", "download"): folder("--dest"),
            ("/venv/bin/python", "-m", "pip", "wheel"): folder("--wheel-dir"),
            ("dpkg", "--print-architecture"): lambda argv: (0, "amd64\n"),
        }
    )


def test_a_podman_build_runs_podman_only_and_reports_the_names_podman_lists(tmp_path):
    recipe = BaseRecipe(arch="amd64")
    (tmp_path / "image").mkdir()
    tarball = tmp_path / "image" / recipe.tarball_name
    tarball.write_bytes(b"tar")
    images: set[str] = set()
    runner = _podman_runner(images)
    builder = ImageBuilder(
        Docker(cli="podman", runner=runner),
        runner=runner,
        cache=tmp_path,
        python="/venv/bin/python",
        which=lambda name: f"/usr/bin/{name}",
        progress=lambda m: None,
    )
    result = builder.build("agn:dev")
    base = f"localhost/{recipe.tag}"
    assert (result.tag, result.base, result.image_id, result.size) == ("localhost/agn:dev", base, "f00d", 238_000_000)
    assert images == {base, "localhost/agn:dev"}
    engine_calls = [c for c in runner.calls if c[0] in ("docker", "podman")]
    assert {c[0] for c in engine_calls} == {"podman"}
    assert [c[:2] for c in engine_calls] == [
        ["podman", "info"],
        ["podman", "image"],  # the base is not there yet
        ["podman", "import"],
        ["podman", "run"],  # the base's Python
        ["podman", "image"],  # the inputs label of an image already there (none yet)
        ["podman", "build"],
        ["podman", "image"],  # what was built
    ]
    assert engine_calls[2] == recipe.import_argv(tarball, cli="podman")
    assert engine_calls[3][-3:-1] == [base, "-c"]
    build = engine_calls[5]
    assert "BASE=" + base in build and build[build.index("-t") + 1] == "localhost/agn:dev"
    assert "podman build" in result.seconds


def test_a_podman_without_an_answer_is_named_and_nothing_runs(tmp_path):
    runner = FakeCmdRunner(
        handlers={("podman", "info"): lambda argv: (125, "Error: cannot open storage: permission denied")}
    )
    builder = _builder(tmp_path, runner)
    builder.docker = Docker(cli="podman", runner=runner)
    with pytest.raises(RuntimeUnavailable, match="`podman info` fails: Error: cannot open storage") as err:
        builder.build()
    assert "podman info" in (err.value.hint or "")
    assert runner.calls == [["podman", "info", "--format", "{{.Version.Version}}"]]


def test_the_script_builds_in_the_engine_kind_would_use_or_says_why_there_is_none(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AGN_CACHE_DIR", str(tmp_path))
    no_engine = FakeCmdRunner(handlers={("docker", "info"): lambda argv: (1, "Cannot connect to the Docker daemon")})
    assert (
        image_main([], environ={}, which=lambda name: "/usr/bin/docker" if name == "docker" else None, runner=no_engine)
        == 1
    )
    assert capsys.readouterr().err.strip() == (
        "error: no container engine to build in: `docker info` fails: Cannot connect to the Docker daemon; "
        "`podman` is not on PATH"
    )
    assert [c[:2] for c in no_engine.calls] == [["docker", "info"]]
    # Detected podman (KIND_EXPERIMENTAL_PROVIDER): the build runs there; here it stops at the base,
    # which cannot be made without debootstrap, and says so.
    runner = _podman_runner(set())
    code = image_main(
        [],
        environ={"KIND_EXPERIMENTAL_PROVIDER": "podman", "DOCKER_HOST": "unix:///d.sock"},
        which=lambda name: None if name == "debootstrap" else f"/usr/bin/{name}",
        runner=runner,
    )
    assert code == 1 and "debootstrap` is not on PATH" in capsys.readouterr().err
    assert {c[0] for c in runner.calls if c[0] in ("docker", "podman")} == {"podman"}
    # --engine docker against DOCKER_HOST, whatever kind's variable says.
    runner = FakeCmdRunner(handlers={("docker", "info"): lambda argv: (1, "connection refused")})
    assert (
        image_main(
            ["--engine", "docker"],
            environ={"KIND_EXPERIMENTAL_PROVIDER": "podman", "DOCKER_HOST": "unix:///d.sock"},
            which=lambda n: f"/usr/bin/{n}",
            runner=runner,
        )
        == 1
    )
    assert (
        "no Docker engine answers at unix:///d.sock: `docker info` fails: connection refused" in capsys.readouterr().err
    )
    with pytest.raises(SystemExit):
        image_main(["--tag", ""], environ={}, runner=FakeCmdRunner())
    assert "not an image reference: ''" in capsys.readouterr().err


def test_a_build_with_the_same_inputs_is_skipped_and_a_changed_source_rebuilds(tmp_path):
    """The image carries a digest of its base, wheels, sources and Dockerfile as a label: a second
    build with the same inputs runs no build; one changed source file builds again."""
    from xtask.images.recipes import INPUTS_LABEL

    repo = tmp_path / "repo"
    shutil.copytree(REPO_ROOT, repo, ignore=shutil.ignore_patterns(".git", ".venv", "tests", "__pycache__", "docs"))
    recipe = BaseRecipe(arch="amd64")
    (tmp_path / "image").mkdir()
    (tmp_path / "image" / recipe.tarball_name).write_bytes(b"tar")
    images: set[str] = set()
    labels: dict[str, str] = {}
    runner = _podman_runner(images)
    inspect = runner.handlers[("podman", "image", "inspect")]

    def build(argv: list[str]) -> tuple[int, str]:
        tag = argv[argv.index("-t") + 1]
        images.add(tag)
        labels[tag] = next(a.split("=", 1)[1] for a in argv if a.startswith(f"{INPUTS_LABEL}="))
        return 0, ""

    def inspect_label(argv: list[str]) -> tuple[int, str]:
        if INPUTS_LABEL in " ".join(argv):
            return (0, labels[argv[-1]] + "\n") if argv[-1] in labels else (125, "Error: image not known")
        return inspect(argv)

    runner.handlers[("podman", "build")] = build
    runner.handlers[("podman", "image", "inspect")] = inspect_label
    builder = ImageBuilder(
        Docker(cli="podman", runner=runner),
        runner=runner,
        cache=tmp_path,
        repo=repo,
        python="/venv/bin/python",
        which=lambda name: f"/usr/bin/{name}",
        progress=lambda m: None,
    )

    def builds() -> int:
        return sum(1 for c in runner.calls if c[:2] == ["podman", "build"])

    builder.build("agn:dev")
    builder.build("agn:dev")
    assert builds() == 1
    (repo / "xtask" / "__init__.py").write_text((repo / "xtask" / "__init__.py").read_text() + "\n# changed\n")
    builder.build("agn:dev")
    assert builds() == 2
