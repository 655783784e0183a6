"""The recipes of the registry-free ``agn:dev`` build (:mod:`xtask.images.agn_image`): what
decides each cached piece's content, its digest, and the command lines that make it.

Pure: nothing here runs a command or touches the engine; the builder does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tomllib
from collections.abc import Sequence
from pathlib import Path

from xtask.engine import qualified
from xtask.record import Record

DEFAULT_MIRROR = "http://deb.debian.org/debian"
# An imported rootfs has no environment; these are what the public Python image sets too.
IMAGE_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8")
# Emptied after debootstrap: read by people and by apt, never by the programs (~140 MB).
TRIM = (
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/cache/apt",
    "var/lib/apt/lists",
    "var/log",
)
# What the Dockerfile copies from the repository (its .dockerignore admits the same).
SOURCES = ("pyproject.toml", "README.md", "agn", "xtask")
WHEELS = "wheels"  # the folder of the staged build context the Dockerfile's WHEELS names
# Timestamps in the project's wheel (1980-01-01, the earliest a zip file holds).
SOURCE_DATE_EPOCH = "315532800"
APP_WHEELS_KEPT = 8  # cached wheels of the project (one per distinct source tree)


def digest_of(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class BaseRecipe(Record):
    """Everything that decides the base image's content (the mirror only says where it comes from)."""

    arch: str
    release: str = "bookworm"
    variant: str = "minbase"
    packages: tuple[str, ...] = ("python3",)
    trim: tuple[str, ...] = TRIM
    env: tuple[str, ...] = IMAGE_ENV
    format: int = 1  # bump when the way the tarball is made changes

    @property
    def digest(self) -> str:
        return digest_of(dataclasses.asdict(self))

    @property
    def tag(self) -> str:
        return f"agn-base:{self.digest[:16]}"

    @property
    def tarball_name(self) -> str:
        return f"base-{self.release}-{self.arch}-{self.digest[:16]}.tar"

    def debootstrap_argv(self, target: Path, mirror: str) -> list[str]:
        return [
            "debootstrap",
            f"--variant={self.variant}",
            f"--arch={self.arch}",
            "--include=" + ",".join(self.packages),
            self.release,
            str(target),
            mirror,
        ]

    def tar_argv(self, rootfs: Path, out: Path) -> list[str]:
        # /dev, /proc and /sys are the engine's to provide in every container.
        excludes = [f"--exclude=./{d}/*" for d in ("dev", "proc", "sys")]
        return ["tar", "--numeric-owner", "-C", str(rootfs), *excludes, "-cf", str(out), "."]

    def import_argv(self, tarball: Path, *, cli: str = "docker") -> list[str]:
        changes = [arg for env in self.env for arg in ("--change", f"ENV {env}")]
        return [cli, "import", *changes, str(tarball), qualified(self.tag, cli)]


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class WheelRecipe(Record):
    """The wheels an offline install needs: the project's dependencies for one target Python."""

    requirements: tuple[str, ...]  # [project].dependencies
    build_requirements: tuple[str, ...]  # [build-system].requires, to build the project's wheel offline
    python: str  # "3.11": the base image's Python, not necessarily the host's
    platform: str  # the host's (pip picks manylinux wheels for it)
    format: int = 1

    @property
    def digest(self) -> str:
        return digest_of(dataclasses.asdict(self))

    @property
    def folder_name(self) -> str:
        return f"wheels-py{self.python}-{self.digest[:16]}"

    def deps_argv(self, python: str, dest: Path) -> list[str]:
        """Binary wheels only, chosen for the target Python, plus pip to install them with."""
        abi = "cp" + self.python.replace(".", "")
        return [
            python,
            "-m",
            "pip",
            "download",
            "--only-binary=:all:",
            "--python-version",
            self.python,
            "--implementation",
            "cp",
            *("--abi", abi, "--abi", "abi3", "--abi", "none"),
            "--dest",
            str(dest),
            *self.requirements,
            "pip",
        ]

    def tools_argv(self, python: str, dest: Path) -> list[str]:
        return [python, "-m", "pip", "download", "--dest", str(dest), *self.build_requirements]


def read_requirements(pyproject: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(dependencies, build requirements) of a pyproject.toml."""
    data = tomllib.loads(pyproject.read_text())
    return tuple(data["project"]["dependencies"]), tuple(data["build-system"]["requires"])


def mounts_below(root: Path, mountinfo: str) -> list[str]:
    """Mount points strictly below ``root`` in a ``/proc/self/mountinfo`` text, deepest first."""
    prefix = os.path.realpath(root).rstrip("/") + "/"
    points = []
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) > 4:
            # Field 5 is the mount point, with space, tab, newline and backslash octal-escaped.
            point = fields[4].encode().decode("unicode_escape")
            if point.startswith(prefix):
                points.append(point)
    return sorted(points, key=lambda p: p.count("/"), reverse=True)


def source_digest(folder: Path, names: Sequence[str] = SOURCES) -> str:
    """sha256 over the path and bytes of every file of ``names`` under ``folder`` (bytecode excluded)."""
    digest = hashlib.sha256()
    for name in names:
        root = folder / name
        if root.is_dir():
            files = sorted(
                p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
            )
        else:
            files = [root] if root.is_file() else []
        for path in files:
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
            digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def app_wheel_argv(python: str, *, source: Path, tools: Path, dest: Path) -> list[str]:
    """The project's wheel, built with the cached build requirements and no index."""
    return [
        python,
        *("-m", "pip", "wheel", "--no-deps", "--no-index"),
        *("--find-links", str(tools), "--wheel-dir", str(dest), str(source)),
    ]


# The image label recording a digest of everything its build was given (base, wheels, staged
# sources, Dockerfile): a build whose inputs carry the same digest is skipped.
INPUTS_LABEL = "dev.agn.image.inputs"


def docker_build_argv(
    *, dockerfile: Path, context: Path, base: str, tag: str, cli: str = "docker", inputs: str | None = None
) -> list[str]:
    """``docker build`` (or ``podman build``: ``cli``) of the Dockerfile on the staged context,
    labelled with the digest of its inputs."""
    return [
        cli,
        "build",
        "--network",
        "none",
        *(["--label", f"{INPUTS_LABEL}={inputs}"] if inputs else []),
        "-f",
        str(dockerfile),
        "--build-arg",
        f"BASE={qualified(base, cli)}",
        "--build-arg",
        f"WHEELS={WHEELS}",
        "-t",
        qualified(tag, cli),
        str(context),
    ]


# -- I/O -----------------------------------------------------------------------------------------
