"""``-o`` and ``-v`` on every command, and which stream says what (issue 32, items 3 and 4).

Each command runs in-process through the real entry point (``xtask.__main__.main``), with
stdout and stderr captured apart: ``-o yaml`` is the same document as ``-o json``, ``-o name``
prints kubectl's ``kind.group/name`` lines, a bad ``-o`` is exit 2 naming the value and the
choices, ``-v`` is accepted after the command, and ``provider-drain``'s progress goes to stderr
while its result goes to stdout. The runs against a real cluster are in
``tests/integration/test_provider_drain.py``.
"""

from __future__ import annotations

import json

import pytest
import yaml
from test_reports import sample_drain_report

from reportschema import check_report
from xtask.__main__ import main
from xtask.cli.env import COMMANDS
from xtask.cli.formats import emit_report, yaml_text
from xtask.drain.core.progress import Planned, Said, WriteFinished
from xtask.drain.edges.fanout import Outcome
from xtask.reports import ENV_DOWN, ENV_STATUS

# A command line of each reporting command that needs no cluster (an env that is not up).
OFFLINE = {
    "status": ("env", "status"),
    "down": ("env", "down"),
}


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    """An empty state folder (no env is up), no colour, no terminal."""
    monkeypatch.setenv("AGN_XTASK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NO_COLOR", "1")
    return tmp_path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


# -- -o yaml is -o json's document ------------------------------------------------------------------
@pytest.mark.parametrize("command, kind", [("status", ENV_STATUS), ("down", ENV_DOWN)])
def test_yaml_is_the_json_document(capsys, command, kind):
    code, as_json, _ = run(capsys, *OFFLINE[command], "-o", "json")
    assert code == 0
    code, as_yaml, _ = run(capsys, *OFFLINE[command], "-o", "yaml")
    assert code == 0
    doc = check_report(json.loads(as_json), kind)
    assert yaml.safe_load(as_yaml) == doc
    assert list(yaml.safe_load(as_yaml)) == list(doc)  # the same key order


def test_yaml_of_a_report_keeps_order_values_and_escapes():
    report = sample_drain_report(summary="odd \x1b[2J \u202e text", selection=["p-b", "p-a"]).to_dict()
    text = yaml_text(report)
    assert "\x1b" not in text and "\u202e" not in text  # control characters are escaped, as JSON does
    again = yaml.safe_load(text)
    assert again == json.loads(json.dumps(report)) and list(again) == list(report)
    assert again["selection"] == ["p-b", "p-a"]


def test_env_down_report_validates_against_its_schema(capsys):
    code, out, err = run(capsys, "env", "down", "--env", "nothing-here", "-o", "json")
    assert code == 0, err
    report = check_report(json.loads(out), ENV_DOWN)
    assert (report["env"], report["wasUp"], report["stopped"], report["errors"]) == ("nothing-here", False, [], [])
    assert list(report)[:2] == ["apiVersion", "kind"]


# -- -o name -----------------------------------------------------------------------------------------
def test_render_name_json_and_yaml_are_the_same_objects(capsys):
    code, names, _ = run(capsys, "env", "render", "-o", "name")
    assert code == 0
    code, listed, _ = run(capsys, "env", "render", "-o", "json")
    assert code == 0
    code, stream, _ = run(capsys, "env", "render")
    assert code == 0
    doc = json.loads(listed)
    assert (doc["apiVersion"], doc["kind"]) == ("v1", "List")
    assert list(yaml.safe_load_all(stream)) == doc["items"]
    lines = names.splitlines()
    assert len(lines) == len(doc["items"])
    assert "customresourcedefinition.apiextensions.k8s.io/inferenceproviders.agn.dev" in lines
    assert "namespace/agn-example" in lines  # the core group has no group part
    assert any(line.startswith("deployment.apps/") for line in lines)
    assert any(line.startswith("inferenceprovider.agn.dev/") for line in lines)


def test_name_of_an_env_that_is_not_up_is_nothing(capsys):
    assert run(capsys, "env", "status", "-o", "name")[:2] == (0, "")  # no objects to name
    assert run(capsys, "env", "down", "-o", "name")[:2] == (0, "")  # nothing was torn down


def test_name_lines_of_the_drain_reports():
    from xtask.cli.env.drain_restore import restored_names
    from xtask.cli.env.drains import provider_names
    from xtask.cli.env.provider_drain import selected_names
    from xtask.drain.edges.fanout import Restoration
    from xtask.drain.restore import Restored, RestoreReport

    assert selected_names(sample_drain_report()) == [
        "inferenceprovider.agn.dev/p-a",
        "inferenceprovider.agn.dev/p-b",
    ]
    drained = {"providers": [{"provider": "p-x"}, {"provider": "p-y"}]}
    assert provider_names(drained) == ["inferenceprovider.agn.dev/p-x", "inferenceprovider.agn.dev/p-y"]
    restored = Restored([Restoration("p-1", "restored"), Restoration("p-2", "changed-by-another-writer")], [])
    report = RestoreReport(journal="j", operation="op", dry_run=False, restored=restored, events={})
    assert restored_names(report) == ["inferenceprovider.agn.dev/p-1"]


def test_names_are_shown_escaped(capsys):
    emit_report({}, "name", ["inferenceprovider.agn.dev/a\x1b[2Jb"])
    assert capsys.readouterr().out == "inferenceprovider.agn.dev/a\\x1b[2Jb\n"


