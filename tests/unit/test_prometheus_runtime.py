"""The env's Prometheus on the local runtime (xtask/runtime/prometheus.py): its config, its
targets, its command line, and what `env up` and `env status` say when it is not installed.
tests/e2e/test_prometheus.py runs the real one and checks this config with promtool."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from xtask.runtime import prometheus
from xtask.runtime.local import LocalEnv

TARGETS = prometheus.ScrapeTargets(
    operator="127.0.0.1:1001",
    gateways={"consumer-b": "127.0.0.1:1003", "consumer-a": "127.0.0.1:1002"},
    providers={"provider-one": "127.0.0.1:1004"},
)


def test_config_scrapes_each_job_from_its_target_file_every_second(tmp_path: Path):
    config = yaml.safe_load(prometheus.render_config(tmp_path))
    assert config["global"] == {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
    jobs = {job["job_name"]: job["file_sd_configs"][0]["files"] for job in config["scrape_configs"]}
    assert jobs == {
        "agn-operator": [str(tmp_path / "targets" / "operator.json")],
        "agn-gateway": [str(tmp_path / "targets" / "gateways.json")],
        "agn-provider": [str(tmp_path / "targets" / "providers.json")],
    }


def test_targets_are_labelled_by_component_and_name(tmp_path: Path):
    prometheus.write_files(tmp_path, TARGETS)
    read = {f: json.loads((tmp_path / "targets" / f).read_text()) for f in prometheus.JOBS.values()}
    assert read["operator.json"] == [{"targets": ["127.0.0.1:1001"], "labels": {"component": "operator"}}]
    assert [g["labels"]["consumer"] for g in read["gateways.json"]] == ["consumer-a", "consumer-b"]
    assert read["providers.json"] == [
        {"targets": ["127.0.0.1:1004"], "labels": {"component": "provider", "provider": "provider-one"}}
    ]
    assert TARGETS.count() == 4
    # No target yet (an env whose operator has no port): empty files, which Prometheus accepts.
    prometheus.write_files(tmp_path, prometheus.ScrapeTargets())
    assert json.loads((tmp_path / "targets" / "operator.json").read_text()) == []


def test_it_listens_on_loopback_and_keeps_its_data_in_the_folder(tmp_path: Path):
    argv = prometheus.argv("/usr/bin/prometheus", tmp_path, port=9999)
    assert "--web.listen-address=127.0.0.1:9999" in argv
    assert f"--storage.tsdb.path={tmp_path / 'data'}" in argv
    assert f"--config.file={tmp_path / 'prometheus.yml'}" in argv


def test_not_installed_env_up_says_so_and_status_says_why(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("AGN_XTASK_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    env = LocalEnv("example")
    step = env._prometheus_step()
    assert step.title == f"Prometheus: not started, {prometheus.NOT_INSTALLED}"
    assert step.undo is None
    assert env.prometheus() == {"url": None, "running": False, "detail": f"not started: {prometheus.NOT_INSTALLED}"}


def test_runtimes_without_prometheus_say_they_do_not_start_one():
    from xtask.runtime.kind import KindEnv

    assert KindEnv("example").prometheus() == {
        "url": None,
        "running": False,
        "detail": "the kind runtime does not start Prometheus",
    }
