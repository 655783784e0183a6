"""The PromQL gate's reading of Prometheus answers (xtask/drain/gates/promql.py): non-empty and true
over the whole soak, or not held with the reason. The answers are the JSON shapes of
Prometheus' HTTP API; tests/e2e/test_prometheus.py runs the gate against the real server."""

from __future__ import annotations

import json
import math

import pytest

from xtask.drain.gates.promql import (
    MAX_POINTS,
    PromQLGate,
    Refusal,
    check_url,
    judge_instant,
    judge_matrix,
    parse_response,
    soak_range,
)
from xtask.errors import UsageError

START, STEP = 1_700_000_000.0, 1.0


def matrix(*series: tuple[dict, list]) -> dict:
    return {"resultType": "matrix", "result": [{"metric": m, "values": v} for m, v in series]}


def points(values: list[str], *, start: float = START) -> list:
    return [[start + i * STEP, v] for i, v in enumerate(values)]


def judge(data: dict, evaluations: int = 3):
    return judge_matrix(data, start=START, end=START + (evaluations - 1) * STEP, step=STEP)


class TestMatrix:
    def test_true_at_every_evaluation_holds(self):
        verdict = judge(matrix(({}, points(["1", "1", "1"]))))
        assert verdict.held and verdict.value == 1
        assert "1 series true at each of 3 evaluations" in verdict.detail

    def test_empty_result_is_not_a_pass(self):
        verdict = judge({"resultType": "matrix", "result": []})
        assert not verdict.held and verdict.value is None
        assert verdict.detail == "the result is empty over the whole soak"

    def test_a_zero_anywhere_breaches_and_names_the_series_and_value(self):
        metric = {"__name__": "up", "job": "agn-gateway", "consumer": "consumer-a"}
        verdict = judge(matrix((metric, points(["1", "0", "1"]))))
        assert not verdict.held and verdict.value == 0
        assert verdict.detail.startswith('up{consumer="consumer-a", job="agn-gateway"} is 0 at ')
        assert "(1s into the soak)" in verdict.detail

    def test_nan_is_false(self):
        verdict = judge(matrix(({}, points(["1", "1", "NaN"]))))
        assert not verdict.held and math.isnan(verdict.value)

    def test_mixed_vector_one_false_series_breaches(self):
        good = ({"consumer": "a"}, points(["1", "1", "1"]))
        bad = ({"consumer": "b"}, points(["1", "1", "0"]))
        verdict = judge(matrix(good, bad))
        assert not verdict.held and verdict.detail.startswith('{consumer="b"} is 0')

    def test_an_instant_with_no_sample_breaches(self):
        # A filter such as `ratio < 0.01` drops the series while the ratio is higher.
        verdict = judge(matrix(({}, [[START, "1"], [START + 2 * STEP, "1"]])))
        assert not verdict.held and verdict.value is None
        assert "the result is empty at " in verdict.detail and "empty at 1 of 3 evaluations" in verdict.detail

    def test_two_series_covering_the_window_between_them_hold(self):
        # A series replaced by another (a label changed) leaves no instant empty.
        first = ({"pod": "a"}, [[START, "1"], [START + STEP, "1"]])
        second = ({"pod": "b"}, [[START + 2 * STEP, "2"]])
        verdict = judge(matrix(first, second))
        assert verdict.held and verdict.value == 2  # the newest sample

    def test_negative_and_infinite_values_are_true(self):
        assert judge(matrix(({}, points(["-1", "+Inf", "0.5"])))).held

    def test_a_result_that_is_not_a_matrix(self):
        verdict = judge({"resultType": "vector", "result": []})
        assert not verdict.held and "not a matrix" in verdict.detail


