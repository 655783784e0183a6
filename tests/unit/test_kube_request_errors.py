"""An error of the API server names the request it answered: the verb, the resource and object,
the namespace, then the status and the server's message, with a hint where there is one
(agn/kuberequest.py, agn/kubeerrors.py, agn/kubeconnect.py's name_requests); ``python -m xtask``
prints it once, the hint after it, and the traceback only under ``-v``."""

from __future__ import annotations

import json
from types import SimpleNamespace

import click
import pytest

from agn.kubeconnect import name_requests
from agn.kubeerrors import Forbidden, Gone, Invalid, KubeError, NotFound, from_api_exception, watch_error
from agn.kuberequest import ApiRequest, attach, parse, request_of
from xtask.__main__ import main

SERVER = "https://127.0.0.1:6443"
PROVIDER = f"{SERVER}/apis/agn.dev/v1/namespaces/agn-example/inferenceproviders/provider-one"


@pytest.mark.parametrize(
    ("method", "url", "body", "content_type", "said"),
    [
        (
            "PATCH",
            PROVIDER,
            None,
            "application/merge-patch+json",
            "PATCH inferenceproviders/provider-one in agn-example",
        ),
        ("PATCH", PROVIDER + "?dryRun=All", None, "", "PATCH inferenceproviders/provider-one in agn-example (dry run)"),
        ("PATCH", PROVIDER + "/status", None, "", "PATCH inferenceproviders/provider-one/status in agn-example"),
        ("GET", PROVIDER, None, "", "GET inferenceproviders/provider-one in agn-example"),
        (
            "GET",
            PROVIDER.rsplit("/", 1)[0] + "?labelSelector=a%3Db",
            None,
            "",
            "LIST inferenceproviders in agn-example",
        ),
        (
            "GET",
            PROVIDER.rsplit("/", 1)[0] + "?watch=true&resourceVersion=7",
            None,
            "",
            "WATCH inferenceproviders in agn-example",
        ),
        ("PUT", PROVIDER, None, "", "UPDATE inferenceproviders/provider-one in agn-example"),
        ("DELETE", PROVIDER, None, "", "DELETE inferenceproviders/provider-one in agn-example"),
        ("DELETE", PROVIDER.rsplit("/", 1)[0], None, "", "DELETECOLLECTION inferenceproviders in agn-example"),
        (
            "POST",
            f"{SERVER}/api/v1/namespaces",
            {"metadata": {"name": "agn-example"}},
            "",
            "CREATE namespaces/agn-example",
        ),
        ("GET", f"{SERVER}/api/v1/namespaces/agn-example", None, "", "GET namespaces/agn-example"),
        ("PUT", f"{SERVER}/api/v1/namespaces/agn-example/finalize", None, "", "UPDATE namespaces/agn-example/finalize"),
        (
            "PATCH",
            f"{SERVER}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/inferenceproviders.agn.dev?fieldManager=x",
            None,
            "application/apply-patch+yaml",
            "APPLY customresourcedefinitions/inferenceproviders.agn.dev",
        ),
        ("GET", f"{SERVER}/apis/agn.dev/v1", None, "", "GET /apis/agn.dev/v1"),
        ("GET", f"{SERVER}/version", None, "", "GET /version"),
    ],
)
def test_a_request_is_named_by_its_verb_resource_object_and_namespace(method, url, body, content_type, said):
    assert str(parse(method, url, body=body, content_type=content_type)) == said


def test_can_i_asks_the_rbac_question_of_the_request():
    patch = parse("PATCH", PROVIDER, content_type="application/apply-patch+yaml")
    assert patch.can_i() == "kubectl auth can-i patch inferenceproviders.agn.dev/provider-one -n agn-example"
    status = parse("PATCH", PROVIDER + "/status")
    assert status.can_i() == (
        "kubectl auth can-i patch inferenceproviders.agn.dev/provider-one --subresource=status -n agn-example"
    )
    assert parse("POST", f"{SERVER}/api/v1/namespaces").can_i() == "kubectl auth can-i create namespaces"


