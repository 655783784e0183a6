"""A drain in waves, its pure parts: the error-ratio gate over real gateway metrics text, where
the gateways' /metrics are, the request's checks, the journal's wave records, and what
``--resume`` checks before writing."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from agn.gateway.metrics import BAD_REQUEST, NO_ROUTE, ROUTED, UPSTREAM_ERROR, GatewayMetrics
from xtask.drain.core.amounts import Amount
from xtask.drain.core.changes import plan_changes
from xtask.drain.core.holds import OPERATION
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.selection import Selector
from xtask.drain.core.states import RestoreOutcome, RunState, WaveState
from xtask.drain.core.waves import resume_problems
from xtask.drain.edges.journal import Journal, JournalError, JournalHeader, read_journal
from xtask.drain.gates.error_ratio import (
    ErrorRatioGate,
    ScrapeError,
    gateway_metrics_urls,
    parse_counts,
    parse_overrides,
    scrape,
)
from xtask.drain.report import Report, exit_code
from xtask.errors import ExitCode, UsageError


# -- the error-ratio gate, over the exposition of a real GatewayMetrics ----------------------------
class Gateway:
    """A gateway's metrics registry; ``restart`` replaces it as a restarted process would."""

    def __init__(self) -> None:
        self.metrics = GatewayMetrics(accepted=lambda: 1, serving=lambda: 1)
        self.down = False

    def restart(self) -> None:
        self.metrics = GatewayMetrics(accepted=lambda: 1, serving=lambda: 1)

    def text(self) -> str:
        return generate_latest(self.metrics.registry).decode()

    def count(self, outcome: str, n: int) -> None:
        for _ in range(n):
            self.metrics.request(outcome, "admitted" if outcome != NO_ROUTE else None)


def gate_over(gateways: dict[str, Gateway], max_ratio: float = 0.1) -> ErrorRatioGate:
    def read(url: str):
        gw = gateways[url]
        if gw.down:
            raise ScrapeError("did not answer: connection refused")
        return parse_counts(gw.text())

    return ErrorRatioGate({name: name for name in gateways}, max_ratio=max_ratio, read=read)


def test_error_ratio_counts_only_the_window_and_sums_the_consumers():
    a, b = Gateway(), Gateway()
    a.count(UPSTREAM_ERROR, 50)  # before the soak: not counted
    gate = gate_over({"c-a": a, "c-b": b})
    gate.begin()
    a.count(ROUTED, 90)
    a.count(UPSTREAM_ERROR, 5)
    b.count(NO_ROUTE, 5)
    b.count(BAD_REQUEST, 100)  # the client's fault: on neither side
    r = gate.read(5.0)
    assert (r.gate, r.held, r.value, r.threshold) == ("error-ratio", True, 0.1, "<= 0.1")
    assert "c-a: 5 of 95 failed" in r.detail and "c-b: 5 of 5 failed" in r.detail


def test_error_ratio_over_the_limit_is_not_held():
    a = Gateway()
    gate = gate_over({"c-a": a}, max_ratio=0.01)
    gate.begin()
    a.count(ROUTED, 8)
    a.count(UPSTREAM_ERROR, 2)
    r = gate.read(5.0)
    assert not r.held and r.value == 0.2


def test_no_requests_is_not_held_and_says_so():
    gate = gate_over({"c-a": Gateway()})
    gate.begin()
    r = gate.read(5.0)
    assert not r.held and r.value is None and "no completion requests" in r.detail


def test_a_gateway_restart_in_the_window_is_not_trusted():
    a = Gateway()
    a.count(ROUTED, 10)
    gate = gate_over({"c-a": a})
    gate.begin()
    a.restart()
    a.count(ROUTED, 20)  # more than before, yet a new process: the counts are not the window's
    r = gate.read(5.0)
    assert not r.held and r.value is None and "restart" in r.detail and "c-a" in r.detail


def test_a_gateway_that_does_not_answer_is_not_held_naming_it():
    a, b = Gateway(), Gateway()
    gate = gate_over({"c-a": a, "c-b": b})
    gate.begin()
    a.count(ROUTED, 10)
    b.down = True
    r = gate.read(5.0)
    assert not r.held and r.value is None and "gateway of c-b" in r.detail


