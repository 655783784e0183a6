"""``kubectl agn``: kubectl's global flags, wherever kubectl hands them over, become the flags of
the env command that takes them; a flag the command would not honour is a usage error."""

from __future__ import annotations

import pytest

from xtask.cli.kubectl_plugin import env_of_context, main, plugin_args, split_globals
from xtask.errors import UsageError

NS, CTX, KC = "team-a", "kind-example", "/tmp/kc"


@pytest.mark.parametrize(
    "args",
    [
        ["drains", "--context", CTX, "--kubeconfig", KC, "-n", NS, "-o", "json"],
        ["--context", CTX, "--kubeconfig", KC, "-n", NS, "drains", "-o", "json"],
        ["--context=" + CTX, "drains", "--kubeconfig=" + KC, "-o", "json", "--namespace=" + NS],
        ["-n" + NS, "--context", CTX, "drains", "-o", "json", "--kubeconfig", KC],
        ["-n=" + NS, "--kubeconfig", KC, "--context", CTX, "drains", "-o", "json"],
    ],
)
def test_global_flags_before_or_after_the_command_reach_it(args):
    out = plugin_args(args)
    assert out[0] == "drains"
    assert dict(zip(out[1:-2:2], out[2:-2:2], strict=True)) == {"--context": CTX, "--kubeconfig": KC, "--namespace": NS}
    assert out[-2:] == ["-o", "json"]


def test_provider_drain_gets_them_and_keeps_its_own_arguments():
    out = plugin_args(["-n", NS, "provider-drain", "--provider", "p1", "--undrain", "--", "-n"])
    assert out == ["provider-drain", "--namespace", NS, "--provider", "p1", "--undrain", "--", "-n"]


def test_the_last_of_a_repeated_flag_wins_as_in_kubectl():
    found, rest = split_globals(["-n", "a", "drains", "--namespace", "b"])
    assert found == [("--namespace", "a"), ("--namespace", "b")] and rest == ["drains"]
    assert plugin_args(["-n", "a", "drains", "--namespace", "b"])[-2:] == ["--namespace", "b"]


@pytest.mark.parametrize(
    ("context", "env"), [("local-example", "example"), ("kind-big", "big"), ("local-", None), ("prod", None)]
)
def test_an_env_context_names_its_env(context, env):
    assert env_of_context(context) == env


def test_status_takes_the_env_of_a_local_or_kind_context():
    assert plugin_args(["--context", "local-dev", "status", "-o", "json"]) == ["status", "--env", "dev", "-o", "json"]
    assert plugin_args(["status", "--env", "other", "--context", "kind-dev"]) == ["status", "--env", "other"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["status", "-n", NS], f"does not take --namespace (given '{NS}')"),
        (["--kubeconfig", KC, "status"], f"does not take --kubeconfig (given '{KC}')"),
        (["--context", "prod", "status"], "--context 'prod' is not local-NAME or kind-NAME"),
        (["drain-restore", "j.json", "-n", NS], "drain-restore does not take --namespace"),
        (["drains", "--context"], "--context needs a value"),
    ],
)
def test_a_flag_the_command_would_not_honour_is_exit_2_naming_it(args, named, capsys):
    with pytest.raises(UsageError) as err:
        plugin_args(args)
    assert named in str(err.value)
    assert main(args) == 2
    assert named in capsys.readouterr().err


def test_help_and_unknown_commands_go_to_the_group(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage: kubectl agn" in out and "provider-drain" in out and "drains" in out
    assert main(["-n", NS, "nonsense"]) == 2
    assert "nonsense" in capsys.readouterr().err


def test_verbose_goes_before_the_command_as_with_xtask(capsys):
    assert plugin_args(["-v", "-n", NS, "drains"]) == ["-v", "drains", "--namespace", NS]
    assert main(["-v", "drains", "--help"]) == 0
    assert "Usage: kubectl agn drains" in capsys.readouterr().out
