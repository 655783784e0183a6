"""The runtime registry: what `--runtime` offers, what `auto` picks, which flags a runtime takes,
and that the CLI reaches runtimes only through the registry (a tidy check over xtask/cli)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from xtask.cli.env.up import up as up_command
from xtask.envdef import load_env
from xtask.errors import UsageError
from xtask.manifests import render
from xtask.runtime import registry
from xtask.runtime.base import Flag, Options, Runtime
from xtask.runtime.cluster import KINDS, ClusterEnv, labelled, selector
from xtask.runtime.kind import KindEnv
from xtask.runtime.local import LocalEnv
from xtask.state import EnvRecord

CLI = Path(__file__).resolve().parents[2] / "xtask" / "cli"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("AGN_XTASK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))


@pytest.mark.parametrize("name", registry.names())
def test_every_registered_runtime_implements_the_protocol_under_its_own_name(name):
    cls = registry.runtime_class(name)
    assert cls.name == name
    assert issubclass(cls, Runtime)
    assert all(isinstance(flag, Flag) for flag in cls.flags)
    runtime = cls.create("example", Options())
    assert runtime.status() == []  # no record: nothing to report, and nothing touched
    assert set(runtime.prometheus()) == {"url", "running", "detail"}


def test_up_has_one_option_per_declared_flag_saying_who_takes_it():
    options = {p.name: p for p in up_command.params}
    for flag in registry.flags():
        option = options[flag.key]
        assert option.opts == [flag.name] and option.is_flag == (flag.type is bool)
        assert option.help == f"{flag.help} [{', '.join(registry.takers(flag))}]"
    assert {"--image", "--context", "--kubeconfig", "--dry-run", "--no-wait"} <= {f.name for f in registry.flags()}


def test_a_flag_declared_differently_by_two_runtimes_is_refused(monkeypatch):
    monkeypatch.setattr(LocalEnv, "flags", (Flag("--image", help="another image"),))
    with pytest.raises(AssertionError, match="--image is declared differently by two runtimes"):
        registry.flags()


def test_the_runtimes_sections_are_the_env_files_extra_keys():
    assert [s.key for s in registry.sections()] == ["kind"]


def test_runtime_choices_come_from_the_registry():
    option = next(p for p in up_command.params if p.name == "runtime")
    assert list(option.type.choices) == [registry.AUTO, *registry.names()]


def test_auto_picks_the_first_runtime_that_can_run_here(monkeypatch):
    monkeypatch.setattr(KindEnv, "problems", lambda self: [])
    assert isinstance(registry.choose("example", "auto", recorded=None, options=Options()), KindEnv)
    monkeypatch.setattr(KindEnv, "problems", lambda self: ["`kind` is not on PATH"])
    assert isinstance(registry.choose("example", "auto", recorded=None, options=Options()), LocalEnv)


def test_auto_never_picks_the_cluster_runtime_and_the_last_candidate_is_the_fallback(monkeypatch):
    monkeypatch.setattr(KindEnv, "problems", lambda self: ["no docker"])
    monkeypatch.setattr(LocalEnv, "problems", lambda self: ["no binaries"])
    assert "cluster" not in registry.auto_candidates()
    # The last candidate's own `up` then says why it cannot run.
    assert isinstance(registry.choose("example", "auto", recorded=None, options=Options()), LocalEnv)


def test_auto_keeps_the_recorded_runtime(monkeypatch):
    monkeypatch.setattr(KindEnv, "problems", lambda self: [])
    chosen = registry.choose("example", "auto", recorded="cluster", options=Options())
    assert isinstance(chosen, ClusterEnv)


def test_a_flag_the_runtime_does_not_take_is_a_usage_error_naming_who_takes_it():
    with pytest.raises(UsageError) as err:
        registry.choose("example", "local", recorded=None, options=Options(context="ctx", dry_run=True))
    assert str(err.value) == "--context, --dry-run: not an option of the local runtime"
    assert err.value.hint == "runtimes that take it: cluster"
    with pytest.raises(UsageError, match="--no-wait: not an option of the kind runtime"):
        registry.choose("example", "kind", recorded=None, options=Options(no_wait=True))


def test_recorded_env_goes_to_its_runtime_and_an_unrecorded_folder_to_the_process_runtime():
    assert isinstance(registry.recorded("example", "kind"), KindEnv)
    assert isinstance(registry.recorded("example", None), LocalEnv)


def test_cluster_runtime_takes_the_recorded_context_for_a_repair_and_for_down():
    EnvRecord("example", "cluster", "shared-dev", "/some/kubeconfig", "agn-example").save()
    runtime = registry.recorded("example", "cluster")
    assert isinstance(runtime, ClusterEnv)
    assert (runtime.context, runtime.kubeconfig) == ("shared-dev", "/some/kubeconfig")


def test_cluster_problems_without_a_context():
    assert ClusterEnv("example").problems() == [
        "no --context given: name the kube context of the existing cluster to deploy into"
    ]


def test_cluster_down_finds_every_kind_it_applies_by_the_env_label():
    objects = [labelled(o, "example") for o in render(load_env("example"))]
    assert {(o["apiVersion"], o["kind"]) for o in objects} <= set(KINDS)
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert all(labels[k] == v for k, v in (term.split("=") for term in selector("example").split(",")))
    # Labelling copies: the rendered objects themselves stay as render made them.
    assert "agn.dev/env" not in (render(load_env("example"))[0]["metadata"]["labels"])


# -- tidy: the CLI never names a runtime --------------------------------------------------------
def _runtime_modules() -> set[str]:
    return {target.split(":")[0] for target in registry.RUNTIMES.values()}


def _mentions(path: Path) -> list[str]:
    """Where a CLI file names a runtime: a string that is a runtime's name or `--runtime <name>`,
    or an import of a runtime's module."""
    tree = ast.parse(path.read_text())
    names, modules = set(registry.names()), _runtime_modules()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if text in names or any(f"--runtime {n}" in text for n in names) or text in modules:
                found.append(f"{path.name}:{node.lineno}: {text!r}")
            elif any(text.startswith(m + ":") for m in modules):
                found.append(f"{path.name}:{node.lineno}: {text!r}")
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported = {node.module} | {f"{node.module}.{a.name}" for a in node.names}
            if imported & modules:
                found.append(f"{path.name}:{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            if {a.name for a in node.names} & modules:
                found.append(f"{path.name}:{node.lineno}: import")
    return found


def test_no_cli_file_names_a_runtime_or_imports_one():
    files = sorted(CLI.rglob("*.py"))
    assert len(files) > 5
    assert [m for f in files for m in _mentions(f)] == []


def test_the_tidy_check_catches_a_runtime_named_in_the_cli(tmp_path):
    """It can fail: the branches the CLI had before the registry are caught."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        'if record.runtime == "kind":\n'
        "    from xtask.runtime.kind import KindEnv\n"
        "from xtask.runtime import local\n"
        'HINT = "use env up --runtime local"\n'
    )
    assert len(_mentions(bad)) == 4
