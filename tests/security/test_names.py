"""Names at the edge: traversal through env names, names that are not names, and the state
folder only ever removed when it is the env's own.

Every test runs the real CLI as a subprocess, with its own state folder (``AGN_XTASK_HOME``),
kubeconfig and journal folder, and asserts the exact exit code, a message naming the bad input,
no traceback, and that nothing outside was changed: a victim folder survives with its content,
other envs' state survives, no file is written. The rows that need an API server use the
session's real control plane, each in its own namespace.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agn.kube import PROVIDERS
from envcli import REPO, Cli
from reportschema import parse_report
from xtask.reports import PROVIDER_DRAIN

pytestmark = pytest.mark.e2e

API = "agn.dev/v1alpha1"


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def clean(proc: subprocess.CompletedProcess) -> str:
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output, output
    return output


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A state folder holding the state of another env (``other``) that nothing may touch, and a
    victim folder outside it that ``../../victim`` from ``<home>/state/envs`` reaches."""
    other = tmp_path / "state" / "envs" / "other"
    other.mkdir(parents=True)
    (other / ".agn-xtask-env").write_text("other\n")
    (other / "env.json").write_text(
        json.dumps(
            {"env": "other", "runtime": "local", "context": "local-other", "kubeconfig": "/none", "namespace": "ns"}
        )
    )
    (other / "certs").mkdir()
    (other / "certs" / "ca.key").write_text("secret")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    return tmp_path


BAD_ENV_NAMES = {
    "traversal": "../../victim",
    "dot": ".",
    "empty": "",
    "dot-dot": "..",
    "slash": "a/b",
    "too-long": "a" * 300,
    "trailing-newline": "example\n",
    "upper-case": "Example",
}


@pytest.mark.parametrize("command", ["down", "status"])
@pytest.mark.parametrize("name", list(BAD_ENV_NAMES.values()), ids=list(BAD_ENV_NAMES))
def test_env_names_that_are_not_names_are_usage_errors_and_touch_nothing(home: Path, command: str, name: str):
    before = files(home)
    proc = Cli(home)("env", command, "--env", name)
    output = clean(proc)
    assert proc.returncode == 2, output
    assert "Invalid value for '--env'" in output and "is not a valid environment name" in output, output
    assert repr(name)[:40] in output  # the value is named (escaped, shortened when long)
    assert files(home) == before  # the victim, the other env's state: all still there, unchanged


def test_env_up_with_a_bad_name_is_a_usage_error(home: Path):
    proc = Cli(home)("env", "up", "--runtime", "local", "--env", "../../victim")
    assert proc.returncode == 2, clean(proc)
    assert "'../../victim' is not a valid environment name" in clean(proc)
    assert (home / "victim" / "precious.txt").read_text() == "keep me"


def test_a_state_folder_without_the_marker_is_never_removed(home: Path):
    foreign = home / "state" / "envs" / "example"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not xtask's")
    before = files(home)
    proc = Cli(home)("env", "down", "--env", "example")
    output = clean(proc)
    assert proc.returncode == 3, output
    assert f"{foreign} is not the state folder of environment 'example'" in output
    assert ".agn-xtask-env" in output
    assert files(home) == before


def test_a_symlinked_state_folder_is_never_followed(home: Path):
    (home / "state" / "envs" / "example").symlink_to(home / "victim")
    proc = Cli(home)("env", "down", "--env", "example")
    output = clean(proc)
    assert proc.returncode == 3, output
    assert "a symbolic link" in output
    assert (home / "victim" / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize("command", ["down", "status"])
def test_state_home_that_is_a_file_is_a_clear_error(tmp_path: Path, command: str):
    home_file = tmp_path / "home"
    home_file.write_text("a file")
    proc = Cli(tmp_path)("env", command, env={"AGN_XTASK_HOME": str(home_file)})
    output = clean(proc)
    assert proc.returncode == 1, output
    assert f"error: cannot use {home_file} as the xtask state folder (AGN_XTASK_HOME): it is not a folder" in output
    assert home_file.read_text() == "a file"


def _env_file(tmp_path: Path, change) -> dict[str, str]:
    data = yaml.safe_load((REPO / "envs" / "example.yaml").read_text())
    change(data)
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "example.yaml").write_text(yaml.safe_dump(data))
    # The kubeconfig is not even read: a name in the env file is refused first (were it read,
    # this garbage would stop the run with a kubeconfig error instead).
    (tmp_path / "kubeconfig").write_text("apiVersion: v1\nclusters: [\n")
    return {"AGN_XTASK_ENVS_DIR": str(tmp_path / "envs")}


