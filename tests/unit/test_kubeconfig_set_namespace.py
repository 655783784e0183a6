"""``set_context_namespace``: the kind runtime gives the ``kind-<env>`` context kind wrote the
env's namespace, as ``kubectl config set-context NAME --namespace NS`` would, under the
kubeconfig lock and written atomically; nothing is written when nothing changes or when the
context is missing."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import yaml

from agn import kubeconfig
from agn.kube import ConfigError
from agn.kubeconfig import write as kubeconfig_write


def entry(name: str, namespace: str | None = None) -> dict:
    context = {"cluster": name, "user": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": name, "user": {"token": f"token-{name}"}}],
        "contexts": [{"name": name, "context": context}],
        "current-context": name,
    }


@pytest.fixture
def path(tmp_path: Path) -> Path:
    """A kubeconfig as kind leaves it: its context without a namespace, next to another one."""
    p = tmp_path / "config"
    kubeconfig.add_context(p, entry("other", namespace="theirs"))
    kubeconfig.add_context(p, entry("kind-example"))
    return p


def contexts(path: Path) -> dict:
    return {c["name"]: c["context"] for c in yaml.safe_load(path.read_text())["contexts"]}


def test_sets_the_namespace_of_that_context_only(path: Path):
    before = yaml.safe_load(path.read_text())
    assert kubeconfig.set_context_namespace(path, "kind-example", "agn-example") is True
    after = yaml.safe_load(path.read_text())
    assert contexts(path) == {
        "other": {"cluster": "other", "user": "other", "namespace": "theirs"},
        "kind-example": {"cluster": "kind-example", "user": "kind-example", "namespace": "agn-example"},
    }
    # Everything else is as it was.
    assert {k: v for k, v in after.items() if k != "contexts"} == {k: v for k, v in before.items() if k != "contexts"}
    assert sorted(p.name for p in path.parent.iterdir()) == ["config"]  # no .lock, no temporary file left


def test_replaces_another_namespace(path: Path):
    kubeconfig.set_context_namespace(path, "kind-example", "first")
    assert kubeconfig.set_context_namespace(path, "kind-example", "second") is True
    assert contexts(path)["kind-example"]["namespace"] == "second"


def test_is_idempotent_and_writes_nothing_when_already_set(path: Path):
    assert kubeconfig.set_context_namespace(path, "kind-example", "agn-example")
    st, data = path.stat(), path.read_bytes()
    assert kubeconfig.set_context_namespace(path, "kind-example", "agn-example") is True
    again = path.stat()
    assert path.read_bytes() == data
    assert (again.st_ino, again.st_mtime_ns) == (st.st_ino, st.st_mtime_ns)  # not rewritten


def test_a_missing_context_is_false_and_nothing_is_written(path: Path):
    st, data = path.stat(), path.read_bytes()
    assert kubeconfig.set_context_namespace(path, "kind-nope", "agn-example") is False
    assert path.read_bytes() == data and path.stat().st_ino == st.st_ino
    assert not kubeconfig.lock_path(path).exists()


def test_a_missing_file_is_false_and_stays_missing(tmp_path: Path):
    path = tmp_path / "config"
    assert kubeconfig.set_context_namespace(path, "kind-example", "agn-example") is False
    assert not path.exists() and not kubeconfig.lock_path(path).exists()


def test_a_context_entry_without_a_mapping_is_not_changed(tmp_path: Path):
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "contexts": [{"name": "kind-example"}]}))
    data = path.read_bytes()
    assert kubeconfig.set_context_namespace(path, "kind-example", "agn-example") is False
    assert path.read_bytes() == data


def test_the_file_is_replaced_atomically(path: Path):
    old = path.stat().st_ino
    kubeconfig.set_context_namespace(path, "kind-example", "agn-example")
    # A new file renamed over the old one (a reader sees the old file or the new one, never half),
    # private like the kubeconfig kind and kubectl write.
    assert path.stat().st_ino != old
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_failed_write_leaves_the_old_file(path: Path, monkeypatch):
    data = path.read_bytes()

    def fail(target, payload, **_):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(kubeconfig_write, "write_atomic", fail)
    with pytest.raises(ConfigError, match="No space left on device") as exc:
        kubeconfig.set_context_namespace(path, "kind-example", "agn-example")
    assert str(path) in str(exc.value)
    assert path.read_bytes() == data
    assert not kubeconfig.lock_path(path).exists()


def test_a_symlinked_kubeconfig_is_written_through_to_its_target(path: Path):
    link = path.parent / "link"
    link.symlink_to(path.name)
    kubeconfig.set_context_namespace(link, "kind-example", "agn-example")
    assert link.is_symlink() and os.readlink(link) == path.name
    assert contexts(path)["kind-example"]["namespace"] == "agn-example"


def test_a_lock_another_writer_keeps_is_an_error_and_nothing_is_written(path: Path, monkeypatch):
    monkeypatch.setattr(kubeconfig_write, "LOCK_WAIT_SECONDS", 0.1)
    data = path.read_bytes()
    lock = kubeconfig.lock_path(path)
    lock.touch()  # kubectl (client-go) is writing it
    with pytest.raises(ConfigError, match="is locked"):
        kubeconfig.set_context_namespace(path, "kind-example", "agn-example")
    assert path.read_bytes() == data and lock.exists()


@pytest.mark.parametrize("content", [b"clusters: [oops", b"- a list\n", b"contexts: 7\n"])
def test_a_file_that_is_not_a_kubeconfig_is_never_overwritten(tmp_path: Path, content: bytes):
    path = tmp_path / "config"
    path.write_bytes(content)
    with pytest.raises(ConfigError):
        kubeconfig.set_context_namespace(path, "kind-example", "agn-example")
    assert path.read_bytes() == content
