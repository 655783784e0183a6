"""An error the real API server answers reaches the user naming the request it answered: the verb,
the resource and object, the namespace, then the status and the server's own message, with a hint
where there is one (agn/kuberequest.py, at the boundary agn/kube.py). During a bring-up (``env up
--runtime cluster`` into a namespace being deleted) and during a drain (a ValidatingAdmissionPolicy
denying the real write)."""

from __future__ import annotations

import re
import subprocess
import uuid

import pytest
import yaml

from agn.kube import PROVIDERS, Forbidden, Invalid
from agnprocs import wait_for
from drainenv import DrainEnv
from envcli import REPO, Cli
from kubetest import apply_identities, denying_updates, drain_identity_objects, service_account_kubeconfig

pytestmark = pytest.mark.integration


def terminating_namespace(kube) -> str:
    """A namespace being deleted, for good: no namespace controller runs beside the test API
    server, so it stays Terminating. Returned once the API server refuses new content in it
    (its admission reads namespaces from a cache that may lag the delete a moment)."""
    name = f"t-ending-{uuid.uuid4().hex[:8]}"
    kube.ensure_namespace(name)
    kube.delete_namespace(name)
    probe = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "probe", "namespace": name}}

    def refused() -> bool:
        try:
            kube.apply(probe, dry_run=True)
        except Forbidden:
            return True
        return False

    wait_for(refused, timeout=30, interval=0.1, what=f"namespace {name} to refuse new content")
    return name


def test_a_bring_up_refused_by_the_api_server_names_the_request(control_plane, kube, tmp_path):
    namespace = terminating_namespace(kube)
    envs = tmp_path / "envs"
    envs.mkdir()
    data = yaml.safe_load((REPO / "envs" / "example.yaml").read_text())
    data["namespace"] = namespace
    (envs / "example.yaml").write_text(yaml.safe_dump(data))
    where = ("--context", control_plane.context, "--kubeconfig", str(control_plane.kubeconfig))
    proc = Cli(tmp_path)(
        "env",
        "up",
        "--env",
        "example",
        "--runtime",
        "cluster",
        "--no-wait",
        *where,
        env={"AGN_XTASK_ENVS_DIR": str(envs)},
    )

    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, proc.stderr  # printed once
    # e.g. "error: APPLY serviceaccounts/agn-operator in t-ending-...: 403 Forbidden: serviceaccounts
    # "agn-operator" is forbidden: unable to create new content in namespace ... because it is being terminated"
    said = re.fullmatch(rf"error: APPLY (\w+)/([\w.-]+) in {namespace}: 403 Forbidden: (.*)", errors[0])
    assert said, errors[0]
    resource, name, server = said.groups()
    assert f'{resource} "{name}" is forbidden' in server and "being terminated" in server
    assert f"hint: namespace {namespace} is being deleted: nothing can be created in it until it is gone" in (
        proc.stderr.splitlines()
    )
    assert "Traceback" not in proc.stderr


@pytest.fixture
def env(kube, namespace, agn, control_plane, tmp_path) -> DrainEnv:
    return DrainEnv(kube, namespace, agn, control_plane, tmp_path).up()


def test_a_drain_write_denied_by_admission_names_the_request(env: DrainEnv):
    frozen = "writes to this provider are frozen (test admission policy)"
    token = uuid.uuid4().hex[:8]
    with denying_updates(
        env.kube,
        env.ns,
        "inferenceproviders",
        expression="request.dryRun == true",  # the dry run passes; the real write is denied
        message=frozen,
        object_selector={"matchLabels": {"reject-writes": token}},
    ):
        env.kube.merge_patch(PROVIDERS, env.ns, "p-two", {"metadata": {"labels": {"reject-writes": token}}})

        def denied() -> bool:
            try:
                env.kube.merge_patch(PROVIDERS, env.ns, "p-two", {"metadata": {"annotations": {"probe": token}}})
            except Invalid:
                return True
            return False

        wait_for(denied, timeout=30, interval=0.2, what="the admission policy to take effect")
        proc = env.run("--provider", "p-two")

    assert proc.returncode == 3, proc.stdout + proc.stderr  # refused on its merits, nothing left changed
    shown = proc.stdout + proc.stderr
    request = f"PATCH inferenceproviders/p-two in {env.ns}: 422 Unprocessable Entity: "
    assert request in shown, shown
    line = next(line for line in shown.splitlines() if request in line)
    assert frozen in line  # the server's message, kept whole
    assert env.drain_value("p-two") is None


def test_a_drain_write_the_identity_may_not_make_names_the_request_and_the_rbac(env: DrainEnv):
    """The shipped agn-provider-drain identity with ``patch`` taken out of its Role: the dry run's
    PATCH is refused by the authorizer, and the CLI says which request and which verb."""
    objects = drain_identity_objects(env.ns)  # this test's one network "net" (its drain lock's Lease)
    for role in (o for o in objects if o["kind"] == "Role"):
        for rule in role["rules"]:
            if "inferenceproviders" in rule["resources"]:
                rule["verbs"] = [v for v in rule["verbs"] if v != "patch"]
    apply_identities(env.kube, env.ns, objects)
    kubeconfig = service_account_kubeconfig(env.kube, env.cp.kubeconfig, env.ns, "agn-provider-drain", env.tmp / "sa")
    # Two providers (gw-a: p-one, p-two): a fan-out sends its dry run first (one write is its own).
    argv = [a for a in env.argv("--gateway", "gw-a") if a not in ("--context", env.cp.context)]
    proc = subprocess.run(
        [*argv, "--kubeconfig", str(kubeconfig)], capture_output=True, text=True, env=env.env(), timeout=120
    )

    assert proc.returncode == 3, proc.stdout + proc.stderr  # refused before any write
    shown = proc.stdout + proc.stderr
    request = f"PATCH inferenceproviders/p-two in {env.ns} (dry run): 403 Forbidden: "
    assert request in shown, shown
    line = next(line for line in shown.splitlines() if request in line)
    assert 'cannot patch resource "inferenceproviders"' in line  # the authorizer's own words, kept
    assert env.drain_value("p-two") is None