def test_scrape_reads_http_and_names_what_is_wrong():
    gw = Gateway()
    gw.count(ROUTED, 3)
    bodies = {"/metrics": gw.text().encode(), "/junk": b"this is { not prometheus\n"}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = bodies.get(self.path)
            self.send_response(200 if body else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert scrape(f"{base}/metrics").by_outcome == {ROUTED: 3.0}
        with pytest.raises(ScrapeError, match="HTTP 404"):
            scrape(f"{base}/nothing")
        with pytest.raises(ScrapeError, match="not Prometheus text"):
            scrape(f"{base}/junk")
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(ScrapeError, match="did not answer"):
        scrape(f"{base}/metrics", timeout=2)


# -- where the gateways' /metrics are ------------------------------------------------------------------
def consumer(address):
    return {"metadata": {"name": "x"}, "status": {"address": address} if address else {}}


def test_metrics_urls_from_the_consumers_status_or_the_override():
    urls, problems = gateway_metrics_urls(
        {
            "c-local": consumer("http://127.0.0.1:4001"),
            "c-pod": consumer("http://0.0.0.0:8080"),
            "c-none": consumer(None),
            "c-forwarded": consumer("http://0.0.0.0:8080"),
        },
        {"c-forwarded": "http://127.0.0.1:9999/metrics"},
    )
    assert urls == {"c-local": "http://127.0.0.1:4001/metrics", "c-forwarded": "http://127.0.0.1:9999/metrics"}
    assert problems == [
        "consumer c-none: its gateway reports no address (status.address)",
        "consumer c-pod: its gateway reports http://0.0.0.0:8080, an address it listens on, not one to dial",
    ]


@pytest.mark.parametrize(
    "value, message",
    [
        ("c-a", "is not CONSUMER=URL"),
        ("=http://x", "is not CONSUMER=URL"),
        ("c-a=localhost:80", "is not an http:// or https:// URL"),
        ("c-a=file:///etc/passwd", "is not an http:// or https:// URL"),
    ],
)
def test_bad_overrides_are_named(value, message):
    with pytest.raises(ValueError, match=message):
        parse_overrides([value])


# -- the request ---------------------------------------------------------------------------------------
def request(**kw):
    base = {"selector": Selector(gateway="gw"), "drain": True, "network": "net", "consumers": ("c-a",)}
    return DrainRequest(**{**base, **kw})


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"wave_size": Amount(2), "network": None, "consumers": ()}, "--wave-size: each wave must converge"),
        ({"resume": Path("j"), "network": None, "consumers": ()}, "--resume: each wave must converge"),
        ({"soak": 5.0}, "--soak applies to a drain in waves"),
        ({"on_breach": "restore", "gate_options": {"max_error_ratio": 0.1}}, "--max-error-ratio, --on-breach applies"),
        ({"wave_size": Amount(2), "resume": Path("j")}, "do not give --wave-size with it"),
        (
            {"wave_size": Amount(2), "gate_options": {"consumer_gateway_metrics": ("c-b=http://127.0.0.1:1",)}},
            "--consumer-gateway-metrics names c-b, which is not",
        ),
        (
            {"wave_size": Amount(2), "gate_options": {"consumer_gateway_metrics": ("c-a",)}},
            "--consumer-gateway-metrics: 'c-a' is not CONSUMER=URL",
        ),
        ({"wave_size": Amount(2), "gate_options": {"gate_promql": "up"}}, "--gate-promql and --prometheus go together"),
    ],
)
def test_wave_flags_that_make_no_sense_are_usage_errors(kw, message):
    with pytest.raises(UsageError, match=message):
        request(**kw)


def test_wave_defaults():
    req = request(wave_size=Amount(10, percent=True))
    assert req.in_waves and req.soak_seconds == 30.0 and req.gate_options == {} and req.on_breach is None


