"""Unit tests for the idle rules of ``provider-drain --wait-idle`` (xtask/drain/core/idle.py), the
exit-code mapping and the flag combinations DrainRequest refuses. Plain data, no API."""

from __future__ import annotations

import pytest

from agn.objects import rfc3339
from xtask.drain.core.idle import BUSY, IDLE, UNKNOWN, IdleTracker, ProviderIdle, all_idle, classify, not_idle
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.selection import Selector
from xtask.drain.report import Report, exit_code
from xtask.errors import ExitCode, UsageError

NOW = 1_800_000_000.0
MAX_AGE = 45.0


def provider(*, at: float | None = NOW - 1, metrics_error: str | None = None, **load) -> dict:
    """An InferenceProvider as the operator writes its status; ``load`` holds running/waiting."""
    status: dict = {"probe": {"healthy": True}}
    if at is not None:
        status["load"] = {"observedAt": rfc3339(at), **load}
        status["probe"]["metricsObservedAt"] = rfc3339(at)
    if metrics_error:
        status["probe"]["metricsError"] = metrics_error
    return {"metadata": {"name": "p"}, "status": status}


def judge(obj, now=NOW):
    return classify("p", obj, max_age=MAX_AGE, now=now)


class TestClassify:
    def test_fresh_zero_zero_is_idle(self):
        r = judge(provider(running=0, waiting=0))
        assert (r.state, r.running, r.waiting, r.age) == (IDLE, 0, 0, 1.0)
        assert r.last_reading() == {"observedAt": rfc3339(NOW - 1), "running": 0, "waiting": 0}

    @pytest.mark.parametrize(("running", "waiting"), [(1, 0), (0, 3), (2, 5)])
    def test_anything_running_or_waiting_is_busy(self, running, waiting):
        r = judge(provider(running=running, waiting=waiting))
        assert r.state == BUSY and r.why == f"running {running}, waiting {waiting}"

    def test_absent_reading_is_unknown_never_zero(self):
        r = judge(provider(at=None))
        assert (r.state, r.last_reading(), r.age) == (UNKNOWN, None, None)
        assert r.why == "no load reading yet"

    def test_absent_reading_names_the_scrape_error(self):
        assert judge(provider(at=None, metrics_error="GET /metrics: HTTP 404")).why == (
            "no load reading yet: GET /metrics: HTTP 404"
        )

    def test_expiry_is_relative_to_the_networks_max_age(self):
        at_bound = judge(provider(at=NOW - MAX_AGE, running=0, waiting=0))
        past = judge(provider(at=NOW - MAX_AGE - 0.5, running=0, waiting=0))
        assert at_bound.state == IDLE
        assert past.state == UNKNOWN and "expired" in past.why and "45" in past.why
        assert past.last_reading() == {"observedAt": rfc3339(NOW - MAX_AGE - 0.5), "running": 0, "waiting": 0}
        # The same reading under a stricter network is already expired.
        assert classify("p", provider(at=NOW - 10, running=0, waiting=0), max_age=5, now=NOW).state == UNKNOWN

    def test_waiting_not_exported_is_unknown(self):
        r = judge(provider(running=0))
        assert r.state == UNKNOWN and r.why == "the provider does not export agn_provider_waiting"
        assert r.last_reading() == {"observedAt": rfc3339(NOW - 1), "running": 0}  # absent stays absent

    def test_running_not_exported_is_unknown(self):
        assert judge(provider(waiting=0)).why == "the provider does not export agn_provider_running"

    @pytest.mark.parametrize(
        ("fmt", "metric"),
        [
            ("vllm", "vllm:num_requests_waiting"),
            ("sglang", "sglang:num_queue_reqs"),
            ("tgi", "tgi_queue_size"),
            ("llamacpp", "llamacpp:requests_deferred"),
            ("agn", "agn_provider_waiting"),
        ],
    )
    def test_a_missing_gauge_is_named_in_the_format_it_was_read_as(self, fmt, metric):
        obj = provider(running=0)
        obj["status"]["probe"]["metricsFormat"] = fmt
        r = judge(obj)
        assert r.state == UNKNOWN and r.why == f"the provider does not export {metric}"

    def test_no_known_metric_at_all_is_unknown_and_says_so(self):
        r = judge(provider())  # a successful scrape of no metric any format has: no format written
        assert r.state == UNKNOWN
        assert (
            r.why
            == "the provider exports none of the load metrics read (agn, vllm, sglang, tgi, llamacpp: docs/engines.md; "
            "a vLLM started with --disable-log-stats exports none)"
        )

    def test_a_vllm_without_any_of_its_gauges_is_unknown_with_the_hint(self):
        obj = provider()
        obj["status"]["probe"]["metricsFormat"] = "vllm"
        r = judge(obj)
        assert r.state == UNKNOWN
        assert r.why == (
            "the provider does not export vllm:num_requests_running nor vllm:num_requests_waiting "
            "(vLLM started with --disable-log-stats exports none)"
        )

    def test_kv_cache_usage_does_not_decide_idleness(self):
        assert judge(provider(running=0, waiting=0, kvCacheUsage=0.9)).state == IDLE

    def test_failed_last_scrape_makes_a_fresh_idle_reading_unknown(self):
        # Metrics turned off: the operator keeps the last reading (still within max age) and
        # records the error; the provider's load now is unknown.
        r = judge(provider(running=0, waiting=0, metrics_error="GET /metrics: HTTP 404"))
        assert r.state == UNKNOWN and r.why == "the last scrape failed: GET /metrics: HTTP 404"

    def test_deleted_provider_is_unknown(self):
        assert judge(None).state == UNKNOWN

    @pytest.mark.parametrize("bad", [-1, 1.5, True, "0", None])
    def test_values_the_crd_does_not_allow_are_not_counts(self, bad):
        assert judge(provider(running=0, waiting=bad)).state == UNKNOWN

    def test_clock_skew_never_gives_a_negative_age(self):
        assert judge(provider(at=NOW + 3, running=0, waiting=0)).age == 0.0


