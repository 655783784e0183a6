"""The rendered pods as docker run arguments (tests/dockerpod.py): every setting comes from the manifest."""

from __future__ import annotations

import copy

import pytest

from dockerpod import CREDENTIALS_MOUNT, KUBECONFIG, Probe, UnsupportedPodSpec, container_run, host_network_args
from xtask.envdef import load_env
from xtask.manifests import render

OBJECTS = render(load_env("example"))
ENTRYPOINT = ["python", "-m"]
CREDENTIALS = {"agn-operator": "/creds/operator", "agn-gateway-consumer-a": "/creds/gw-a"}


def deployment(name: str) -> dict:
    return copy.deepcopy(next(o for o in OBJECTS if o["kind"] == "Deployment" and o["metadata"]["name"] == name))


def run(dep: dict, *, port: int | None = 41000, entrypoint=ENTRYPOINT):
    return container_run(dep, name="c", image_entrypoint=entrypoint, host_port=port, credentials=CREDENTIALS)


def flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_operator_runs_as_the_manifest_says():
    r = run(deployment("agn-operator"))
    argv = r.argv
    assert argv[:3] == ["run", "--detach", "--name"]
    assert flag_values(argv, "--user") == ["10001:10001"]
    assert "--read-only" in argv and "--privileged" not in argv
    assert flag_values(argv, "--security-opt") == ["no-new-privileges"]  # RuntimeDefault seccomp: no override
    assert flag_values(argv, "--cap-drop") == ["ALL"] and flag_values(argv, "--cap-add") == []
    assert flag_values(argv, "--network") == ["host"]
    assert flag_values(argv, "--memory") == [str(256 * 2**20)]
    assert flag_values(argv, "--stop-timeout") == ["10"]
    assert flag_values(argv, "--tmpfs") == []  # no emptyDir in the manifests: nothing writable
    assert flag_values(argv, "--mount") == [f"type=bind,source=/creds/operator,target={CREDENTIALS_MOUNT},readonly"]
    assert flag_values(argv, "--env") == [f"KUBECONFIG={KUBECONFIG}"]
    assert "--entrypoint" not in argv  # the manifest's command is the image's entrypoint
    image = argv.index("agn:dev")
    assert argv[image + 1 :] == [
        "agn.operator",
        *("--namespace", "agn-example", "--overlay-shards", "16"),
        *("--health-host", "127.0.0.1", "--health-port", "41000"),
    ]
    assert r.probes == [Probe("readiness", "http", 41000, "/healthz"), Probe("liveness", "http", 41000, "/healthz")]
    assert r.service_account == "agn-operator" and r.port == 41000


def test_fake_provider_gets_no_credentials_and_a_tcp_liveness_probe():
    r = run(deployment("fake-provider-one"))
    assert flag_values(r.argv, "--mount") == [] and flag_values(r.argv, "--env") == []
    assert r.service_account is None
    assert r.probes == [Probe("readiness", "http", 41000, "/healthz"), Probe("liveness", "tcp", 41000)]
    assert r.argv[-6:] == ["--name", "provider-one", "--host", "127.0.0.1", "--port", "41000"]


def test_a_change_to_the_manifest_changes_the_container():
    dep = deployment("agn-gateway-consumer-a")
    pod = dep["spec"]["template"]["spec"]
    container = pod["containers"][0]
    container["securityContext"] = {
        "readOnlyRootFilesystem": False,
        "allowPrivilegeEscalation": True,
        "capabilities": {"drop": ["NET_RAW"], "add": ["NET_BIND_SERVICE"]},
        "runAsUser": 20002,
        "seccompProfile": {"type": "Unconfined"},
    }
    pod["volumes"] = [{"name": "scratch", "emptyDir": {"sizeLimit": "64Mi"}}]
    container["volumeMounts"] = [{"name": "scratch", "mountPath": "/tmp"}]
    container["resources"]["limits"]["memory"] = "1Gi"
    container["command"] = ["/opt/agn/bin/python", "-X", "dev", "-m"]
    argv = run(dep).argv
    assert "--read-only" not in argv
    assert flag_values(argv, "--user") == ["20002:10001"]  # the container's uid over the pod's, the pod's gid
    assert flag_values(argv, "--security-opt") == ["seccomp=unconfined"]
    assert flag_values(argv, "--cap-drop") == ["NET_RAW"] and flag_values(argv, "--cap-add") == ["NET_BIND_SERVICE"]
    assert flag_values(argv, "--tmpfs") == [f"/tmp:rw,exec,nosuid,nodev,mode=1777,size={64 * 2**20}"]
    assert flag_values(argv, "--memory") == [str(2**30)]
    assert flag_values(argv, "--entrypoint") == ["/opt/agn/bin/python"]
    assert argv[argv.index("agn:dev") + 1 : argv.index("agn:dev") + 5] == ["-X", "dev", "-m", "agn.gateway"]


def test_host_network_args_move_only_the_container_port_and_the_wildcard_host():
    args = ["x", "--port", "8080", "--health-port", "8080", "--replicas", "8080", "--host", "0.0.0.0", "--port", "9"]
    assert host_network_args(args, container_port=8080, host_port=4242) == [
        *("x", "--port", "4242", "--health-port", "4242", "--replicas", "8080"),
        *("--host", "127.0.0.1", "--port", "9"),
    ]


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda pod: pod["containers"][0]["securityContext"].update(runAsUser=0), "runAsNonRoot with runAsUser 0"),
        (lambda pod: pod.update(serviceAccountName="someone-else"), "no credentials were given for it"),
        (
            lambda pod: (
                pod.update(volumes=[{"name": "v", "hostPath": {"path": "/"}}])
                or pod["containers"][0].update(volumeMounts=[{"name": "v", "mountPath": "/host"}])
            ),
            "volume 'v' is not an emptyDir",
        ),
        (lambda pod: pod["containers"].append(copy.deepcopy(pod["containers"][0])), "2 containers"),
        (lambda pod: pod["securityContext"].update(seccompProfile={"type": "Localhost"}), "seccompProfile Localhost"),
        (
            lambda pod: pod["containers"][0]["livenessProbe"].update(httpGet={"path": "/", "port": "admin"}),
            "port 'admin'",
        ),
    ],
)
def test_what_is_not_modelled_is_refused_by_name(edit, message):
    dep = deployment("agn-gateway-consumer-a")
    edit(dep["spec"]["template"]["spec"])
    with pytest.raises(UnsupportedPodSpec, match=message):
        run(dep)
