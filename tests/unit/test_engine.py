"""The container engine kind runs nodes on (xtask/engine.py): chosen as kind chooses, but only
an engine that answers; and image names as each engine lists them. The fake runner answers
``<cli> info``; ``which`` says what is on PATH."""

from __future__ import annotations

import pytest

from fakes import FakeCmdRunner
from xtask.engine import answers, detect_engine, qualified

DOCKER_INFO = ["docker", "info", "--format", "{{.ServerVersion}}"]
PODMAN_INFO = ["podman", "info", "--format", "{{.Version.Version}}"]


def on_path(*tools: str):
    return lambda tool: f"/usr/bin/{tool}" if tool in tools else None


def runner(*, down: tuple[str, ...] = ()) -> FakeCmdRunner:
    """``<cli> info`` answers for every engine but those in ``down``."""
    handlers = {
        ("docker", "info"): lambda argv: (
            (1, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock")
            if "docker" in down
            else (0, "27.3.1\n")
        ),
        ("podman", "info"): lambda argv: (
            (125, "Error: cannot connect to Podman\n") if "podman" in down else (0, "5.4.2\n")
        ),
    }
    return FakeCmdRunner(handlers=handlers)


def detect(environ=None, *, tools=("docker", "podman"), down=()):
    r = runner(down=down)
    return detect_engine(environ=environ or {}, which=on_path(*tools), runner=r), r.calls


# -- KIND_EXPERIMENTAL_PROVIDER ---------------------------------------------------------------------
@pytest.mark.parametrize("wanted, info", [("podman", PODMAN_INFO), ("docker", DOCKER_INFO)])
def test_the_provider_variable_chooses_the_engine(wanted, info):
    (cli, reasons), calls = detect({"KIND_EXPERIMENTAL_PROVIDER": wanted})
    assert (cli, reasons) == (wanted, [])
    assert calls == [info]  # asked, and no other engine was


def test_the_provider_variable_wins_over_a_docker_that_answers():
    (cli, _), calls = detect({"KIND_EXPERIMENTAL_PROVIDER": " podman "})
    assert cli == "podman"
    assert calls == [PODMAN_INFO]


def test_an_unsupported_provider_is_named_and_nothing_else_is_tried():
    (cli, reasons), calls = detect({"KIND_EXPERIMENTAL_PROVIDER": "nerdctl"})
    assert cli is None
    assert reasons == ["KIND_EXPERIMENTAL_PROVIDER='nerdctl' is not supported here (use docker or podman)"]
    assert calls == []


def test_a_provider_not_on_path_is_named():
    (cli, reasons), calls = detect({"KIND_EXPERIMENTAL_PROVIDER": "podman"}, tools=("docker",))
    assert cli is None
    assert reasons == ["KIND_EXPERIMENTAL_PROVIDER=podman, and `podman` is not on PATH"]
    assert calls == []  # docker answering does not override the choice


def test_a_provider_that_does_not_answer_is_named_with_its_error():
    (cli, reasons), _ = detect({"KIND_EXPERIMENTAL_PROVIDER": "podman"}, down=("podman",))
    assert cli is None
    assert reasons == ["KIND_EXPERIMENTAL_PROVIDER=podman: `podman info` fails: Error: cannot connect to Podman"]


def test_an_empty_provider_variable_is_not_a_choice():
    (cli, _), _ = detect({"KIND_EXPERIMENTAL_PROVIDER": "  "})
    assert cli == "docker"


# -- kind's order: docker, then podman, each only when it answers ------------------------------------
def test_docker_that_answers_is_chosen_first():
    (cli, reasons), calls = detect()
    assert (cli, reasons) == ("docker", [])
    assert calls == [DOCKER_INFO]


def test_a_docker_cli_without_a_daemon_falls_back_to_podman():
    (cli, reasons), calls = detect(down=("docker",))
    assert (cli, reasons) == ("podman", [])
    assert calls == [DOCKER_INFO, PODMAN_INFO]


def test_podman_alone_is_chosen():
    (cli, _), calls = detect(tools=("podman",))
    assert cli == "podman"
    assert calls == [PODMAN_INFO]


def test_neither_engine_gives_every_reason():
    (cli, reasons), _ = detect(tools=())
    assert cli is None
    assert reasons == ["`docker` is not on PATH", "`podman` is not on PATH"]

    (cli, reasons), _ = detect(down=("docker", "podman"))
    assert cli is None
    assert reasons == [
        "`docker info` fails: Cannot connect to the Docker daemon at unix:///var/run/docker.sock",
        "`podman info` fails: Error: cannot connect to Podman",
    ]


def test_answers_names_the_exit_code_when_the_engine_says_nothing():
    silent = FakeCmdRunner(handlers={("docker", "info"): lambda argv: (3, "")})
    assert answers("docker", silent) == "`docker info` fails: exit 3"
    assert answers("podman", silent) is None


# -- image names as each engine lists them ----------------------------------------------------------
@pytest.mark.parametrize(
    "ref, cli, expected",
    [
        ("agn:dev", "docker", "agn:dev"),
        ("agn:dev", "podman", "localhost/agn:dev"),
        ("agn/kind-node:v1", "podman", "localhost/agn/kind-node:v1"),  # a path, not a registry
        ("localhost/agn:dev", "podman", "localhost/agn:dev"),
        ("docker.io/kindest/node:v1.35.0", "podman", "docker.io/kindest/node:v1.35.0"),
        ("registry.k8s.io/pause:3.10", "podman", "registry.k8s.io/pause:3.10"),
        ("127.0.0.1:5000/agn:dev", "podman", "127.0.0.1:5000/agn:dev"),
        ("myhost:5000/agn", "podman", "myhost:5000/agn"),
        ("kindest/node:v1.35.0", "docker", "kindest/node:v1.35.0"),
    ],
)
def test_qualified(ref, cli, expected):
    assert qualified(ref, cli) == expected