@pytest.mark.parametrize(
    ("where", "change"),
    [
        ("namespace", lambda d: d.update(namespace="agn-example\n")),
        ("providers[0].name", lambda d: d["providers"][0].update(name="provider-one\n")),
    ],
    ids=["namespace", "provider"],
)
def test_names_with_a_trailing_newline_in_an_env_file_are_refused_at_load(tmp_path: Path, where: str, change):
    env = _env_file(tmp_path, change)
    before = files(tmp_path)
    proc = Cli(tmp_path)("env", "up", "--runtime", "local", env=env)
    output = clean(proc)
    assert proc.returncode == 1, output
    assert f"{where}: must be a DNS-1123 label" in output and "\\n'" in output, output
    assert files(tmp_path) == before  # no state, no ports.json, no log, kubeconfig untouched
    assert not (tmp_path / "state").exists()


# -- names sent to the API server ------------------------------------------------------------------------
@pytest.fixture
def world(control_plane, namespace: str, kube, tmp_path: Path):
    """A provider p-one in the test's namespace, and a kubeconfig whose context points there."""
    kube.create(
        PROVIDERS,
        namespace,
        {
            "apiVersion": API,
            "kind": "InferenceProvider",
            "metadata": {"name": "p-one"},
            "spec": {"endpoint": "http://127.0.0.1:9/p", "selectionGroup": "chat", "rank": 0},
        },
    )
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    for c in config["contexts"]:
        if c["name"] == control_plane.context:
            c["context"]["namespace"] = namespace
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    return namespace


def resource_version(kube, namespace: str, name: str) -> str:
    return kube.get(PROVIDERS, namespace, name)["metadata"]["resourceVersion"]


DRAIN = ("env", "provider-drain")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--provider", "p-one", "--namespace", "."), "Invalid value for '--namespace' / '-n': '.' is not a valid"),
        (("--provider", "p-one", "--namespace", ".."), "'..' is not a valid namespace"),
        (("--provider", "p-one%2Fstatus"), "Invalid value for '--provider': 'p-one%2Fstatus' is not a valid"),
        (("--provider", "p-one/status"), "'p-one/status' is not a valid provider name"),
        (("--provider", "p-one", "--network", "a/b", "--consumer", "c"), "'a/b' is not a valid network name"),
        (("--provider", "p-one", "--network", "n", "--consumer", ".."), "'..' is not a valid consumer name"),
    ],
    ids=["namespace-dot", "namespace-dot-dot", "provider-escaped-slash", "provider-slash", "network", "consumer"],
)
def test_names_sent_to_the_api_are_checked_first(world: str, kube, tmp_path: Path, args, message):
    before, rv = files(tmp_path), resource_version(kube, world, "p-one")
    proc = Cli(tmp_path)(*DRAIN, *args)
    output = clean(proc)
    assert proc.returncode == 2, output
    assert message in output
    assert files(tmp_path) == before and resource_version(kube, world, "p-one") == rv


def test_render_refuses_a_namespace_that_is_not_a_name(tmp_path: Path):
    proc = Cli(tmp_path)("env", "render", "--namespace", "Bad_NS")
    output = clean(proc)
    assert proc.returncode == 2, output
    assert "'Bad_NS' is not a valid namespace" in output
    assert proc.stdout == ""


def _journal(namespace: str, provider: str, *, operation: str = "op-bad", context: str = "local-tests") -> str:
    lines = [
        {
            "type": "header",
            "format": "agn.dev/drain-journal/v2",
            "operation": operation,
            "context": context,
            "namespace": namespace,
            "request": "drain",
            "reason": None,
            "startedAt": "2026-12-01T00:00:00Z",
            "plan": [
                {
                    "provider": provider,
                    "previous": None,
                    "previousAnnotations": {},
                    "resourceVersion": "1",
                    "generation": 1,
                }
            ],
        },
        {"type": "intent", "provider": provider, "resourceVersion": "1", "generation": 1},
        {"type": "done", "provider": provider, "generation": 2},
    ]
    return "".join(json.dumps(rec) + "\n" for rec in lines)