def reading(at: float, *, now: float | None = None, **load):
    load = {"running": 0, "waiting": 0} | load
    return classify("p", provider(at=at, **load), max_age=MAX_AGE, now=now if now is not None else at + 0.1)


def verdict(tracker: IdleTracker) -> ProviderIdle:
    (v,) = tracker.verdicts()
    return v


class TestTracker:
    def test_one_idle_reading_is_not_enough(self):
        t = IdleTracker(["p"])
        t.observe(reading(NOW))
        v = verdict(t)
        assert (v.state, v.idle_readings) == (UNKNOWN, 1)
        assert "idle in 1 reading, waiting for the next one" in v.detail
        assert not all_idle(t.verdicts())

    def test_two_consecutive_distinct_idle_readings_are_idle(self):
        t = IdleTracker(["p"])
        t.observe(reading(NOW))
        t.observe(reading(NOW + 10))
        assert (verdict(t).state, verdict(t).idle_readings) == (IDLE, 2)
        assert all_idle(t.verdicts()) and not_idle(t.verdicts()) == []

    def test_the_same_reading_seen_twice_counts_once(self):
        t = IdleTracker(["p"])
        t.observe(reading(NOW))
        t.observe(reading(NOW, now=NOW + 1))  # a re-judgement, or a status write that kept the load
        assert verdict(t).state == UNKNOWN and verdict(t).idle_readings == 1

    def test_busy_then_idle_needs_two_idle_readings_after_the_busy_one(self):
        t = IdleTracker(["p"])
        t.observe(reading(NOW, waiting=2))
        assert verdict(t).state == BUSY
        t.observe(reading(NOW + 1))
        assert verdict(t).state == UNKNOWN
        t.observe(reading(NOW + 2))
        assert verdict(t).state == IDLE

    def test_a_busy_reading_between_idle_ones_starts_the_count_again(self):
        t = IdleTracker(["p"])
        for at, load in [(NOW, {}), (NOW + 1, {"running": 1}), (NOW + 2, {})]:
            t.observe(reading(at, **load))
        assert verdict(t).idle_readings == 1 and verdict(t).state == UNKNOWN

    def test_an_unknown_look_between_idle_ones_starts_the_count_again(self):
        t = IdleTracker(["p"])
        t.observe(reading(NOW))
        # Metrics fail: same stored reading, now with an error; then they recover.
        t.observe(classify("p", provider(at=NOW, running=0, waiting=0, metrics_error="x"), max_age=MAX_AGE, now=NOW))
        t.observe(reading(NOW + 1))
        assert verdict(t).idle_readings == 1

    def test_idle_expires_into_unknown_when_readings_stop(self):
        t = IdleTracker(["p"])
        t.observe(reading(NOW))
        t.observe(reading(NOW + 10))
        assert verdict(t).state == IDLE
        t.observe(reading(NOW + 10, now=NOW + 10 + MAX_AGE + 1))  # the operator stopped writing
        assert verdict(t).state == UNKNOWN and "expired" in verdict(t).detail
        assert verdict(t).idle_readings == 0

    def test_a_gap_does_not_continue_the_count(self):
        t = IdleTracker(["p"])
        t.observe(reading(NOW))
        t.observe(reading(NOW + 5), after_gap=True)  # a re-list: readings in between may be missed
        assert verdict(t).idle_readings == 1
        t.observe(reading(NOW + 5), after_gap=True)  # the same reading again is no new look
        assert verdict(t).idle_readings == 1

    def test_every_provider_must_be_idle_and_each_other_one_is_named(self):
        t = IdleTracker(["a", "b", "c"])
        for at in (NOW, NOW + 1):
            t.observe(classify("a", provider(at=at, running=0, waiting=0), max_age=MAX_AGE, now=NOW + 1.5))
        t.observe(classify("b", provider(at=NOW + 1, running=0, waiting=4), max_age=MAX_AGE, now=NOW + 1.5))
        verdicts = t.verdicts()
        assert [v.state for v in verdicts] == [IDLE, BUSY, UNKNOWN]
        assert not all_idle(verdicts)
        assert not_idle(verdicts) == [
            "b busy (running 0, waiting 4; read 0.5s ago)",
            "c unknown (not observed yet)",
        ]
        assert verdicts[1].to_dict() == {
            "provider": "b",
            "state": BUSY,
            "lastReading": {"observedAt": rfc3339(NOW + 1), "running": 0, "waiting": 4},
            "ageSeconds": 0.5,
            "idleReadings": 0,
            "detail": "running 0, waiting 4",
        }

    def test_unselected_providers_are_ignored(self):
        t = IdleTracker(["p"])
        t.observe(classify("other", provider(running=3, waiting=0), max_age=MAX_AGE, now=NOW))
        assert [v.reading.provider for v in t.verdicts()] == ["p"]