def api_exception(status: int, phrase: str, body: object, request: ApiRequest | None = None) -> Exception:
    exc = Exception(phrase)
    exc.status, exc.reason = status, phrase  # type: ignore[attr-defined]
    exc.body = json.dumps(body) if isinstance(body, dict) else body  # type: ignore[attr-defined]
    if request is not None:
        attach(exc, request)
    return exc


def status_body(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def test_a_404_names_the_request_and_keeps_the_status_and_the_servers_message():
    message = 'inferenceproviders.agn.dev "provider-one" not found'
    exc = api_exception(404, "Not Found", status_body(404, "NotFound", message), parse("PATCH", PROVIDER))
    err = from_api_exception(exc, server=SERVER)
    assert isinstance(err, NotFound)
    assert str(err) == f"PATCH inferenceproviders/provider-one in agn-example: 404 Not Found: {message}"
    assert (err.status, err.reason, err.server_message) == (404, "NotFound", message)
    assert err.request == parse("PATCH", PROVIDER)
    assert err.hint is None  # the object is missing: the message says all there is
    assert err.__cause__ is exc


def test_a_404_without_a_status_object_says_nothing_serves_the_resource():
    """The answer of a path no handler serves (a CRD not served yet) is a bare 404 page."""
    request = parse("PATCH", PROVIDER)
    err = from_api_exception(api_exception(404, "Not Found", "404 page not found\n", request), server=SERVER)
    assert str(err) == "PATCH inferenceproviders/provider-one in agn-example: 404 Not Found"
    assert err.hint == (
        "the API server serves no inferenceproviders.agn.dev (is its CustomResourceDefinition installed and Established?)"
    )


def test_a_bare_404_to_discovery_says_the_server_is_no_api_server():
    """What etcd answers when it listens where kube-apiserver should (the symptom of issue #42)."""
    err = from_api_exception(api_exception(404, "Not Found", "404 page not found\n", parse("GET", f"{SERVER}/apis")))
    assert str(err) == "GET /apis: 404 Not Found"
    assert err.hint == "the server does not serve the Kubernetes API: is its address a kube-apiserver's?"


def test_a_403_hints_at_rbac_or_at_a_namespace_being_deleted():
    request = parse("PATCH", PROVIDER)
    denied = 'inferenceproviders.agn.dev "provider-one" is forbidden: User "bob" cannot patch resource'
    err = from_api_exception(api_exception(403, "Forbidden", status_body(403, "Forbidden", denied), request))
    assert isinstance(err, Forbidden)
    assert str(err) == f"PATCH inferenceproviders/provider-one in agn-example: 403 Forbidden: {denied}"
    assert err.hint == f"the identity lacks RBAC permission; check with: {request.can_i()}"

    create = parse("POST", PROVIDER.rsplit("/", 1)[0], body={"metadata": {"name": "provider-one"}})
    ending = 'inferenceproviders.agn.dev "provider-one" is forbidden: unable to create new content in namespace agn-example because it is being terminated'
    err = from_api_exception(api_exception(403, "Forbidden", status_body(403, "Forbidden", ending), create))
    assert str(err).startswith("CREATE inferenceproviders/provider-one in agn-example: 403 Forbidden: ")
    assert err.hint == "namespace agn-example is being deleted: nothing can be created in it until it is gone"

    webhook = 'admission webhook "deny.example.com" denied the request: no'
    assert (
        from_api_exception(api_exception(403, "Forbidden", status_body(403, "Forbidden", webhook), request)).hint
        is None
    )


def test_an_admission_denial_is_invalid_and_names_the_request():
    denied = "ValidatingAdmissionPolicy 'agn-drain-holds' with binding 'agn-drain-holds' denied request: no"
    err = from_api_exception(
        api_exception(422, "Unprocessable Entity", status_body(422, "Invalid", denied), parse("PATCH", PROVIDER))
    )
    assert isinstance(err, Invalid)
    assert str(err) == f"PATCH inferenceproviders/provider-one in agn-example: 422 Unprocessable Entity: {denied}"


def test_connection_answers_lead_with_the_server_and_name_the_request_after():
    request = parse("GET", PROVIDER)
    err = from_api_exception(
        api_exception(401, "Unauthorized", status_body(401, "Unauthorized", "x"), request), server=SERVER, context="c"
    )
    assert str(err) == f"API server {SERVER} (context 'c') rejected the credentials: 401 Unauthorized ({request})"


def test_without_a_known_request_the_servers_message_stands_alone():
    err = from_api_exception(api_exception(409, "Conflict", status_body(409, "AlreadyExists", "it exists")))
    assert str(err) == "it exists" and err.request is None and err.reason == "AlreadyExists"


def test_a_watch_error_event_names_the_watch():
    request = ApiRequest(
        "WATCH", "/apis/agn.dev/v1/namespaces/ns/inferenceproviders", "inferenceproviders", "agn.dev", namespace="ns"
    )
    gone = watch_error({"code": 410, "reason": "Expired", "message": "too old resource version: 1 (5)"}, request)
    assert isinstance(gone, Gone)
    assert str(gone) == "WATCH inferenceproviders in ns: 410 Gone: too old resource version: 1 (5)"
    assert watch_error({"code": 410}).reason == "Expired"


class FakeRest:
    """A REST layer answering each request with the next of ``answers`` (a status, or an exception)."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)

    def request(self, method, url, headers=None, body=None, post_params=None, _request_timeout=None):
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return SimpleNamespace(status=answer, reason="Not Found", read=lambda: b"", data=b"404 page not found")


class ClientError(Exception):
    def __init__(self, *, http_resp, body, data) -> None:
        super().__init__(http_resp.status)
        self.status, self.reason, self.body = http_resp.status, http_resp.reason, http_resp.data.decode()


def raise_client_error(**kwargs) -> None:
    raise ClientError(**kwargs)


def test_name_requests_makes_every_failed_request_carry_itself():
    rest = FakeRest(200, 404, ConnectionRefusedError("refused"))
    client = SimpleNamespace(rest_client=rest)
    name_requests(client, raise_client_error)

    assert rest.request("GET", PROVIDER).status == 200
    with pytest.raises(ClientError) as answered:
        rest.request("PATCH", PROVIDER, headers={"Content-Type": "application/apply-patch+yaml"}, body={})
    assert str(request_of(answered.value)) == "APPLY inferenceproviders/provider-one in agn-example"
    with pytest.raises(ConnectionRefusedError) as unanswered:
        body = {"metadata": {"name": "agn-example"}}
        rest.request("POST", f"{SERVER}/api/v1/namespaces", headers={}, body=body)
    assert str(request_of(unanswered.value)) == "CREATE namespaces/agn-example"


def test_request_of_finds_the_request_on_the_error_raised_while_handling_it():
    original = Exception("answer")
    attach(original, parse("GET", PROVIDER))
    try:
        try:
            raise original
        except Exception:
            raise KeyError("the dynamic client's own error") from None
    except KeyError as wrapped:
        assert request_of(wrapped) == parse("GET", PROVIDER)
    assert request_of(Exception("no request")) is None


def failing(error: Exception) -> click.Command:
    @click.command()
    @click.option("-v", "--verbose", is_flag=True)
    def cmd(verbose: bool) -> None:
        raise error

    return cmd


def test_the_cli_prints_the_error_once_with_its_hint_and_the_traceback_only_under_v(capsys):
    request = parse("PATCH", PROVIDER)
    error = from_api_exception(api_exception(404, "Not Found", "404 page not found", request), server=SERVER)

    assert main([], command=failing(error)) == 1
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"error: {error}", f"hint: {error.hint}"]
    assert lines[0] == "error: PATCH inferenceproviders/provider-one in agn-example: 404 Not Found"

    assert main(["-v"], command=failing(error)) == 1
    shown = capsys.readouterr().err
    assert "Traceback (most recent call last)" in shown and shown.count(f"error: {error}") == 1


def test_kube_errors_keep_their_keyword_interface():
    err = KubeError("plain", status=500, reason="InternalError")
    assert (str(err), err.status, err.reason, err.hint, err.request) == ("plain", 500, "InternalError", None, None)
