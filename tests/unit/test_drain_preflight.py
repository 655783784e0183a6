"""Checks before a drain or a restoration writes anything: the journal folder and the journal's context."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xtask.__main__ import main
from xtask.drain.core.journal_records import FORMAT
from xtask.drain.edges.journal import JournalError, read_journal
from xtask.drain.edges.preflight import journal_context, usable_journal_dir


def test_a_usable_folder_is_created_and_left_clean(tmp_path):
    folder = tmp_path / "state" / "journal"
    assert usable_journal_dir(folder) == folder
    assert folder.is_dir() and list(folder.iterdir()) == []


@pytest.mark.parametrize(
    "make, reason",
    [
        (lambda t: Path("/proc/agn-xtask-test/journal"), "No such file or directory"),
        (lambda t: (t / "file").write_text("x") and t / "file" / "sub", "Not a directory"),
        (lambda t: (t / "file").write_text("x") and t / "file", "it is not a folder"),
    ],
)
def test_unusable_folders_are_named(tmp_path, make, reason):
    folder = make(tmp_path)
    with pytest.raises(JournalError) as exc:
        usable_journal_dir(folder)
    assert str(exc.value) == f"cannot use {folder} as the drain journal folder: {reason}"
    assert "--journal-dir" in exc.value.hint


def test_the_journal_folder_is_checked_before_the_kubeconfig_is_read(tmp_path, monkeypatch, capsys):
    """No API request (no kubeconfig even) happens when the journal could not be written."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("AGN_XTASK_JOURNAL_DIR", "/proc/agn-xtask-test")
    assert main(["env", "provider-drain", "--provider", "p"]) == 1
    err = capsys.readouterr().err
    assert (
        err.startswith("error: cannot use /proc/agn-xtask-test as the drain journal folder") and "Traceback" not in err
    )
    # A dry run writes no journal, so it does not need the folder (and reaches the kubeconfig).
    assert main(["env", "provider-drain", "--provider", "p", "--dry-run"]) == 1
    assert "no kubeconfig" in capsys.readouterr().err


def test_a_journal_context_must_be_a_string(tmp_path):
    path = tmp_path / "drain-x.jsonl"
    header = {"type": "header", "format": FORMAT, "operation": "op", "namespace": "ns", "request": "drain", "plan": []}
    path.write_text(json.dumps({**header, "context": 5}) + "\n")
    state = read_journal(path)
    with pytest.raises(JournalError, match=f"{path}: not a drain journal: context must be a string, got 5"):
        journal_context(state, path)
    path.write_text(json.dumps({**header, "context": None}) + "\n")
    assert journal_context(read_journal(path), path) is None
