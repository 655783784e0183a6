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
    assert gateways == {
        "provider-one": "provider-a",
        "provider-two": "provider-a",
        "provider-three": "provider-b",
        "provider-four": "provider-b",
    }


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


def example() -> dict:
    return yaml.safe_load((Path(__file__).parents[2] / "envs" / "example.yaml").read_text())


def problems(data) -> list[str]:
    with pytest.raises(EnvDefinitionError) as exc:
        parse_env(data, source=Path("envs/bad.yaml"))
    return str(exc.value).split("\n")[1:]


@pytest.mark.parametrize(
    "endpoint, detail",
    [
        ("ftp://[::1", "got 'ftp://[::1' (Invalid IPv6 URL)"),
        ("ftp://host:21", "got 'ftp://host:21' (scheme 'ftp')"),
        ("127.0.0.1:8080", "got '127.0.0.1:8080' (scheme 'missing')"),
        ("localhost:8080", "got 'localhost:8080' (scheme 'localhost')"),
        ("//host:80", "(scheme 'missing')"),
        ("http://", "must be an http(s) URL with a host, got 'http://'"),
        ("http://:80/x", "with a host, got 'http://:80/x'"),
        ("http://h:99999", "got 'http://h:99999' (Port out of range 0-65535)"),
        ("http://h:port", "got 'http://h:port' (Port could not be cast to integer value as 'port')"),
        ("http://h:0", "(port 0)"),
        ("", "must be an http(s) URL, got ''"),
        (8080, "must be an http(s) URL, got 8080"),
    ],
)
def test_malformed_endpoints_are_rejected(endpoint, detail):
    data = example()
    data["providers"][0]["endpoint"] = endpoint
    [problem] = problems(data)
    assert problem.startswith("  providers[0].endpoint: ") and detail in problem


@pytest.mark.parametrize(
    "endpoint", ["http://127.0.0.1:8080", "https://provider.example:443/v1", "http://[::1]:9000", "http://provider"]
)
def test_good_endpoints_pass(endpoint):
    data = example()
    data["providers"][0]["endpoint"] = endpoint
    assert parse_env(data, source=Path("x.yaml")).providers[0].endpoint == endpoint


def test_empty_file_says_it_is_empty(tmp_path):
    (tmp_path / "blank.yaml").write_text("# nothing yet\n")
    with pytest.raises(EnvDefinitionError) as exc:
        load_env("blank", envs_dir=tmp_path)
    assert str(exc.value).startswith(f"{tmp_path / 'blank.yaml'}: the file is empty")
    assert "NoneType" not in str(exc.value)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\xff\xd8\xff\xe0 binary", "not UTF-8 text"),
        (b"name: x\n  bad indent: [\n", "not valid YAML (line 2"),
        (
            b"name: a\n---\nname: b\n",
            "not valid YAML (line 2, column 1: expected a single document in the stream, but found another document)",
        ),
    ],
)
def test_unreadable_files_are_one_line_errors(tmp_path, content, message):
    (tmp_path / "bad.yaml").write_bytes(content)
    with pytest.raises(EnvDefinitionError) as exc:
        load_env("bad", envs_dir=tmp_path)
    assert str(exc.value).startswith(f"{tmp_path / 'bad.yaml'}: ") and message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_a_missing_required_field_is_reported_once():
    data = example()
    del data["providers"][1]["name"]
    del data["providers"][2]["selectionGroup"]
    del data["consumers"][0]["network"]
    assert problems(data) == [
        "  consumers[0].network: is required",
        "  providers[1].name: is required",
        "  providers[2].selectionGroup: is required",
    ]