class TestExitCodes:
    @pytest.mark.parametrize(
        ("idle", "code"),
        [("idle", ExitCode.OK), ("timeout", ExitCode.NOT_IDLE), ("interrupted", ExitCode.INTERRUPTED)],
    )
    def test_idle_wait_outcomes(self, idle, code):
        assert (
            exit_code(
                Report(
                    context=None,
                    namespace="ns",
                    request="drain",
                    selector="provider p",
                    dry_run=False,
                    convergence={"state": "converged"},
                    idle={"state": idle},
                    interrupted="SIGINT" if idle == "interrupted" else None,
                )
            )
            is code
        )

    def test_not_idle_is_nine(self):
        assert int(ExitCode.NOT_IDLE) == 9


def request(**kwargs) -> DrainRequest:
    base = dict(selector=Selector(provider="p"), drain=True, network="net", consumers=("c",))
    return DrainRequest(**(base | kwargs))


class TestFlags:
    def test_wait_idle_with_targets_is_accepted(self):
        assert request(wait_idle=True, idle_timeout=5.0).wait_idle

    def test_wait_idle_with_undrain_is_a_usage_error(self):
        with pytest.raises(UsageError, match="does not apply to --undrain"):
            request(drain=False, wait_idle=True)

    def test_wait_idle_needs_the_targets(self):
        with pytest.raises(UsageError, match="name --network and every --consumer"):
            request(network=None, consumers=(), wait_idle=True)

    def test_idle_timeout_without_wait_idle_is_a_usage_error(self):
        with pytest.raises(UsageError, match="--idle-timeout bounds the wait of --wait-idle"):
            request(idle_timeout=5.0)


def test_help_documents_the_flags_and_exit_code_9():
    from click.testing import CliRunner

    from xtask.cli.env.provider_drain import provider_drain

    out = CliRunner().invoke(provider_drain, ["--help"], terminal_width=200).output
    assert "--wait-idle" in out and "--idle-timeout DURATION" in out
    assert "  9  --wait-idle: drained and serving, not idle before --idle-timeout" in out


class TestVouchedByHeartbeat:
    """Freshness of an unchanged status comes from the probes heartbeat, not from a rewrite."""

    def test_old_idle_reading_vouched_by_a_later_heartbeat_is_fresh(self):
        old = provider(at=NOW - 600, running=0, waiting=0)
        assert judge(old).state == UNKNOWN  # expired on its own
        r = classify("p", old, max_age=MAX_AGE, now=NOW, vouched_at=NOW - 2)
        assert (r.state, r.age, r.at) == (IDLE, 2.0, NOW - 2)
        assert r.last_reading() == {"observedAt": rfc3339(NOW - 600), "running": 0, "waiting": 0}

    def test_idle_before_the_drain_does_not_count(self):
        obj = provider(at=NOW - 10, running=0, waiting=0)
        before = classify("p", obj, max_age=MAX_AGE, now=NOW, since=NOW - 5)
        assert before.state == UNKNOWN and "before the drain" in before.why
        after = classify("p", obj, max_age=MAX_AGE, now=NOW, since=NOW - 5, vouched_at=NOW - 1)
        assert after.state == IDLE

    def test_busy_before_the_drain_stays_busy(self):
        r = classify("p", provider(at=NOW - 10, running=2, waiting=0), max_age=MAX_AGE, now=NOW, since=NOW - 5)
        assert r.state == BUSY

    def test_a_vouch_never_makes_an_absent_reading_idle(self):
        r = classify("p", provider(at=None), max_age=MAX_AGE, now=NOW, vouched_at=NOW - 1, since=NOW - 5)
        assert r.state == UNKNOWN

    def test_two_heartbeats_over_one_unchanged_status_are_two_readings(self):
        obj = provider(at=NOW - 30, running=0, waiting=0)
        t = IdleTracker(["p"])
        t.observe(classify("p", obj, max_age=MAX_AGE, now=NOW, since=NOW - 5))  # before the drain
        t.observe(classify("p", obj, max_age=MAX_AGE, now=NOW, since=NOW - 5, vouched_at=NOW - 4))
        assert t.verdicts()[0].state == UNKNOWN  # idle once
        t.observe(classify("p", obj, max_age=MAX_AGE, now=NOW, since=NOW - 5, vouched_at=NOW - 4))  # same renewal
        assert t.verdicts()[0].state == UNKNOWN
        t.observe(classify("p", obj, max_age=MAX_AGE, now=NOW, since=NOW - 5, vouched_at=NOW - 2))
        assert t.verdicts()[0].state == IDLE