def test_a_breach_exits_10_unless_its_restoration_is_incomplete():
    def code(restorations: list[dict]) -> ExitCode:
        breached = [{"wave": 1, "providers": ["a"], "state": "breached", "gates": []}]
        report = Report(None, "ns", "drain", "gateway g", False, waves=breached, restorations=restorations)
        return exit_code(report)

    assert code([]) == ExitCode.GATE_BREACHED == 10
    ok = [{"provider": "a", "outcome": RestoreOutcome.RESTORED}]
    bad = [{"provider": "a", "outcome": RestoreOutcome.OTHER_WRITER}]
    assert code(ok) == ExitCode.GATE_BREACHED
    assert code(bad) == ExitCode.NEEDS_INSPECTION


# -- the journal's waves, and --resume's checks ------------------------------------------------------------
def provider(name: str, *, gen: int = 3, rv: str = "10", drain=None, operation: str | None = "older") -> dict:
    spec: dict = {"endpoint": "http://127.0.0.1/x"}
    if drain is not None:
        spec["trafficPolicy"] = {"drain": drain}
    annotations = {OPERATION: operation} if operation else {}
    return {
        "metadata": {"name": name, "generation": gen, "resourceVersion": rv, "annotations": annotations},
        "spec": spec,
    }


WAVES = [["a", "b"], ["c", "d"], ["e"]]


def journal_in_waves(tmp_path: Path) -> Journal:
    changes = plan_changes([provider(n) for n in "abcd"], requested=True)  # e: already drained
    return Journal.create(
        JournalHeader(
            operation="op-1", context="ctx", namespace="ns", requested=True, changes=changes, reason=None, waves=WAVES
        ),
        folder=tmp_path,
    )


def test_journal_records_each_waves_progress(tmp_path):
    j = journal_in_waves(tmp_path)
    changes = {c.provider: c for c in plan_changes([provider(n) for n in "abcd"], requested=True)}
    j.intents([changes["a"], changes["b"]])
    j.done("a", generation=4)
    j.done("b", generation=4)
    for state in (WaveState.WRITTEN, WaveState.CONVERGED):
        j.wave(1, state)
    j.wave(1, WaveState.SOAKED, gates=[{"gate": "error-ratio", "held": True}])
    j.wave(1, WaveState.PASSED)
    j.wave(2, WaveState.WRITTEN)
    j.close()
    state = read_journal(j.path)
    assert state.waves == WAVES
    assert state.wave_states == {1: WaveState.PASSED, 2: WaveState.WRITTEN}
    assert state.first_unfinished_wave() == 2
    assert [w["state"] for w in state.to_dict()["waves"]] == ["held", "written", "pending"]
    # drain-restore undoes what was written, whatever wave it was in, and nothing else.
    assert [c.provider for c, _ in state.to_restore()] == ["a", "b"]


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"type":"wave","wave":4,"state":"held"}', "wave 4, which is not one of the header's waves"),
        ('{"type":"wave","wave":1,"state":"great"}', "'great' is not a valid WaveState"),
    ],
)
def test_bad_wave_records_are_named(tmp_path, line, message):
    j = journal_in_waves(tmp_path)
    j.close()
    with j.path.open("a") as f:
        f.write(line + "\n")
    with pytest.raises(JournalError, match=message):
        read_journal(j.path)


def resumable(tmp_path: Path) -> tuple[Path, dict[str, dict]]:
    """A journal whose wave 1 (a, b) is held and whose run was killed; the providers as it left them."""
    j = journal_in_waves(tmp_path)
    changes = {c.provider: c for c in plan_changes([provider(n) for n in "abcd"], requested=True)}
    j.intents([changes["a"], changes["b"]])
    j.done("a", generation=4)
    j.done("b", generation=4)
    j.wave(1, WaveState.PASSED)
    j.close()
    live = {
        "a": provider("a", gen=4, rv="20", drain=True, operation="op-1"),
        "b": provider("b", gen=4, rv="21", drain=True, operation="op-1"),
        "c": provider("c"),
        "d": provider("d", rv="30"),  # a status write moved its resourceVersion: not a change
        "e": provider("e", drain=True, operation="someone"),
    }
    return j.path, live


def test_resume_accepts_a_run_left_as_it_was(tmp_path):
    path, live = resumable(tmp_path)
    assert resume_problems(read_journal(path), list(live.values()), namespace="ns", drain=True) == []