@pytest.mark.parametrize(
    ("ns", "provider", "message"),
    [
        ("..", "p-one", "header.namespace must be a DNS-1123 label"),
        ("{ns}", "p-one/status", "header.plan names provider 'p-one/status', which is not a provider name"),
        ("{ns}", "p-one%2Fstatus", "names provider 'p-one%2Fstatus', which is not a provider name"),
    ],
    ids=["namespace-dot-dot", "provider-status-subresource", "provider-escaped-slash"],
)
@pytest.mark.parametrize("dry_run", [False, True], ids=["restore", "dry-run"])
def test_journal_names_are_checked_when_it_is_read(world: str, kube, tmp_path: Path, ns, provider, message, dry_run):
    journal = tmp_path / "j.jsonl"
    journal.write_text(_journal(ns.replace("{ns}", world), provider))
    before, rv = files(tmp_path), resource_version(kube, world, "p-one")
    proc = Cli(tmp_path)("env", "drain-restore", str(journal), *(["--dry-run"] if dry_run else []))
    output = clean(proc)
    assert proc.returncode == 1, output
    assert f"{journal}: not a drain journal: line 1: " in output and message in output, output
    assert files(tmp_path) == before and resource_version(kube, world, "p-one") == rv


@pytest.mark.parametrize(
    ("operation", "context", "message"),
    [
        ("\x1b[31mop", "local-tests", "header.operation must be a token"),
        ("op with spaces", "local-tests", "header.operation must be a token"),
        ("op-bad", "local-\x1b[2Jtests", "header.context must be a printable string"),
    ],
    ids=["operation-escape", "operation-spaces", "context-escape"],
)
def test_journal_header_words_are_checked_when_it_is_read(
    world: str, kube, tmp_path: Path, operation, context, message
):
    """The operation id goes into providers' annotations and decides which drains are this
    run's; a hand-edited one is refused before any request (it used to restore, exit 5)."""
    journal = tmp_path / "j.jsonl"
    journal.write_text(_journal(world, "p-one", operation=operation, context=context))
    before, rv = files(tmp_path), resource_version(kube, world, "p-one")
    proc = Cli(tmp_path)("env", "drain-restore", str(journal))
    output = clean(proc)
    assert proc.returncode == 1, output
    assert message in output and "\x1b" not in proc.stdout + proc.stderr, output
    assert files(tmp_path) == before and resource_version(kube, world, "p-one") == rv


def test_an_empty_journal_dir_is_a_usage_error_and_writes_nothing_here(world: str, kube, tmp_path: Path):
    cwd = tmp_path / "here"
    cwd.mkdir()
    rv = resource_version(kube, world, "p-one")
    cli = Cli(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "xtask", *DRAIN, "--provider", "p-one", "--journal-dir", ""],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**cli.env, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
        timeout=120,
    )
    output = clean(proc)
    assert proc.returncode == 2, output
    assert "Invalid value for '--journal-dir'" in output
    assert list(cwd.iterdir()) == []
    assert resource_version(kube, world, "p-one") == rv


def test_an_unknown_provider_with_json_output_prints_the_refusal_report(world: str, tmp_path: Path):
    proc = Cli(tmp_path)(*DRAIN, "--provider", "nope", "-o", "json")
    clean(proc)
    assert proc.returncode == 3, proc.stderr
    report = parse_report(proc.stdout, PROVIDER_DRAIN)
    assert report["exit"] == {"code": 3, "name": "refused"}
    assert report["refused"] == [f"provider 'nope' not found in namespace {world}"]
    assert report["selection"] == [] and report["outcomes"] == []


def test_env_up_refuses_a_state_folder_that_is_not_its_own(home: Path):
    foreign = home / "state" / "envs" / "example"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not xtask's")
    # Refused before the kubeconfig is read (were it read, this garbage would stop the run).
    (home / "kubeconfig").write_text("apiVersion: v1\nclusters: [\n")
    before = files(home)
    proc = Cli(home)("env", "up", "--runtime", "local", "--env", "example")
    output = clean(proc)
    assert proc.returncode == 3, output
    assert f"{foreign} is not the state folder of environment 'example'" in output
    assert files(home) == before
