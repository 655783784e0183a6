"""Versioned env files: ``apiVersion: xtask.agn.dev/v1alpha1``, ``kind: Environment``; an
unversioned file still loads, with one deprecation line on stderr; another version is exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from xtask.envdef import API_VERSION, KIND, EnvVersionError, _warn_unversioned, load_env, parse_env
from xtask.errors import EnvDefinitionError, ExitCode
from xtask.runtime.kind import pinned

EXAMPLE = Path(__file__).parents[2] / "envs" / "example.yaml"


def example() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def test_the_example_is_versioned_and_loads_quietly(capsys):
    data = example()
    assert (data["apiVersion"], data["kind"]) == (API_VERSION, KIND) == ("xtask.agn.dev/v1alpha1", "Environment")
    load_env("example")
    assert capsys.readouterr().err == ""


def test_an_unversioned_file_loads_with_one_warning_line(capsys, tmp_path):
    _warn_unversioned.cache_clear()
    data = example()
    del data["apiVersion"], data["kind"]
    data["kind"] = {"engine": "podman"}  # unversioned: the kind runtime's section at the top level, as before
    (tmp_path / "example.yaml").write_text(yaml.safe_dump(data))
    env = load_env("example", envs_dir=tmp_path)
    load_env("example", envs_dir=tmp_path)  # once per file
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("warning: ") and "deprecated" in err and API_VERSION in err
    assert str(tmp_path / "example.yaml") in err
    assert pinned(env, "engine") == "podman" and [p.name for p in env.providers][0] == "provider-one"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"apiVersion": "xtask.agn.dev/v1"}, "apiVersion: must be xtask.agn.dev/v1alpha1, got 'xtask.agn.dev/v1'"),
        ({"apiVersion": "agn.dev/v1alpha1"}, "apiVersion: must be xtask.agn.dev/v1alpha1, got 'agn.dev/v1alpha1'"),
        ({"kind": "Cluster"}, "kind: must be Environment, got 'Cluster'"),
        ({"kind": {"engine": "docker"}}, "kind: must be Environment, got dict"),
        ({"apiVersion": None}, "apiVersion: must be xtask.agn.dev/v1alpha1, got nothing (null)"),
    ],
)
def test_a_wrong_version_or_kind_is_a_usage_error_naming_it(change, expected):
    data = {**example(), **change}
    with pytest.raises(EnvVersionError) as exc:
        parse_env(data, source=Path("envs/x.yaml"))
    assert exc.value.exit_code == ExitCode.USAGE == 2
    assert expected in str(exc.value) and "envs/x.yaml" in str(exc.value)


def test_half_a_version_is_refused():
    data = example()
    del data["apiVersion"]
    with pytest.raises(EnvVersionError, match=r"apiVersion: must be xtask.agn.dev/v1alpha1, got \(missing\)"):
        parse_env(data, source=Path("envs/x.yaml"))


def test_a_versioned_file_keeps_runtime_sections_under_runtimes():
    data = example()
    data["runtimes"] = {"kind": {"engine": "docker"}}
    assert pinned(parse_env(data, source=EXAMPLE), "engine") == "docker"
    data["runtimes"] = {"podman": {}}
    with pytest.raises(EnvDefinitionError, match=r"runtimes\.podman: unknown field"):
        parse_env(data, source=EXAMPLE)


def test_an_unversioned_file_has_no_runtimes_key():
    data = example()
    del data["apiVersion"], data["kind"]
    data["runtimes"] = {"kind": {}}
    with pytest.raises(EnvDefinitionError, match=r"runtimes: unknown field"):
        parse_env(data, source=EXAMPLE)
