"""The JSON reports' contract: schemas, one key style, exit codes from one source, --version and
shell completion of the console script."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from jsonschema import Draft202012Validator

from reportschema import SCHEMAS, check_report
from xtask.cli import cli
from xtask.drain.core.states import IdleWaitState, RestoreOutcome, WaitState, WaveState, WriteOutcome
from xtask.drain.edges.fanout import Outcome, Restoration
from xtask.drain.report import Report
from xtask.errors import EXIT_CODE_MEANINGS, ExitCode
from xtask.reports import API_VERSION, DRAIN_RESTORE, PROVIDER_DRAIN, SCHEMA_FILES, envelope

REPO = Path(__file__).resolve().parents[2]
CAMEL = re.compile(r"^(\$?[a-z][a-zA-Z0-9]*)$")


def schema(kind: str) -> dict:
    return json.loads((SCHEMAS / SCHEMA_FILES[kind]).read_text())


def property_names(node: object, path: str = ""):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                for name, sub in value.items():
                    yield f"{path}/{name}", name
                    yield from property_names(sub, f"{path}/{name}")
            else:
                yield from property_names(value, f"{path}/{key}" if key != "$defs" else path)
    elif isinstance(node, list):
        for item in node:
            yield from property_names(item, path)


@pytest.mark.parametrize("kind", sorted(SCHEMA_FILES))
def test_schema_is_valid_and_names_its_kind(kind):
    doc = schema(kind)
    Draft202012Validator.check_schema(doc)
    assert doc["title"] == kind
    assert doc["properties"]["kind"] == {"const": kind}
    assert doc["properties"]["apiVersion"] == {"const": API_VERSION}
    assert {"apiVersion", "kind"} <= set(doc["required"])
    assert doc["additionalProperties"] is False  # a new field must be added to the schema too


@pytest.mark.parametrize("kind", sorted(SCHEMA_FILES))
def test_schema_fields_are_camel_case(kind):
    bad = [path for path, name in property_names(schema(kind)) if not CAMEL.match(name)]
    assert bad == []


def test_every_schema_file_belongs_to_a_kind():
    # env.schema.json is the env files' schema (xtask/envschema.py reads it), not a report's.
    inputs = ["env.schema.json"]
    assert sorted(p.name for p in SCHEMAS.glob("*.schema.json")) == sorted([*SCHEMA_FILES.values(), *inputs])


@pytest.mark.parametrize("kind", sorted(k for k in SCHEMA_FILES if "exit" in schema(k)["properties"]))
def test_schema_exit_codes_are_the_exit_codes(kind):
    exit_def = schema(kind)["$defs"]["exit"]["properties"]
    assert exit_def["code"]["enum"] == [int(c) for c in ExitCode]
    assert exit_def["name"]["enum"] == [c.label for c in ExitCode]


@pytest.mark.parametrize(
    "kind, pointer, words",
    [
        (PROVIDER_DRAIN, ("$defs", "outcome", "properties", "outcome"), WriteOutcome),
        (PROVIDER_DRAIN, ("$defs", "restoration", "properties", "outcome"), RestoreOutcome),
        (PROVIDER_DRAIN, ("properties", "convergence", "oneOf", 1, "properties", "state"), WaitState),
        (PROVIDER_DRAIN, ("properties", "idle", "oneOf", 1, "properties", "state"), IdleWaitState),
        (PROVIDER_DRAIN, ("properties", "waves", "oneOf", 1, "items", "properties", "state"), WaveState),
        (DRAIN_RESTORE, ("$defs", "restoration", "properties", "outcome"), RestoreOutcome),
    ],
)
def test_schema_words_are_the_drain_states(kind, pointer, words):
    """A report can say every outcome and state the run can reach, and nothing else."""
    node = schema(kind)
    for key in pointer:
        node = node[key]
    assert node["enum"] == [w.value for w in words]


def test_readme_exit_code_table_is_the_exit_codes():
    text = (REPO / "README.md").read_text()
    section = text.split("## Exit codes", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| (\d+) \| (.+?) \|$", section, flags=re.M)
    assert [(int(code), meaning) for code, meaning in rows] == [(int(c), m) for c, m in EXIT_CODE_MEANINGS.items()]


@pytest.mark.parametrize("args", [["--help"], ["env", "provider-drain", "--help"]])
def test_help_lists_every_exit_code(args):
    out = CliRunner().invoke(cli, args, prog_name="xtask").output
    for code, meaning in EXIT_CODE_MEANINGS.items():
        assert f"  {int(code)}  {meaning}" in out


def sample_drain_report(**changes) -> Report:
    report = Report(
        context="local-example",
        namespace="agn-system",
        request="drain",
        selector="providerGateway gw-east",
        dry_run=False,
        operation="20261203-abc",
        selection=["p-a", "p-b"],
        plan=[{"provider": "p-a", "current": False, "requested": True, "alreadyInState": False}],
        dry_run_outcomes=[Outcome("p-a", "dry-run-ok").to_dict()],
        outcomes=[Outcome("p-a", "changed", generation=3).to_dict(), Outcome("p-b", "failed", error="x").to_dict()],
        restorations=[Restoration("p-a", "restored").to_dict()],
        stored={"ok": True, "providers": {"p-a": True, "p-b": None}},
        convergence={
            "state": "converged",
            "observations": 2,
            "seconds": 0.2,
            "lagging": [],
            "notEligible": [],
            "providers": [{"consumer": "c", "provider": "p-a", "state": "existing_only", "ok": True, "detail": ""}],
            "consumers": [{"consumer": "c", "overlayRevision": 4, "acceptedRevision": 4, "servingRevision": 4}],
        },
        journal="/tmp/drain-20261203-abc.jsonl",
        timings={"totalSeconds": 1.0},
        exit_code=ExitCode.PARTIAL_RESTORED,
    )
    for key, value in changes.items():
        setattr(report, key, value)
    return report


def test_drain_report_matches_its_schema():
    data = check_report(sample_drain_report().to_dict(), "ProviderDrainReport")
    assert data["dryRun"] is False and data["dryRunOutcomes"][0]["outcome"] == "dry-run-ok"
    assert data["exit"] == {"code": 4, "name": "partial-restored"}
    assert list(data)[:2] == ["apiVersion", "kind"]


@pytest.mark.parametrize(
    "mutate, problem",
    [
        (lambda d: d.update(dry_run=d.pop("dryRun")), "'dry_run' was unexpected"),
        (lambda d: d["exit"].update(code=42), "42 is not one of"),
        (lambda d: d["outcomes"][0].update(outcome="maybe"), "'maybe' is not one of"),
        (lambda d: d.pop("summary"), "'summary' is a required property"),
        (lambda d: d.update(apiVersion="v1"), "apiVersion 'v1'"),
    ],
)
def test_schema_catches_a_drifting_report(mutate, problem):
    data = sample_drain_report().to_dict()
    mutate(data)
    with pytest.raises(AssertionError, match=re.escape(problem)):
        check_report(data)


def test_envelope_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match="Bogus"):
        envelope("Bogus", {})


def console_script() -> Path:
    return Path(sys.executable).parent / "xtask"


def test_version_from_both_entry_points():
    from importlib.metadata import version

    want = f"xtask {version('agn-xtask')}"
    for argv in ([sys.executable, "-m", "xtask", "--version"], [str(console_script()), "--version"]):
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        assert (out.returncode, out.stdout.strip()) == (0, want), argv


@pytest.mark.parametrize(
    "shell, marker", [("bash", "complete -o"), ("zsh", "compdef"), ("fish", "complete --no-files")]
)
def test_shell_completion_of_the_console_script(shell, marker):
    script = subprocess.run(
        [str(console_script())], env={"_XTASK_COMPLETE": f"{shell}_source"}, capture_output=True, text=True, timeout=60
    )
    assert script.returncode == 0 and marker in script.stdout and "_XTASK_COMPLETE" in script.stdout
    words = subprocess.run(
        [str(console_script())],
        env={"_XTASK_COMPLETE": "bash_complete", "COMP_WORDS": "xtask env provider-d", "COMP_CWORD": "2"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert words.stdout.split() == ["plain,provider-drain"]