# -- bad -o ------------------------------------------------------------------------------------------
def choices_of(command: str) -> str:
    if command == "render":
        return "'yaml', 'json', 'name'"
    if command in ("status", "drains"):
        return "'table', 'wide', 'json', 'yaml', 'name'"
    return "'table', 'json', 'yaml', 'name'"


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("value", ["xml", "JSON", "", "wide\x1b[2J"])
def test_a_bad_output_is_exit_2_naming_the_value_and_the_choices(capsys, command, value):
    argv = ["env", command, *(["journal.jsonl"] if command == "drain-restore" else []), "-o", value]
    code, out, err = run(capsys, *argv)
    shown = value.replace("\x1b", "\\x1b")
    assert code == 2 and out == ""
    assert f"Invalid value for '--output' / '-o': '{shown}' is not one of {choices_of(command)}." in err
    assert "Traceback" not in err and "\x1b" not in err


def test_wide_only_where_a_table_has_more_columns(capsys):
    for command in ("up", "down", "provider-drain"):
        code, _, err = run(capsys, "env", command, "-o", "wide")
        assert code == 2 and "'wide' is not one of" in err, command


# -- -v ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("flag", ["-v", "--verbose"])
def test_verbose_is_accepted_after_every_command(capsys, command, flag):
    code, out, err = run(capsys, "env", command, flag, "--help")
    assert code == 0, err
    assert "-v, --verbose" in out


@pytest.mark.parametrize("argv", [("-v", "env", "status"), ("env", "-v", "status"), ("env", "status", "-v")])
def test_verbose_anywhere_runs_the_command(capsys, argv):
    code, out, err = run(capsys, *argv, "-o", "json")
    assert code == 0, err
    assert check_report(json.loads(out), ENV_STATUS)["state"] == "down"


def test_verbose_after_the_command_shows_the_traceback(capsys, home):
    missing = str(home / "no-such-kubeconfig")
    code, _, quiet = run(capsys, "env", "drains", "--kubeconfig", missing)
    assert code == 1 and "error:" in quiet and "Traceback" not in quiet
    code, _, loud = run(capsys, "env", "drains", "--kubeconfig", missing, "-v")
    assert code == 1 and "Traceback" in loud and "error:" in loud


def test_verbose_after_a_plugin_command(capsys):
    from xtask.cli.kubectl_plugin import main as plugin_main

    assert plugin_main(["drains", "-v", "--help"]) == 0
    assert "-v, --verbose" in capsys.readouterr().out


# -- streams: progress on stderr, results on stdout -------------------------------------------------
@pytest.fixture
def fake_drain(monkeypatch):
    """provider-drain's run replaced by one that reports progress and returns a fixed report."""
    import xtask.cli.env.provider_drain as command

    report = sample_drain_report(summary="stored on 1 provider(s)")
    report.exit_code = report.exit_code.OK

    def run_drain(request, *, progress):
        progress(Said("selection (providerGateway gw-east, namespace agn-system): p-a, p-b"))
        progress(Planned("p-a", False, True, False, True))
        progress(WriteFinished(Outcome("p-a", "changed", generation=3)))
        return report

    monkeypatch.setattr(command, "run_drain", run_drain)
    return report


DRAIN = ("env", "provider-drain", "--context", "ctx", "--gateway", "gw-east")


def test_drain_progress_goes_to_stderr_and_the_result_to_stdout(capsys, fake_drain, home):
    code, out, err = run(capsys, *DRAIN, "--journal-dir", str(home))
    assert code == 0, err
    assert "  plan p-a: drain false -> true (will change)" in err.splitlines()
    assert "  write p-a: changed" in err.splitlines()
    assert "plan p-a" not in out  # not a dry run: the plan was progress, not the result
    assert out.splitlines()[0] == "selection (providerGateway gw-east, namespace agn-system): p-a, p-b"
    assert "  write p-a: changed" in out.splitlines()  # the outcomes are the result
    assert out.splitlines()[-1] == "ok: stored on 1 provider(s)"
    assert "ok:" not in err


@pytest.mark.parametrize("output", ["json", "yaml", "name"])
def test_drain_report_formats_keep_progress_on_stderr(capsys, fake_drain, home, output):
    code, out, err = run(capsys, *DRAIN, "--journal-dir", str(home), "-o", output)
    assert code == 0, err
    assert "  write p-a: changed" in err.splitlines()
    if output == "name":
        assert out == "inferenceprovider.agn.dev/p-a\ninferenceprovider.agn.dev/p-b\n"
    else:
        doc = json.loads(out) if output == "json" else yaml.safe_load(out)
        assert check_report(doc, "ProviderDrainReport") == json.loads(json.dumps(fake_drain.to_dict()))


def test_a_dry_runs_result_is_its_plan(capsys, fake_drain):
    fake_drain.dry_run = True
    code, out, _ = run(capsys, *DRAIN, "--dry-run")
    assert code == 0
    assert "  plan p-a: drain false -> true (will change)" in out.splitlines()


def test_the_live_view_is_on_stderr_too(capsys, fake_drain, home, monkeypatch):
    """stderr a terminal, stdout a pipe (`provider-drain ... | tee log`): the live view on stderr,
    the result as plain lines on stdout."""
    import xtask.cli.env.provider_drain as command

    monkeypatch.setattr(command, "fancy", lambda: True)
    code, out, err = run(capsys, *DRAIN, "--journal-dir", str(home))
    assert code == 0, err
    assert "p-a: drain false -> true" in err and "will change" in err
    assert "will change" not in out and "\x1b" not in out
    assert out.splitlines()[0].startswith("selection (") and out.splitlines()[-1] == "ok: stored on 1 provider(s)"
