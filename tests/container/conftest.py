"""Session fixtures of the container suite: a Docker engine and the agn:dev image built in it.

The engine is the one already running or a dockerd of the suite's own (:mod:`dockerengine`);
the image is built the offline way (:mod:`xtask.images.agn_image`), which needs no registry. Where no
engine can run, or the base image cannot be made here (no debootstrap, not root), every test
of the suite skips with the reason.
"""

from __future__ import annotations

import sys

import pytest

from dockerengine import DockerEngine, EngineUnavailable
from xtask.errors import RuntimeUnavailable
from xtask.images.agn_image import BuildResult, ImageBuilder
from xtask.manifests import IMAGE


@pytest.fixture(scope="session")
def docker_engine(tmp_path_factory: pytest.TempPathFactory):
    try:
        engine = DockerEngine.start(tmp_path_factory.mktemp("dockerd"))
    except EngineUnavailable as exc:
        pytest.skip(f"the container suite needs a Docker engine: {exc}")
    try:
        yield engine
    finally:
        errors = engine.stop()
        assert not errors, f"containers left behind: {errors}"


@pytest.fixture(scope="session")
def agn_image(docker_engine: DockerEngine) -> BuildResult:
    """``agn:dev`` (the image the rendered manifests name), built offline in the suite's engine."""
    builder = ImageBuilder(docker_engine.docker, progress=lambda msg: print(f"build-image: {msg}", file=sys.stderr))
    try:
        return builder.build(IMAGE)
    except RuntimeUnavailable as exc:
        pytest.skip(f"the container suite cannot build its image here: {exc}")
