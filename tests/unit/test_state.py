"""The state folder: which env folder is an env's own, and that only that one is removed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xtask.errors import ExitCode, UsageError
from xtask.state import (
    MARKER,
    EnvRecord,
    NotOwnStateFolder,
    StateFolderError,
    claim_env_dir,
    env_dir,
    remove_env_dir,
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGN_XTASK_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def record(env: str) -> EnvRecord:
    return EnvRecord(env, "local", f"local-{env}", "/nowhere/kubeconfig", "agn-example")


@pytest.mark.parametrize("name", ["", ".", "..", "../x", "a/b", "A", "a_b", "-a", "a-", "a" * 64, "ok\n", " ok"])
def test_names_that_are_not_labels_are_refused(home: Path, name: str):
    with pytest.raises(UsageError, match="invalid environment name"):
        env_dir(name)


def test_the_folder_is_one_level_below_envs(home: Path):
    assert env_dir("a" * 63) == home / "envs" / ("a" * 63)


def test_claim_writes_the_marker_and_save_claims(home: Path):
    record("example").save()
    folder = home / "envs" / "example"
    assert (folder / MARKER).read_text() == "example\n"
    assert EnvRecord.load("example") == record("example")


def test_own_folder_is_removed(home: Path):
    claim_env_dir("example")
    (home / "envs" / "example" / "etcd").mkdir()
    assert remove_env_dir("example") is True
    assert not (home / "envs" / "example").exists()
    assert remove_env_dir("example") is False  # idempotent


def test_folder_of_an_older_version_is_its_own_when_env_json_names_it(home: Path):
    folder = home / "envs" / "example"
    folder.mkdir(parents=True)
    (folder / "env.json").write_text(json.dumps({"env": "example", "runtime": "local"}))
    (folder / "run").mkdir()
    assert remove_env_dir("example") is True
    assert not folder.exists()


def test_an_older_folder_gets_the_marker_when_claimed(home: Path):
    folder = home / "envs" / "example"
    folder.mkdir(parents=True)
    (folder / "env.json").write_text(json.dumps({"env": "example"}))
    claim_env_dir("example")
    assert (folder / MARKER).read_text() == "example\n"


def test_an_empty_folder_is_its_own(home: Path):
    (home / "envs" / "example").mkdir(parents=True)
    assert remove_env_dir("example") is True


@pytest.mark.parametrize(
    "content",
    [
        {"notes.txt": "mine"},
        {"env.json": json.dumps({"env": "other"})},
        {MARKER: "other\n"},
        {"env.json": "not json"},
    ],
    ids=["no-marker", "env-json-of-another-env", "marker-of-another-env", "garbage-env-json"],
)
def test_a_folder_that_is_not_its_own_is_left_alone(home: Path, content: dict[str, str]):
    folder = home / "envs" / "example"
    folder.mkdir(parents=True)
    for name, text in content.items():
        (folder / name).write_text(text)
    with pytest.raises(NotOwnStateFolder, match="is not the state folder of environment 'example'") as caught:
        remove_env_dir("example")
    assert caught.value.exit_code == ExitCode.REFUSED
    with pytest.raises(NotOwnStateFolder):
        claim_env_dir("example")
    assert sorted(p.name for p in folder.iterdir()) == sorted(content)


def test_a_symlink_is_never_followed(home: Path, tmp_path: Path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / MARKER).write_text("example\n")  # even with a marker planted at the target
    (home / "envs").mkdir(parents=True)
    (home / "envs" / "example").symlink_to(victim)
    with pytest.raises(NotOwnStateFolder, match="a symbolic link"):
        remove_env_dir("example")
    assert (victim / MARKER).exists()


@pytest.mark.parametrize("where", ["home", "home/envs"])
def test_state_home_that_is_not_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str):
    monkeypatch.setenv("AGN_XTASK_HOME", str(tmp_path / "home"))
    path = tmp_path / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("a file")
    with pytest.raises(StateFolderError, match=f"cannot use {path} as the xtask state folder"):
        env_dir("example")


def test_a_record_with_a_namespace_that_is_not_a_name_is_not_loaded(home: Path):
    folder = claim_env_dir("example")
    (folder / "env.json").write_text(json.dumps({**record("example").__dict__, "namespace": ".."}))
    assert EnvRecord.load("example") is None