def test_resume_names_every_difference(tmp_path):
    path, live = resumable(tmp_path)
    live["a"] = provider("a", gen=5, rv="25", drain=False, operation="op-1")  # undrained by someone
    live["c"] = provider("c", gen=4, rv="40", drain=True, operation="other")  # drained by someone else
    del live["d"]
    live["f"] = provider("f")
    problems = resume_problems(read_journal(path), list(live.values()), namespace="ns", drain=True)
    assert problems == [
        "left the selection since the journal: d",
        "joined the selection since the journal: f",
        "a: changed by another writer since this run wrote it (drain=false, generation 5)",
        "c: changed since the journal recorded it (generation 3 -> 4, drain None -> True, "
        "annotation agn.dev/drain-operation changed, resourceVersion 10 -> 40)",
    ]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"namespace": "other"}, "the journal is of namespace ns; this run is in other"),
        ({"drain": False}, "the journal is of a drain; this run is not"),
    ],
)
def test_resume_refuses_another_request(tmp_path, change, message):
    path, live = resumable(tmp_path)
    kw = {"namespace": "ns", "drain": True, **change}
    assert message in resume_problems(read_journal(path), list(live.values()), **kw)


def test_resume_refuses_a_restored_or_waveless_journal(tmp_path):
    path, live = resumable(tmp_path)
    j = Journal.open(path)
    j.set_state(RunState.RESTORED)
    j.close()
    assert resume_problems(read_journal(path), list(live.values()), namespace="ns", drain=True) == [
        "nothing to resume: its run was restored"
    ]
    plain = Journal.create(
        JournalHeader(
            operation="op-2",
            context=None,
            namespace="ns",
            requested=True,
            changes=plan_changes([provider("a")], requested=True),
            reason=None,
        ),
        folder=tmp_path,
    )
    plain.close()
    assert "not of a drain in waves" in resume_problems(read_journal(plain.path), [], namespace="ns", drain=True)[0]


def test_min_requests_gate_holds_on_enough_traffic_over_the_window_only():
    from xtask.drain.gates.min_requests import MinRequestsGate

    a, b = Gateway(), Gateway()
    a.count(ROUTED, 500)  # before the soak: not counted

    def read(url: str):
        return parse_counts({"c-a": a, "c-b": b}[url].text())

    gate = MinRequestsGate({"c-a": "c-a", "c-b": "c-b"}, minimum=10, read=read)
    gate.begin()
    a.count(ROUTED, 4)
    b.count(NO_ROUTE, 3)
    b.count(BAD_REQUEST, 50)  # a client's bad request is not traffic the ratio is judged on
    thin = gate.read(5.0)
    assert (thin.gate, thin.held, thin.value, thin.threshold) == ("min-requests", False, 7, ">= 10")
    assert "c-a: 4; c-b: 3" in thin.detail
    gate.begin()
    a.count(UPSTREAM_ERROR, 10)
    assert gate.read(5.0).held


def test_min_requests_is_a_gate_flag_of_a_drain_in_waves_only():
    with pytest.raises(UsageError, match="--min-requests applies to a drain in waves"):
        request(gate_options={"min_requests": 5})
    assert request(wave_size=Amount(1), gate_options={"min_requests": 5}).gate_options == {"min_requests": 5}


def test_the_gate_registry_names_its_modules_and_their_flags_in_order():
    from xtask.drain import gates

    modules = gates.gate_modules()
    assert [m.__name__ for m in modules] == [entry.module for entry in gates.GATES]
    assert [flag for m in modules for flag in m.FLAGS] == gates.gate_flags()


def test_checking_options_without_any_gate_flag_loads_no_gate():
    import subprocess
    import sys

    code = (
        "import sys; from xtask.drain.gates import check_gate_options, gate_flags; "
        "check_gate_options({f.key: None for f in gate_flags()}, consumers=('c',), soak=None); "
        "print(sorted(m for m in sys.modules if m.startswith(('prometheus_client', 'xtask.drain.gates.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['xtask.drain.gates.base', 'xtask.drain.gates.flags']"