def test_an_item_that_is_not_a_mapping_is_reported_once():
    data = example()
    data["providers"][0] = "provider-one"
    data["networks"] = {"production": {}}
    assert problems(data) == [
        "  networks: must be a list, got dict {'production': {}}",
        "  providers[0]: must be a mapping, got 'provider-one'",
        "  consumers[0].network: names unknown network 'production' (known: none)",
        "  consumers[1].network: names unknown network 'production' (known: none)",
    ]


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda d: d["networks"][0].update(trust=["http"]), "networks[0].trust: must be a mapping, got list ['http']"),
        (
            lambda d: d["networks"][0].update(metricsMaxAgeSeconds="45s"),
            "networks[0].metricsMaxAgeSeconds: must be a positive integer, got '45s'",
        ),
        (
            lambda d: d["networks"][0].update(probeIntervalSeconds=0.01),
            "networks[0].probeIntervalSeconds: must be a number >= 0.1, got 0.01",
        ),
        (
            lambda d: d["networks"][0].update(probeIntervalSeconds="1s"),
            "networks[0].probeIntervalSeconds: must be a number >= 0.1, got '1s'",
        ),
        (
            lambda d: d["networks"][0].update(probeIntervalSeconds=30, metricsMaxAgeSeconds=45),
            "networks[0].probeIntervalSeconds: must be at most half of metricsMaxAgeSeconds (45), got 30",
        ),
        (
            lambda d: d["networks"][0].update(disruptionBudget={"maxUnavailable": "abc"}),
            'networks[0].disruptionBudget.maxUnavailable: must be an integer >= 0 or a percentage from "0%" to '
            "\"100%\", got 'abc'",
        ),
        (
            lambda d: d["networks"][0].update(disruptionBudget={"maxUnavailable": -1}),
            'networks[0].disruptionBudget.maxUnavailable: must be an integer >= 0 or a percentage from "0%" to '
            '"100%", got -1',
        ),
        (
            lambda d: d["networks"][0].update(disruptionBudget={"maxUnavailable": True}),
            'networks[0].disruptionBudget.maxUnavailable: must be an integer >= 0 or a percentage from "0%" to '
            '"100%", got True',
        ),
        (
            lambda d: d["networks"][0].update(disruptionBudget=1),
            "networks[0].disruptionBudget: must be a mapping, got 1",
        ),
        (
            lambda d: d["consumers"][0].update(excludedProviders="provider-one"),
            "consumers[0].excludedProviders: must be a list of provider names, got 'provider-one'",
        ),
        (lambda d: d["consumers"][0].update(network=7), "consumers[0].network: must be a non-empty string, got 7"),
        (
            lambda d: d["providers"][0].update(labels={"tier": 1}),
            "providers[0].labels: must map strings to strings, got dict {'tier': 1}",
        ),
        (
            lambda d: d["providers"][0].update(name="Provider_One"),
            "providers[0].name: must be a DNS-1123 label (lowercase letters, digits, '-'), got 'Provider_One'",
        ),
        (lambda d: d["providers"][0].update(rank=True), "providers[0].rank: must be a non-negative integer, got True"),
        (lambda d: d.update(overlayShards=0), "overlayShards: must be an integer from 1 to 100, got 0"),
        (lambda d: d.update(overlayShards="16"), "overlayShards: must be an integer from 1 to 100, got '16'"),
        (lambda d: d.update(overlayShards=101), "overlayShards: must be an integer from 1 to 100, got 101"),
        (
            lambda d: d.update(namespace=None),
            "namespace: must be a DNS-1123 label (lowercase letters, digits, '-'), got nothing (null)",
        ),
    ],
)
def test_every_message_names_field_and_value(change, expected):
    data = example()
    change(data)
    assert problems(data) == [f"  {expected}"]


def test_top_level_not_a_mapping_names_the_value():
    with pytest.raises(EnvDefinitionError) as exc:
        parse_env("just text", source=Path("x.yaml"))
    assert str(exc.value) == "x.yaml: invalid environment definition: (top level): must be a mapping, got 'just text'"


def test_a_networks_probe_interval_reaches_its_spec():
    data = example()
    data["networks"][0]["probeIntervalSeconds"] = 2.5
    env = parse_env(data, source=Path("envs/example.yaml"))
    assert env.networks[0].spec["probeIntervalSeconds"] == 2.5


def test_a_disruption_budget_without_max_unavailable_names_both_problems():
    data = example()
    data["networks"][0]["disruptionBudget"] = {"max": 1}
    assert problems(data) == [
        "  networks[0].disruptionBudget.max: unknown field (allowed: maxUnavailable)",
        "  networks[0].disruptionBudget.maxUnavailable: is required",
    ]


