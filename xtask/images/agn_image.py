"""Building ``agn:dev`` with no container registry: ``scripts/build-image.sh``.

The Dockerfile's default base, the public Python image, has to be pulled from a registry.
Where none is reachable, this module makes the same image from what such a machine does
have — a Debian mirror and PyPI (or wheels it cached earlier):

1. **Base.** ``debootstrap`` a minimal Debian (variant ``minbase`` plus ``python3``), empty
   what a container never reads (documentation, locales, apt's lists and caches), pack it and
   import it (``docker import``) as ``agn-base:<digest>``. The tarball is cached by a digest of
   everything that decides its content (:class:`BaseRecipe`): another release, package list
   or trim list makes a new base, nothing else does. Debian point releases do not change the
   digest; delete the cached tarball to pick one up.
2. **Wheels.** A binary wheel of every dependency for the *base's* Python (so no compiler is
   needed and the host's Python version does not matter), plus pip's own wheel to install
   them with, cached by a digest of the requirements and the target (:class:`WheelRecipe`).
   The project's wheel is built from a copy of the sources without an index, and cached by
   a digest of those sources (building it costs more than the rest of a warm build).
3. **Image.** ``docker build --network none`` of the repository's Dockerfile with
   ``BASE=agn-base:<digest>`` and ``WHEELS=wheels`` on a staged build context. The build has
   no network at all, which is what shows that it needs none.

Docker or Podman (:mod:`xtask.engine`): the two take the same arguments for all of this. On
Podman, names without a registry domain are stored under ``localhost/``; the builder names its
images that way there (:func:`xtask.engine.qualified`), so nothing depends on short-name lookup.

Recipes, digests and command lines are pure; every command runs through
:class:`xtask.procs.CmdRunner`, and errors name what is missing and how to get it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from xtask.engine import ENGINES, Engine, detect_engine
from xtask.errors import CommandFailed, RuntimeUnavailable, XtaskError
from xtask.images.recipes import (
    APP_WHEELS_KEPT,
    DEFAULT_MIRROR,
    INPUTS_LABEL,
    SOURCE_DATE_EPOCH,
    SOURCES,
    WHEELS,
    BaseRecipe,
    WheelRecipe,
    app_wheel_argv,
    digest_of,
    docker_build_argv,
    mounts_below,
    read_requirements,
    source_digest,
)
from xtask.manifests import IMAGE
from xtask.procs import CmdRunner, RealCmdRunner
from xtask.progress import Progress, to_stderr
from xtask.record import Record
from xtask.runtime.assets import cache_root
from xtask.state import REPO_ROOT


class Docker(Engine):
    """An :class:`xtask.engine.Engine` under the name the code had before Podman:
    ``Docker(host)`` is ``Engine("docker", host=host)``."""

    def __init__(self, host: str | None = None, *, runner: CmdRunner | None = None, cli: str = "docker") -> None:
        super().__init__(cli, host=host, runner=runner)


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class BuildResult(Record):
    tag: str  # as the engine lists it (podman: localhost/agn:dev)
    image_id: str
    size: int  # bytes, as `docker image inspect` reports it
    base: str
    seconds: dict[str, float]


_stderr = to_stderr("build-image")


def dpkg_arch(runner: CmdRunner) -> str:
    try:
        return runner.run(["dpkg", "--print-architecture"], timeout=30).stdout.strip()
    except CommandFailed:
        return {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _empty(folder: Path) -> None:
    if not folder.is_dir() or folder.is_symlink():
        return
    for child in folder.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


class ImageBuilder:
    """Builds ``agn:dev`` from a debootstrapped base and host-built wheels (see the module docstring)."""

    def __init__(
        self,
        docker: Engine,
        *,
        runner: CmdRunner | None = None,
        cache: Path | None = None,
        repo: Path = REPO_ROOT,
        python: str = sys.executable,
        mirror: str = DEFAULT_MIRROR,
        progress: Progress = _stderr,
        which: Callable[[str], str | None] = shutil.which,
    ) -> None:
        self.docker = docker
        self.runner = runner or RealCmdRunner()
        self.cache = (cache or cache_root()) / "image"
        self.repo = repo
        self.python = python
        self.mirror = mirror
        self.progress = progress
        self._which = which

    def engine_problems(self) -> list[str]:
        """What keeps this builder from using its engine (empty when it answers)."""
        cli = self.docker.cli
        if self._which(cli) is None:
            return [f"`{cli}` (the CLI) is not on PATH"]
        why = self.docker.problem()
        if why is not None:
            if cli == "docker":
                return [f"no Docker engine answers at {self.docker.host or 'the default DOCKER_HOST'}: {why}"]
            return [why]
        return []

    def debootstrap_problems(self) -> list[str]:
        """What keeps this host from making a base rootfs (empty when it can)."""
        out = []
        if self._which("debootstrap") is None:
            out.append("`debootstrap` is not on PATH (Debian/Ubuntu: apt-get install debootstrap)")
        if os.geteuid() != 0:
            out.append("debootstrap needs root (it creates device nodes and runs the packages' scripts in a chroot)")
        return out

    def recipe(self) -> BaseRecipe:
        return BaseRecipe(arch=dpkg_arch(self.runner))

    # -- 1. base -------------------------------------------------------------------------------
    def base(self, recipe: BaseRecipe | None = None) -> str:
        """The base image's tag: imported already, imported from the cached tarball, or made now."""
        recipe = recipe or self.recipe()
        tag = self.docker.qualified(recipe.tag)
        if self.docker.image_exists(tag):
            self.progress(f"base {tag}: already in the engine")
            return tag
        tarball = self.cache / recipe.tarball_name
        if tarball.exists():
            self.progress(f"base {tag}: importing the cached {tarball}")
        else:
            problems = self.debootstrap_problems()
            if problems:
                raise RuntimeUnavailable(
                    "cannot make the base image: " + "; ".join(problems),
                    hint="with a registry, build the usual way instead: docker build -t agn:dev .",
                )
            self._make_tarball(recipe, tarball)
        self.docker.run_argv(recipe.import_argv(tarball, cli=self.docker.cli), timeout=600)
        return tag

    def _make_tarball(self, recipe: BaseRecipe, tarball: Path) -> None:
        self.cache.mkdir(parents=True, exist_ok=True)
        # Same filesystem as the cache, so the finished tarball is renamed into place atomically
        # and a concurrent build sees either no tarball or a whole one.
        tmp = Path(tempfile.mkdtemp(prefix="base-", dir=self.cache))
        rootfs = tmp / "rootfs"
        try:
            self.progress(
                f"base {recipe.tag}: debootstrap {recipe.release} ({recipe.variant} + "
                f"{', '.join(recipe.packages)}) from {self.mirror}"
            )
            self.runner.run(recipe.debootstrap_argv(rootfs, self.mirror), timeout=1800)
            self._release_mounts(rootfs)
            for path in recipe.trim:
                _empty(rootfs / path)
            part = tmp / "base.tar"
            self.runner.run(recipe.tar_argv(rootfs, part), timeout=600)
            os.replace(part, tarball)
        finally:
            self._remove_rootfs(tmp)
        self.progress(f"base {recipe.tag}: cached {tarball} ({tarball.stat().st_size / 2**20:.0f} MiB)")

    def _release_mounts(self, rootfs: Path) -> None:
        """Unmount what debootstrap left mounted in the rootfs (it sometimes leaves /proc)."""
        for point in mounts_below(rootfs, Path("/proc/self/mountinfo").read_text()):
            self.runner.run(["umount", point], check=False, timeout=60)

    def _remove_rootfs(self, tmp: Path) -> None:
        """Delete the scratch folder, but never through a mount point: rmtree would follow it
        into /proc, or into the host's /dev if a bind mount were left."""
        self._release_mounts(tmp)
        left = mounts_below(tmp, Path("/proc/self/mountinfo").read_text())
        if left:
            raise XtaskError(
                f"{tmp} still has mounts ({', '.join(left)}); not deleting it",
                hint="unmount them (umount PATH) and delete the folder by hand",
            )
        shutil.rmtree(tmp, ignore_errors=True)

    def base_python(self, base: str) -> str:
        """The base image's Python as "3.11": the wheels are chosen for it, not for the host's."""
        out = self.docker(
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "python3",
            base,
            "-c",
            "import sys; print('%d.%d' % sys.version_info[:2])",
        )
        return out.stdout.strip()

    # -- 2. wheels -----------------------------------------------------------------------------
    def wheel_recipe(self, python: str) -> WheelRecipe:
        deps, build = read_requirements(self.repo / "pyproject.toml")
        return WheelRecipe(
            requirements=deps, build_requirements=build, python=python, platform=sysconfig.get_platform()
        )

    def wheels(self, recipe: WheelRecipe) -> Path:
        """The cached folder with deps/ (dependencies + pip) and tools/ (to build the project's wheel)."""
        folder = self.cache / recipe.folder_name
        if folder.is_dir():
            self.progress(f"wheels: cached {folder}")
            return folder
        self.cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="wheels-", dir=self.cache) as tmp:
            part = Path(tmp) / "wheels"
            self.progress(f"wheels: downloading {len(recipe.requirements)} requirements for Python {recipe.python}")
            self.runner.run(recipe.deps_argv(self.python, part / "deps"), timeout=900)
            self.runner.run(recipe.tools_argv(self.python, part / "tools"), timeout=900)
            try:
                part.rename(folder)
            except OSError:
                if not folder.is_dir():  # a concurrent build that finished first is just as good
                    raise
        return folder

    # -- 3. image ------------------------------------------------------------------------------
    def stage(self, wheels: Path, context: Path) -> None:
        """The build context: the sources the Dockerfile copies, deps/ and the project's wheel in app/."""
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        context.mkdir(parents=True)
        for name in SOURCES:
            src = self.repo / name
            if src.is_dir():
                shutil.copytree(src, context / name, ignore=ignore)
            elif src.exists():
                shutil.copy2(src, context / name)
        shutil.copytree(wheels / "deps", context / WHEELS / "deps", copy_function=_link_or_copy)
        app = self._app_wheel(wheels, context)
        shutil.copytree(app, context / WHEELS / "app", copy_function=_link_or_copy)

    def _app_wheel(self, wheels: Path, context: Path) -> Path:
        """A folder with the project's wheel for the staged sources: cached by their digest, since
        building it (an isolated build environment) costs more than the rest of a warm build."""
        cache = self.cache / "app"
        folder = cache / f"{wheels.name}-{source_digest(context)[:16]}"
        if folder.is_dir():
            folder.touch()
            return folder
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="app-", dir=cache) as tmp:
            # Built from its own copy: pip builds in the source tree and leaves build/ behind.
            # With fixed timestamps the same sources give the same bytes, so a rebuilt wheel
            # still hits Docker's layer cache.
            source = Path(tmp) / "source"
            for name in SOURCES:
                if (context / name).is_dir():
                    shutil.copytree(context / name, source / name)
                elif (context / name).exists():
                    source.mkdir(exist_ok=True)
                    shutil.copy2(context / name, source / name)
            part = Path(tmp) / "wheel"
            self.runner.run(
                app_wheel_argv(self.python, source=source, tools=wheels / "tools", dest=part),
                env={**os.environ, "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH},
                timeout=600,
            )
            try:
                part.rename(folder)
            except OSError:
                if not folder.is_dir():
                    raise
        # Keep the newest few: one per source change would otherwise pile up.
        kept = sorted(
            (p for p in cache.iterdir() if p.is_dir() and not p.name.startswith("app-")),
            key=lambda p: p.stat().st_mtime,
        )
        for old in kept[:-APP_WHEELS_KEPT]:
            shutil.rmtree(old, ignore_errors=True)
        return folder

    def _labelled(self, tag: str) -> str | None:
        """The inputs digest the image ``tag`` was built from (None: no such image, or no label)."""
        res = self.docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{INPUTS_LABEL}"}}}}', tag,
                          check=False, timeout=60)  # fmt: skip
        value = res.stdout.strip() if res.returncode == 0 else ""
        return value if value and value != "<no value>" else None

    def build(self, tag: str = IMAGE) -> BuildResult:
        problems = self.engine_problems()
        if problems:
            raise RuntimeUnavailable(
                "cannot build the image: " + "; ".join(problems),
                hint="start a Docker engine (e.g. `systemctl start docker`) or point DOCKER_HOST at one"
                if self.docker.cli == "docker"
                else "install podman (apt-get install podman) and check that `podman info` works",
            )
        tag = self.docker.qualified(tag)
        seconds: dict[str, float] = {}
        start = time.monotonic()
        base = self.base()
        seconds["base"] = time.monotonic() - start
        mark = time.monotonic()
        wheels = self.wheels(self.wheel_recipe(self.base_python(base)))
        seconds["wheels"] = time.monotonic() - mark
        mark = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="agn-image-") as tmp:
            context = Path(tmp) / "context"
            self.stage(wheels, context)
            inputs = digest_of(
                [base, source_digest(context, (*SOURCES, WHEELS)), (self.repo / "Dockerfile").read_text()]
            )[:32]
            seconds["stage"] = time.monotonic() - mark
            mark = time.monotonic()
            if self._labelled(tag) == inputs:
                self.progress(f"{tag}: built already from the same base, wheels and sources")
            else:
                self.progress(f"{self.docker.cli} build {tag} (base {base}, no network)")
                self.docker.run_argv(
                    docker_build_argv(
                        dockerfile=self.repo / "Dockerfile",
                        context=context,
                        base=base,
                        tag=tag,
                        cli=self.docker.cli,
                        inputs=inputs,
                    ),
                    timeout=1800,
                )
        seconds[f"{self.docker.cli} build"] = time.monotonic() - mark
        seconds["total"] = time.monotonic() - start
        image = self.docker.inspect(tag, kind="image")
        return BuildResult(tag=tag, image_id=image["Id"], size=int(image["Size"]), base=base, seconds=seconds)


