import threading
import time
from pathlib import Path

import pytest

from agn import kubeconfig
from agn.kube import ConfigError
from agn.kubeconfig import write as kubeconfig_write
from xtask.runtime.steps import Step, UpContext, run_steps


def entry(name, server="https://127.0.0.1:1"):
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server}}],
        "users": [{"name": name, "user": {}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


def test_merge_keeps_other_entries_and_replaces_same_name():
    cfg = kubeconfig.with_entries(entry("kind-x"), entry("local-example"))
    cfg = kubeconfig.with_entries(cfg, entry("local-example", server="https://127.0.0.1:2"))
    assert [c["name"] for c in cfg["clusters"]] == ["kind-x", "local-example"]
    assert cfg["clusters"][1]["cluster"]["server"].endswith(":2")
    assert cfg["current-context"] == "local-example"


def test_remove_only_ours_and_unset_current():
    cfg = kubeconfig.without_entries(kubeconfig.with_entries(entry("kind-x"), entry("local-example")), "local-example")
    assert [c["name"] for c in cfg["contexts"]] == ["kind-x"]
    assert cfg["current-context"] == ""


def test_file_roundtrip(tmp_path: Path):
    path = tmp_path / "config"
    kubeconfig.add_context(path, entry("local-a"))
    kubeconfig.add_context(path, entry("local-b"))
    ours = kubeconfig.Written.of(entry("local-a"), "local-a")
    assert kubeconfig.remove_context(path, "local-a", ours=ours)
    assert not kubeconfig.remove_context(path, "local-a", ours=ours)
    assert [c["name"] for c in kubeconfig.read_for_update(path)["contexts"]] == ["local-b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config"]  # no .lock, no .tmp left behind


def test_lock_held_by_another_writer_is_waited_for(tmp_path: Path):
    path = tmp_path / "config"
    lock = kubeconfig.lock_path(path)
    lock.touch()  # kubectl (client-go) holds it
    threading.Timer(0.2, lock.unlink).start()
    kubeconfig.add_context(path, entry("local-a"))
    assert kubeconfig.read_for_update(path)["current-context"] == "local-a" and not lock.exists()


def test_a_lock_left_behind_is_an_error_naming_it(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(kubeconfig_write, "LOCK_WAIT_SECONDS", 0.1)
    path = tmp_path / "config"
    kubeconfig.add_context(path, entry("local-a"))
    before = path.read_bytes()
    lock = kubeconfig.lock_path(path)
    lock.touch()
    started = time.monotonic()
    with pytest.raises(ConfigError) as exc:
        kubeconfig.remove_context(path, "local-a", ours=kubeconfig.Written.of(entry("local-a"), "local-a"))
    assert time.monotonic() - started < 2
    assert str(exc.value) == f"kubeconfig {path} is locked: {lock} exists" and str(lock) in exc.value.hint
    assert path.read_bytes() == before and lock.exists()  # someone else's lock is not ours to delete


@pytest.mark.parametrize("content", [b"\x00\xff binary", b"clusters: [oops", b"- a list\n", b"contexts: 7\n"])
def test_a_file_that_is_not_a_kubeconfig_is_never_overwritten(tmp_path: Path, content: bytes):
    path = tmp_path / "config"
    path.write_bytes(content)
    for change in (
        lambda: kubeconfig.add_context(path, entry("local-a")),
        lambda: kubeconfig.remove_context(path, "x", ours=kubeconfig.Written("https://127.0.0.1:1")),
    ):
        with pytest.raises(ConfigError) as exc:
            change()
        assert str(exc.value).startswith(f"kubeconfig {path}: ") and "\n" not in str(exc.value)
        assert path.read_bytes() == content
        assert not kubeconfig.lock_path(path).exists()  # released although the change failed


def test_an_empty_file_is_an_empty_kubeconfig(tmp_path: Path):
    path = tmp_path / "config"
    path.write_bytes(b"")
    kubeconfig.add_context(path, entry("local-a"))
    assert [c["name"] for c in kubeconfig.read_for_update(path)["contexts"]] == ["local-a"]


def ctx() -> UpContext:
    return UpContext(env="e", envdef=None, context="local-e", kubeconfig=Path("/dev/null"), fresh=True, wait_timeout=1)


def test_steps_roll_back_in_reverse_on_failure():
    log = []

    def boom(_):
        raise RuntimeError("step 3 failed")

    steps = [
        Step("one", lambda _: log.append("run1"), lambda _: log.append("undo1")),
        Step("two", lambda _: log.append("run2"), lambda _: log.append("undo2")),
        Step("three", boom, lambda _: log.append("undo3")),
    ]
    with pytest.raises(RuntimeError):
        run_steps(steps, ctx(), progress=lambda m: None)
    assert log == ["run1", "run2", "undo3", "undo2", "undo1"]


def test_steps_retain_skips_rollback():
    log = []
    steps = [Step("one", lambda _: log.append("run1"), lambda _: log.append("undo1")), Step("two", lambda _: 1 / 0)]
    with pytest.raises(ZeroDivisionError):
        run_steps(steps, ctx(), progress=lambda m: None, retain=True)
    assert log == ["run1"]


def test_a_step_whose_check_passes_is_skipped_and_not_undone():
    log, lines = [], []
    steps = [
        Step("one", lambda _: log.append("run1"), lambda _: log.append("undo1"), check=lambda _: True),
        Step("two", lambda _: 1 / 0, lambda _: log.append("undo2")),
    ]
    with pytest.raises(ZeroDivisionError):
        run_steps(steps, ctx(), progress=lines.append)
    assert log == ["undo2"] and lines == ["one: already done", "two"]
