"""Choosing the container engine as kind does, and the names Podman gives images (xtask.engine),
with the fake runner: no engine runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from fakes import FakeCmdRunner
from xtask.engine import Engine, detect_engine, kind_environ, qualified
from xtask.errors import CommandFailed
from xtask.images.agn_image import Docker

ON_PATH = {"docker": "/usr/bin/docker", "podman": "/usr/bin/podman"}


def _which(*present: str):
    return lambda name: ON_PATH.get(name) if name in present else None


def _runner(*answering: str) -> FakeCmdRunner:
    """Engines whose ``info`` answers; the others fail as a CLI with no engine behind it does."""
    failures = {
        "docker": "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?",
        "podman": "Error: cannot open storage",
    }
    return FakeCmdRunner(
        handlers={
            (cli, "info"): (lambda argv, cli=cli: (0, "1.0\n") if cli in answering else (1, failures[cli]))
            for cli in ("docker", "podman")
        }
    )


def _infos(runner: FakeCmdRunner) -> list[str]:
    return [c[0] for c in runner.calls if c[1:2] == ["info"]]


def test_docker_when_it_answers_without_asking_podman():
    runner = _runner("docker", "podman")
    assert detect_engine({}, _which("docker", "podman"), runner) == ("docker", [])
    assert _infos(runner) == ["docker"]


def test_podman_when_the_docker_cli_has_no_engine_behind_it():
    # kind itself would take Docker here (its CLI prints "Docker version") and fail.
    runner = _runner("podman")
    assert detect_engine({}, _which("docker", "podman"), runner) == ("podman", [])
    assert _infos(runner) == ["docker", "podman"]


def test_podman_when_docker_is_not_installed():
    runner = _runner("podman")
    assert detect_engine({}, _which("podman"), runner) == ("podman", [])
    assert _infos(runner) == ["podman"]


def test_no_engine_gives_a_reason_for_each():
    cli, reasons = detect_engine({}, _which("docker"), _runner())
    assert cli is None
    assert "; ".join(reasons) == (
        "`docker info` fails: Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
        "Is the docker daemon running?; `podman` is not on PATH"
    )


def test_an_info_that_times_out_is_a_reason_not_a_crash():
    def hang(argv: list[str]) -> tuple[int, str]:
        raise CommandFailed(argv, 124, "timed out after 30.0s")

    runner = FakeCmdRunner(handlers={("docker", "info"): hang, ("podman", "info"): lambda argv: (0, "4.3.1\n")})
    assert detect_engine({}, _which("docker", "podman"), runner) == ("podman", [])
    cli, reasons = detect_engine({}, _which("docker"), runner)
    assert (cli, reasons[0]) == (None, "`docker info` fails: timed out after 30.0s")


@pytest.mark.parametrize("cli", ["docker", "podman"])
def test_the_kind_variable_decides_and_is_not_second_guessed(cli):
    runner = _runner("docker", "podman")
    assert detect_engine({"KIND_EXPERIMENTAL_PROVIDER": cli}, _which("docker", "podman"), runner) == (cli, [])
    assert _infos(runner) == [cli]
    # The engine it names does not answer: no engine, even though the other one would.
    other = "podman" if cli == "docker" else "docker"
    runner = _runner(other)
    chosen, reasons = detect_engine({"KIND_EXPERIMENTAL_PROVIDER": cli}, _which("docker", "podman"), runner)
    assert chosen is None and reasons[0].startswith(f"KIND_EXPERIMENTAL_PROVIDER={cli}, but `{cli} info` fails: ")
    assert _infos(runner) == [cli]
    chosen, reasons = detect_engine({"KIND_EXPERIMENTAL_PROVIDER": cli}, _which(other), _runner(other))
    assert (chosen, reasons) == (None, [f"KIND_EXPERIMENTAL_PROVIDER={cli}, but `{cli}` is not on PATH"])


@pytest.mark.parametrize("value", ["nerdctl", "finch", "nerdctl.lima"])
def test_nerdctl_is_refused_by_name(value):
    runner = _runner("docker", "podman")
    cli, reasons = detect_engine({"KIND_EXPERIMENTAL_PROVIDER": value}, _which("docker", "podman"), runner)
    assert (cli, reasons) == (
        None,
        [f"KIND_EXPERIMENTAL_PROVIDER={value}: AGN xtask drives kind over docker or podman only"],
    )
    assert runner.calls == []


def test_an_unknown_kind_variable_is_refused_not_ignored():
    # kind ignores a value it does not know (and so would run on Docker): a typo must not.
    runner = _runner("docker", "podman")
    cli, reasons = detect_engine({"KIND_EXPERIMENTAL_PROVIDER": "podmn"}, _which("docker", "podman"), runner)
    assert cli is None and reasons == [
        "KIND_EXPERIMENTAL_PROVIDER='podmn' is not an engine kind knows (use docker or podman)"
    ]
    assert runner.calls == []
    # Empty is unset, as for kind.
    assert detect_engine({"KIND_EXPERIMENTAL_PROVIDER": ""}, _which("docker", "podman"), runner) == ("docker", [])


def test_kind_is_told_the_chosen_engine():
    assert kind_environ({"PATH": "/bin"}, "podman") == {"PATH": "/bin", "KIND_EXPERIMENTAL_PROVIDER": "podman"}
    assert kind_environ({"KIND_EXPERIMENTAL_PROVIDER": "docker"}, "podman")["KIND_EXPERIMENTAL_PROVIDER"] == "podman"


@pytest.mark.parametrize(
    ("ref", "podman"),
    [
        ("agn:dev", "localhost/agn:dev"),
        ("agn", "localhost/agn"),
        ("agn/kind-node:v1", "localhost/agn/kind-node:v1"),  # a path, not a domain
        ("agn@sha256:" + "a" * 64, "localhost/agn@sha256:" + "a" * 64),
        ("localhost/agn:dev", "localhost/agn:dev"),
        ("localhost:5000/agn:dev", "localhost:5000/agn:dev"),
        ("registry.example/x:1", "registry.example/x:1"),
        ("docker.io/library/python:3.11", "docker.io/library/python:3.11"),
    ],
)
def test_podman_lists_a_name_without_a_domain_under_localhost(ref, podman):
    assert qualified(ref, "podman") == podman
    assert qualified(ref, "docker") == ref
    assert qualified(podman, "podman") == podman  # idempotent


@pytest.mark.parametrize(("ref", "cli"), [("", "podman"), (" agn:dev", "docker"), ("agn:dev", "nerdctl")])
def test_qualified_refuses_bad_input_by_name(ref, cli):
    with pytest.raises(ValueError, match=repr(ref) if cli != "nerdctl" else "'nerdctl'"):
        qualified(ref, cli)


def test_save_writes_a_docker_archive_by_way_of_a_part_file(tmp_path):
    def save(argv: list[str]) -> tuple[int, str]:
        Path(argv[argv.index("-o") + 1]).write_bytes(b"archive")
        return 0, ""

    for cli, argv in (
        ("docker", ["docker", "save", "-o"]),
        ("podman", ["podman", "save", "--format", "docker-archive", "-o"]),
    ):
        runner = FakeCmdRunner(handlers={(cli, "save"): save})
        out = tmp_path / f"{cli}.tar"
        assert Engine(cli, runner=runner).save(qualified("agn:dev", cli), out) == out
        (call,) = runner.calls
        assert call[: len(argv)] == argv and call[-1] == qualified("agn:dev", cli)
        assert Path(call[len(argv)]).parent == tmp_path and call[len(argv)] != str(out)
        assert out.read_bytes() == b"archive" and not list(tmp_path.glob(".*.part"))


def test_a_failed_save_leaves_no_archive(tmp_path):
    def half(argv: list[str]) -> tuple[int, str]:
        Path(argv[argv.index("-o") + 1]).write_bytes(b"half")
        return 125, "Error: no space left on device"

    out = tmp_path / "agn.tar"
    with pytest.raises(CommandFailed):
        Engine("podman", runner=FakeCmdRunner(handlers={("podman", "save"): half})).save("localhost/agn:dev", out)
    assert list(tmp_path.iterdir()) == []


def test_an_engine_runs_its_own_cli_and_refuses_another():
    runner = FakeCmdRunner()
    engine = Engine("podman", runner=runner)
    engine("image", "ls")
    engine.run_argv(["podman", "load", "-i", "x.tar"], timeout=60)
    assert runner.calls == [["podman", "image", "ls"], ["podman", "load", "-i", "x.tar"]]
    with pytest.raises(ValueError, match="docker load is not a podman command"):
        engine.run_argv(["docker", "load", "-i", "x.tar"], timeout=60)
    with pytest.raises(ValueError, match="applies to docker only"):
        Engine("podman", host="unix:///run/docker.sock")
    with pytest.raises(ValueError, match="'nerdctl'"):
        Engine("nerdctl")


def test_docker_host_is_honoured_for_docker_only():
    environ = {"DOCKER_HOST": "tcp://127.0.0.1:2375"}
    assert Engine.from_environ("docker", environ).env["DOCKER_HOST"] == "tcp://127.0.0.1:2375"
    assert Engine.from_environ("podman", environ).host is None
    # The name the code had before Podman still means the same engine.
    old = Docker("unix:///d.sock")
    assert (old.cli, old.host) == ("docker", "unix:///d.sock") and isinstance(old, Engine)
    assert Docker(cli="podman").cli == "podman"