class TestInstant:
    def test_scalar(self):
        assert judge_instant({"resultType": "scalar", "result": [START, "1"]}).held
        verdict = judge_instant({"resultType": "scalar", "result": [START, "0"]})
        assert not verdict.held and verdict.value == 0 and verdict.detail == "scalar 0: false"

    def test_vector(self):
        ok = {"metric": {"a": "1"}, "value": [START, "3"]}
        assert judge_instant({"resultType": "vector", "result": [ok]}).held
        nan = {"metric": {"a": "2"}, "value": [START, "NaN"]}
        verdict = judge_instant({"resultType": "vector", "result": [ok, nan]})
        assert not verdict.held and verdict.detail == '{a="2"} is NaN: false'

    def test_empty_vector_is_not_a_pass(self):
        verdict = judge_instant({"resultType": "vector", "result": []})
        assert not verdict.held and verdict.detail == "the result is empty"

    def test_string_is_refused(self):
        verdict = judge_instant({"resultType": "string", "result": [START, "x"]})
        assert not verdict.held and "gives a string" in verdict.detail


class TestResponses:
    def test_success(self):
        body = {"status": "success", "data": {"resultType": "vector", "result": []}}
        assert parse_response(200, json.dumps(body).encode()) == body["data"]

    def test_bad_expression(self):
        body = {"status": "error", "errorType": "bad_data", "error": 'invalid parameter "query": parse error'}
        refusal = parse_response(400, json.dumps(body).encode())
        assert refusal == Refusal(
            'Prometheus answered 400: bad_data: invalid parameter "query": parse error', bad_expression=True
        )

    def test_execution_error_is_not_a_bad_expression(self):
        body = {"status": "error", "errorType": "execution", "error": "query timed out"}
        refusal = parse_response(422, json.dumps(body).encode())
        assert isinstance(refusal, Refusal) and not refusal.bad_expression
        assert refusal.why == "Prometheus answered 422: execution: query timed out"

    def test_error_status_with_200(self):
        refusal = parse_response(200, b'{"status": "error", "errorType": "internal", "error": "boom"}')
        assert isinstance(refusal, Refusal) and refusal.why == "Prometheus answered 200: internal: boom"

    def test_not_json(self):
        refusal = parse_response(502, b"<html>Bad Gateway</html>")
        assert isinstance(refusal, Refusal)
        assert refusal.why == "Prometheus answered 502 with a body that is not JSON: '<html>Bad Gateway</html>'"

    def test_json_without_data(self):
        for body in (b'{"status": "success"}', b"[1]"):
            assert isinstance(parse_response(200, body), Refusal)


class TestUrlAndWindow:
    @pytest.mark.parametrize(
        "url", ["ftp://host:9090", "localhost:9090", "http://", "http://h:port", "http://h:9090/?x=1", ""]
    )
    def test_bad_urls_are_usage_errors_naming_the_url(self, url):
        with pytest.raises(UsageError) as err:
            check_url(url)
        assert f"--prometheus {url!r}" in str(err.value)

    def test_good_urls(self):
        assert check_url("http://127.0.0.1:9090/") == "http://127.0.0.1:9090"
        assert check_url("https://prom.example/sub/path") == "https://prom.example/sub/path"

    def test_empty_expression(self):
        with pytest.raises(UsageError, match="--gate-promql: the expression is empty"):
            PromQLGate("http://127.0.0.1:9090", "  ")

    def test_soak_range_from_begin_or_window(self):
        assert soak_range(100.0, 105.0004, window_seconds=30, step=1.0) == (100.0, 105.0, 1.0)
        assert soak_range(None, 105.0, window_seconds=30, step=1.0) == (75.0, 105.0, 1.0)
        start, end, step = soak_range(0.0, 86_400.0, window_seconds=0, step=1.0)
        assert (end - start) / step <= MAX_POINTS and step > 1

    def test_a_prometheus_that_does_not_answer_is_not_held(self, unused_port):
        gate = PromQLGate(f"http://127.0.0.1:{unused_port}", "vector(1)", timeout=2)
        gate.begin()
        reading = gate.read(1)
        assert not reading.held and reading.value is None and reading.gate == "promql"
        assert f"Prometheus at http://127.0.0.1:{unused_port} does not answer" in reading.detail


@pytest.fixture
def unused_port() -> int:
    """A loopback port nothing listens on (taken from the kernel, then released)."""
    from xtask.runtime.controlplane import free_port

    return free_port()