@pytest.mark.parametrize("budget", [0, 2, "25%", "100%"])
def test_a_networks_declared_disruption_budget_reaches_its_spec(budget):
    data = example()
    data["networks"][0]["disruptionBudget"] = {"maxUnavailable": budget}
    env = parse_env(data, source=Path("envs/example.yaml"))
    assert env.networks[0].spec["disruptionBudget"] == {"maxUnavailable": budget}


def test_overlay_shards_default_and_setting():
    assert parse_env(example(), source=Path("envs/example.yaml")).overlay_shards == 16
    data = example()
    data["overlayShards"] = 4
    assert parse_env(data, source=Path("envs/example.yaml")).overlay_shards == 4


# -- the schema (schemas/env.schema.json) ----------------------------------------------------------
def test_the_schema_is_a_valid_json_schema_and_agrees_with_the_code():
    from jsonschema import Draft202012Validator

    from agn.shards import DEFAULT_SHARD_COUNT, MAX_SHARD_COUNT
    from xtask import envschema

    schema = envschema.file_schema()
    Draft202012Validator.check_schema(schema)
    shards = schema["properties"]["overlayShards"]
    assert (shards["default"], shards["maximum"]) == (DEFAULT_SHARD_COUNT, MAX_SHARD_COUNT)
    assert set(envschema.FORMATS) >= {"dns1123-label", "image-reference", "http-url"}


def test_the_probe_interval_rule_uses_the_crds_default_max_age():
    import yaml as _yaml

    from xtask.crds import CRD_DIR
    from xtask.envdef import default_metrics_max_age

    crd = _yaml.safe_load((CRD_DIR / "inferencenetworks.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert default_metrics_max_age() == spec["metricsMaxAgeSeconds"]["default"]
    data = example()
    del data["networks"][0]["metricsMaxAgeSeconds"]
    data["networks"][0]["probeIntervalSeconds"] = default_metrics_max_age()
    assert problems(data) == [
        f"  networks[0].probeIntervalSeconds: must be at most half of metricsMaxAgeSeconds "
        f"({default_metrics_max_age()}), got {default_metrics_max_age()}"
    ]


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda d: d.update(overlayShards=4.0), "overlayShards: must be an integer from 1 to 100, got 4.0"),
        (
            lambda d: d["networks"][0].update(probeIntervalSeconds=float("nan")),
            "networks[0].probeIntervalSeconds: must be a number >= 0.1, got nan",
        ),
        (
            lambda d: d["networks"][0].update(probeIntervalSeconds=float("inf")),
            "networks[0].probeIntervalSeconds: must be a number >= 0.1, got inf",
        ),
        (lambda d: d["providers"].append(dict(d["providers"][0])), "providers: duplicate name 'provider-one'"),
        (lambda d: d.update(name="other"), "name: is 'other' but the file is for environment 'example'"),
    ],
)
def test_what_json_alone_would_let_through_is_refused(change, expected):
    data = example()
    change(data)
    with pytest.raises(EnvDefinitionError) as exc:
        parse_env(data, source=Path("envs/bad.yaml"), expected_name="example")
    assert str(exc.value).split("\n")[1:] == [f"  {expected}"]


@pytest.mark.parametrize(
    "authorization, expected",
    [
        ({"credentials": {"name": "Bad_Name", "key": "k"}}, "must be a Secret's name (a DNS-1123 subdomain)"),
        ({"credentials": {"name": "s", "key": "a/b"}}, "must be a Secret data key"),
        ({"type": "Basic", "credentials": {"name": "s", "key": "k"}}, "must be Bearer (the only type)"),
        ({"credentials": {"name": "s"}}, "providers[0].authorization.credentials"),
        ({"secret": "s"}, "providers[0].authorization"),
    ],
)
def test_a_providers_authorization_is_checked_where_it_enters(authorization, expected):
    data = example()
    data["providers"][0]["authorization"] = authorization
    assert any(expected in p for p in problems(data)), problems(data)


def test_a_providers_authorization_is_rendered_as_its_spec():
    data = example()
    data["providers"][0]["authorization"] = {"credentials": {"name": "engine-key", "key": "token"}}
    envdef = parse_env(data, source=Path("x.yaml"))
    obj = envdef.provider_objects({p.name: "http://h" for p in envdef.providers})[0]
    assert obj["spec"]["authorization"] == {"type": "Bearer", "credentials": {"name": "engine-key", "key": "token"}}
