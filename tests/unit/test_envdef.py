from pathlib import Path

import pytest
import yaml

from xtask.envdef import load_env, parse_env
from xtask.errors import EnvDefinitionError


def test_example_env_matches_the_seed():
    env = load_env("example")
    assert env.namespace
    assert [n.name for n in env.networks] == ["production"]
    assert [c.name for c in env.consumers] == ["consumer-a", "consumer-b"]
    gateways = {p.name: p.provider_gateway for p in env.providers}
    assert gateways == {"provider-one": "provider-a", "provider-two": "provider-a",
                        "provider-three": "provider-b", "provider-four": "provider-b"}


def test_example_groups_mix_gateways():
    env = load_env("example")
    groups: dict[str, set] = {}
    for p in env.providers:
        groups.setdefault(p.selection_group, set()).add(p.provider_gateway)
    assert all(len(gws) == 2 for gws in groups.values())


def test_rendered_providers_never_carry_drain():
    env = load_env("example")
    objs = env.provider_objects({p.name: "http://127.0.0.1:1" for p in env.providers})
    assert all("trafficPolicy" not in o["spec"] for o in objs)


def test_unknown_env_is_clear():
    with pytest.raises(EnvDefinitionError, match="unknown environment 'nope'") as exc:
        load_env("nope")
    assert "example" in exc.value.hint


def test_every_problem_named_with_file_and_field():
    data = yaml.safe_load((Path(__file__).parents[2] / "envs" / "example.yaml").read_text())
    data["providers"][1]["rank"] = -1
    data["providers"][2]["colour"] = "red"
    data["consumers"][0]["network"] = "staging"
    with pytest.raises(EnvDefinitionError) as exc:
        parse_env(data, source=Path("envs/bad.yaml"))
    msg = str(exc.value)
    assert "envs/bad.yaml" in msg
    assert "providers[1].rank: must be a non-negative integer" in msg
    assert "providers[2].colour: unknown field" in msg
    assert "consumers[0].network: names unknown network 'staging'" in msg


def test_not_a_mapping():
    with pytest.raises(EnvDefinitionError, match="must be a mapping"):
        parse_env(["x"], source=Path("x.yaml"))
