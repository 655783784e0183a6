"""The env's own Prometheus on the local runtime: Debian's ``prometheus`` binary, when installed,
scraping the env's operator, consumer gateways and (one process each) fake providers.

Everything lives in ``<state>/prometheus/``: ``prometheus.yml`` (rendered here), the scrape
targets as file-based service discovery (``targets/*.json``, rewritten by every ``env up`` and
picked up by the running Prometheus without a restart) and the TSDB (``data/``), so
``env down`` removes it all with the env's folder. It listens on 127.0.0.1 only.

The rendering is pure; :func:`write_files` writes the files and :func:`targets_up` reads the
running server's ``/api/v1/targets``. Starting and stopping the process is the runtime's
(:mod:`xtask.runtime.local_prometheus`, through :class:`xtask.procs.Supervisor`); nothing here does.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from agn.outputfile import write_atomic
from xtask.record import Record

NAME = "prometheus"  # the process name: pid file, log file, port key, status component
BINARY = "prometheus"
# Short, so a soak of a few seconds already has several samples of every counter.
SCRAPE_INTERVAL_SECONDS = 1
# The jobs, each with its own target file: job label -> file name under targets/.
JOBS = {"agn-operator": "operator.json", "agn-gateway": "gateways.json", "agn-provider": "providers.json"}
RETENTION = "1d"
NOT_INSTALLED = (
    "prometheus is not installed (Debian: `apt-get install prometheus`, or scripts/install-prometheus.sh as root)"
)


def binary() -> str | None:
    """The ``prometheus`` binary on PATH, or None."""
    return shutil.which(BINARY)


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class ScrapeTargets(Record):
    """What the env's Prometheus scrapes: ``host:port`` of each process serving ``/metrics``."""

    operator: str | None = None
    gateways: dict[str, str] = dataclasses.field(default_factory=dict)  # consumer -> host:port
    providers: dict[str, str] = dataclasses.field(default_factory=dict)  # provider -> host:port (own process)

    def groups(self) -> dict[str, list[dict]]:
        """File-based service discovery content per target file: one group per target, labelled
        ``component`` and (gateways) ``consumer`` or (fake providers) ``provider``. None of the
        scraped metrics has labels of those names, so nothing is renamed to ``exported_*``."""
        operator = [{"targets": [self.operator], "labels": {"component": "operator"}}] if self.operator else []
        gateways = [
            {"targets": [addr], "labels": {"component": "gateway", "consumer": consumer}}
            for consumer, addr in sorted(self.gateways.items())
        ]
        providers = [
            {"targets": [addr], "labels": {"component": "provider", "provider": provider}}
            for provider, addr in sorted(self.providers.items())
        ]
        files = list(JOBS.values())
        return {files[0]: operator, files[1]: gateways, files[2]: providers}

    def count(self) -> int:
        return (1 if self.operator else 0) + len(self.gateways) + len(self.providers)


def render_config(folder: Path) -> str:
    """``prometheus.yml``: every job scrapes every :data:`SCRAPE_INTERVAL_SECONDS` from its
    target file under ``<folder>/targets/``."""
    interval = f"{SCRAPE_INTERVAL_SECONDS}s"
    config = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval, "evaluation_interval": interval},
        "scrape_configs": [
            {
                "job_name": job,
                # Prometheus watches the files; the refresh is the fallback should a change be missed.
                "file_sd_configs": [{"files": [str(folder / "targets" / file)], "refresh_interval": "5s"}],
            }
            for job, file in JOBS.items()
        ],
    }
    return "# Written by `xtask env up` (xtask/runtime/prometheus.py); rewritten by every env up.\n" + yaml.safe_dump(
        config, sort_keys=False
    )


def write_files(folder: Path, targets: ScrapeTargets) -> None:
    """The config and the target files, each written whole and renamed into place."""
    (folder / "targets").mkdir(parents=True, exist_ok=True)
    (folder / "data").mkdir(exist_ok=True)
    write_atomic(folder / "prometheus.yml", render_config(folder))
    for file, groups in targets.groups().items():
        write_atomic(folder / "targets" / file, json.dumps(groups, indent=2))


def argv(prometheus: str, folder: Path, *, port: int) -> list[str]:
    """The command line: this folder's config and storage, loopback only."""
    return [
        prometheus,
        f"--config.file={folder / 'prometheus.yml'}",
        f"--storage.tsdb.path={folder / 'data'}",
        f"--storage.tsdb.retention.time={RETENTION}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]


def ready_url(url: str) -> str:
    return f"{url}/-/ready"


def targets_up(url: str, *, timeout: float = 2.0) -> tuple[int, int] | None:
    """(targets up, active targets) as the server at ``url`` reports them; None if it does not answer."""
    try:
        with urllib.request.urlopen(f"{url}/api/v1/targets?state=active", timeout=timeout) as resp:
            body = json.loads(resp.read())
        active = body["data"]["activeTargets"]
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
        return None
    return sum(1 for t in active if t.get("health") == "up"), len(active)