def _image_ref(value: str) -> str:
    if not value or any(c.isspace() for c in value):
        raise argparse.ArgumentTypeError(f"not an image reference: {value!r}")
    return value


def main(
    argv: Sequence[str] | None = None,
    *,
    environ: Mapping[str, str] = os.environ,
    which: Callable[[str], str | None] = shutil.which,
    runner: CmdRunner | None = None,
) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/build-image.sh",
        description="Build the agn:dev image with no container registry: a debootstrapped Debian base "
        "(cached by a digest of its recipe) and wheels built on this host.",
    )
    parser.add_argument("--tag", default=IMAGE, type=_image_ref, help=f"image to tag (default {IMAGE})")
    parser.add_argument(
        "--mirror", default=DEFAULT_MIRROR, help=f"Debian mirror for debootstrap (default {DEFAULT_MIRROR})"
    )
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help="container engine to build in (default: the one kind would use: KIND_EXPERIMENTAL_PROVIDER, "
        "else Docker if it answers, else Podman); DOCKER_HOST is honoured for docker",
    )
    args = parser.parse_args(argv)
    runner = runner or RealCmdRunner()
    cli = args.engine
    if cli is None:
        cli, reasons = detect_engine(environ, which, runner)
        if cli is None:
            print(f"error: no container engine to build in: {'; '.join(reasons)}", file=sys.stderr)
            return 1
    builder = ImageBuilder(
        Engine.from_environ(cli, environ, runner=runner), runner=runner, mirror=args.mirror, which=which
    )
    try:
        result = builder.build(args.tag)
    except CommandFailed as exc:
        print(f"error: {exc}\n{exc.output.strip()}", file=sys.stderr)
        return 1
    except XtaskError as exc:
        print(f"error: {exc}" + (f"\nhint: {exc.hint}" if exc.hint else ""), file=sys.stderr)
        return 1
    times = ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items())
    print(f"{result.tag}: {result.image_id} ({result.size / 1e6:.0f} MB), base {result.base}; {times}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
