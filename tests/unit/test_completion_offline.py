"""Shell completion of flag values, through click's completion API (what a shell's script asks):
``--env`` from the env files, ``--context`` from the kubeconfig read offline (``--kubeconfig``,
else ``$KUBECONFIG``'s files merged), and nothing, never an error, when there is nothing to read.
Provider and gateway names from a real API server: tests/integration/test_completion.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.shell_completion import ShellComplete

from xtask.__main__ import COMPLETE_VAR
from xtask.cli import cli

REPO = Path(__file__).resolve().parents[2]


def completions(args: list[str], incomplete: str = "") -> list[str]:
    """What completing ``incomplete`` after ``xtask ARGS`` offers."""
    return [item.value for item in ShellComplete(cli, {}, "xtask", COMPLETE_VAR).get_completions(args, incomplete)]


def kubeconfig(path: Path, *contexts: str, current: str | None = None) -> Path:
    entries = "".join(f"- name: {c}\n  context: {{cluster: {c}, user: {c}}}\n" for c in contexts)
    clusters = "".join(f"- name: {c}\n  cluster: {{server: 'https://127.0.0.1:9'}}\n" for c in contexts)
    users = "".join(f"- name: {c}\n  user: {{token: t}}\n" for c in contexts)
    path.write_text(
        f"apiVersion: v1\nkind: Config\nclusters:\n{clusters}users:\n{users}contexts:\n{entries}"
        + (f"current-context: {current}\n" if current else "")
    )
    return path


class TestEnv:
    @pytest.mark.parametrize("command", ["up", "status", "down", "render"])
    def test_the_env_files_are_offered(self, command):
        assert completions(["env", command, "--env"]) == ["engines", "example"]  # kind-example.yaml is kind's config

    def test_only_names_that_start_with_what_was_typed(self, tmp_path, monkeypatch):
        for name in ("staging", "stress", "prod"):
            (tmp_path / f"{name}.yaml").write_text("{}\n")
        monkeypatch.setattr("xtask.envdef.ENVS_DIR", tmp_path)
        assert completions(["env", "up", "--env"], "st") == ["staging", "stress"]
        assert completions(["env", "up", "--env"], "x") == []

    def test_a_folder_that_cannot_be_read_offers_nothing(self, tmp_path, monkeypatch):
        monkeypatch.setattr("xtask.envdef.ENVS_DIR", tmp_path / "missing")
        assert completions(["env", "up", "--env"]) == []


class TestContext:
    @pytest.fixture(autouse=True)
    def _home(self, tmp_path, monkeypatch):
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        monkeypatch.delenv("KUBECONFIG", raising=False)

    @pytest.mark.parametrize(
        "args",
        [
            ["env", "provider-drain", "--context"],
            ["env", "drains", "--context"],
            ["env", "drain-restore", "journal.jsonl", "--context"],
            ["env", "up", "--context"],
        ],
    )
    def test_every_file_of_kubeconfig_is_read_merged(self, args, tmp_path, monkeypatch):
        first = kubeconfig(tmp_path / "a", "local-example", "kind-example")
        second = kubeconfig(tmp_path / "b", "prod-eu", "local-example")
        monkeypatch.setenv("KUBECONFIG", f"{first}{os.pathsep}{second}")
        assert completions(args) == ["kind-example", "local-example", "prod-eu"]
        assert completions(args, "local") == ["local-example"]

    def test_the_default_kubeconfig(self, tmp_path):
        (tmp_path / "home" / ".kube").mkdir(parents=True)
        kubeconfig(tmp_path / "home" / ".kube" / "config", "kind-example")
        assert completions(["env", "drains", "--context"]) == ["kind-example"]

    def test_kubeconfig_given_before_it_is_read_alone(self, tmp_path, monkeypatch):
        monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "a", "from-env")))
        alone = kubeconfig(tmp_path / "b", "from-flag")
        assert completions(["env", "drains", "--kubeconfig", str(alone), "--context"]) == ["from-flag"]
        assert completions(["env", "provider-drain", "--kubeconfig", str(alone), "--context"], "f") == ["from-flag"]

    @pytest.mark.parametrize(
        "content",
        [None, "", "not: [yaml", "contexts: 7\n", "contexts: [{name: 3}, {nameless: x}]\n", b"\xff\xfe\x00"],
    )
    def test_no_or_a_broken_kubeconfig_offers_nothing_and_never_fails(self, content, tmp_path, monkeypatch):
        path = tmp_path / "kc"
        if isinstance(content, bytes):
            path.write_bytes(content)
        elif content is not None:
            path.write_text(content)
        monkeypatch.setenv("KUBECONFIG", str(path))
        assert completions(["env", "drains", "--context"]) == []
        assert completions(["env", "drains", "--kubeconfig", str(tmp_path / "nope"), "--context"]) == []
        assert completions(["env", "drains", "--kubeconfig", str(tmp_path), "--context"]) == []  # a folder


def test_provider_names_from_a_cluster_that_does_not_answer_offer_nothing_soon(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path / "kc", "dead", current="dead")))
    started = time.monotonic()
    assert completions(["env", "provider-drain", "--provider"]) == []
    assert completions(["env", "provider-drain", "--context", "dead", "--gateway"]) == []
    assert completions(["env", "provider-drain", "--context", "no-such-context", "--gateway"]) == []
    assert time.monotonic() - started < 10


def test_the_shell_protocol_end_to_end(tmp_path):
    """What `eval "$(_XTASK_COMPLETE=bash_source xtask)"` installs asks this, with these variables."""
    env = {
        **os.environ,
        COMPLETE_VAR: "bash_complete",
        "COMP_WORDS": "xtask env drains --context loc",
        "COMP_CWORD": "4",
        "KUBECONFIG": str(kubeconfig(tmp_path / "kc", "local-example", "kind-example")),
        "PYTHONPATH": str(REPO),
    }
    out = subprocess.run([sys.executable, "-m", "xtask"], env=env, capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout, out.stderr) == (0, "plain,local-example\n", "")
    env.update(COMP_WORDS="xtask env status --env ", COMP_CWORD="4")
    out = subprocess.run([sys.executable, "-m", "xtask"], env=env, capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stdout) == (0, "plain,engines\nplain,example\n")
    script = subprocess.run(
        [sys.executable, "-m", "xtask"], env={**env, COMPLETE_VAR: "bash_source"}, capture_output=True, text=True
    )
    assert script.returncode == 0 and "complete " in script.stdout and COMPLETE_VAR in script.stdout
