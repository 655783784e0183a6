"""A Docker engine for the container suite, and the containers it runs.

:meth:`DockerEngine.start` uses the engine the docker CLI already reaches; where none runs it
starts a ``dockerd`` of its own with :class:`xtask.procs.Supervisor` (tracked by pid file,
stopped by pid: TERM, then KILL), with its own socket, data root, exec root, pid file and an
empty daemon config under the given folder, so it shares nothing with a system engine. It
needs no bridge and no iptables: the suite's containers use the host network. Where dockerd
is missing or cannot start (not root, no overlay filesystem, ...), :class:`EngineUnavailable`
carries the reason and the suite skips with it.

Every container goes through :meth:`DockerEngine.run`, which records its id, and
:meth:`DockerEngine.remove_all` removes each of them by id (``docker rm -f``), whatever
happened in between.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from xtask.images.agn_image import Docker
from xtask.images.recipes import mounts_below
from xtask.procs import CommandResult, Supervisor, is_alive, log_tail

DOCKERD_CANDIDATES = ("dockerd", "/usr/sbin/dockerd", "/usr/bin/dockerd")


class EngineUnavailable(Exception):
    """No Docker engine can be used here; the message says why."""


def _find_dockerd() -> str | None:
    for candidate in DOCKERD_CANDIDATES:
        found = shutil.which(candidate)
        if found:
            return found
    return None


class DockerEngine:
    def __init__(self, docker: Docker, *, supervisor: Supervisor | None = None, workdir: Path | None = None) -> None:
        self.docker = docker
        self.supervisor = supervisor  # set when this engine is ours to stop
        self.workdir = workdir
        self.containers: list[str] = []

    @property
    def own(self) -> bool:
        return self.supervisor is not None

    @classmethod
    def start(cls, workdir: Path, *, timeout: float = 60.0) -> DockerEngine:
        if shutil.which("docker") is None:
            raise EngineUnavailable("the docker CLI is not on PATH")
        existing = Docker()
        if existing("info", "--format", "{{.ServerVersion}}", check=False, timeout=30).returncode == 0:
            return cls(existing)
        dockerd = _find_dockerd()
        if dockerd is None:
            raise EngineUnavailable("no Docker engine runs and dockerd is not installed (apt-get install docker.io)")
        if os.geteuid() != 0:
            raise EngineUnavailable("no Docker engine runs and starting dockerd needs root")
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "daemon.json"
        config.write_text("{}\n")
        socket = workdir / "docker.sock"
        argv = [
            dockerd,
            "--config-file",
            str(config),
            "--host",
            f"unix://{socket}",
            "--data-root",
            str(workdir / "data"),
            "--exec-root",
            str(workdir / "exec"),
            "--pidfile",
            str(workdir / "dockerd.pid"),
            "--bridge",
            "none",
            "--iptables=false",
            "--ip-masq=false",
        ]
        supervisor = Supervisor(workdir / "run", workdir / "logs")
        record = supervisor.start("dockerd", argv)
        engine = cls(Docker(f"unix://{socket}"), supervisor=supervisor, workdir=workdir)
        deadline = time.monotonic() + timeout
        while True:
            # A condition wait, not a sleep: answered, exited, or out of time.
            if socket.exists() and engine.docker("info", "--format", "{{.ServerVersion}}", check=False).returncode == 0:
                return engine
            if not is_alive(record) or time.monotonic() > deadline:
                tail = log_tail(record.log, lines=15)
                supervisor.stop("dockerd")
                state = (
                    "exited"
                    if supervisor.exit_codes.get("dockerd") is not None
                    else f"did not answer in {timeout:.0f} s"
                )
                raise EngineUnavailable(f"dockerd {state}; its log ends:\n{tail}")
            time.sleep(0.2)

    def __call__(self, *args: str, timeout: float = 120, check: bool = True) -> CommandResult:
        return self.docker(*args, timeout=timeout, check=check)

    def run(self, argv: list[str]) -> str:
        """``docker run --detach ...``; returns the container id (recorded for :meth:`remove_all`)."""
        if argv[:2] != ["run", "--detach"]:
            raise ValueError(f"not a detached docker run: {argv[:2]}")
        container = self(*argv, timeout=120).stdout.strip()
        self.containers.append(container)
        return container

    def inspect(self, container: str) -> dict:
        return json.loads(self("container", "inspect", container).stdout)[0]

    def logs(self, container: str, *, lines: int = 40) -> str:
        res = self("logs", "--tail", str(lines), container, check=False)
        return (res.stdout + res.stderr).strip()

    def remove_all(self) -> list[str]:
        """Remove every container this engine ran, by id; returns the errors (empty when all went)."""
        errors = []
        while self.containers:
            container = self.containers.pop()
            res = self("rm", "--force", container, check=False, timeout=60)
            if res.returncode != 0 and "No such container" not in res.stderr:
                errors.append(f"{container}: {res.stderr.strip()}")
        return errors

    def stop(self) -> list[str]:
        """Remove the containers, then stop our dockerd by pid (never a system engine)."""
        errors = self.remove_all()
        if self.supervisor is not None and self.workdir is not None:
            self.supervisor.stop("dockerd", grace=30)
            # dockerd 20.10 leaves its exec root's network namespace mounted when it stops.
            for point in mounts_below(self.workdir, Path("/proc/self/mountinfo").read_text()):
                self.docker.runner.run(["umount", point], check=False, timeout=60)
        return errors
