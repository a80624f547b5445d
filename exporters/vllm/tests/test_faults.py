"""Fault injection: the plugin inside vLLM's real scheduler meets a vLLM it does not expect, an
encoder that raises, an exporter thread that dies, an endpoint that swallows everything. In every
case the engine's step loop finishes every request, and the counters say what was dropped.

Needs `TOKENSCOPE_GRPC` of a running tokenscope for the cases that recover: `scripts/test-engines`.
"""

from __future__ import annotations

import logging
import os
import socket
import time

import pytest

import engine

GRPC = os.environ.get("TOKENSCOPE_GRPC")


def traced(endpoint: str, instance: str, **kwargs):
    os.environ["TOKENSCOPE_ENDPOINT"] = endpoint
    os.environ["TOKENSCOPE_INSTANCE"] = instance
    os.environ["TOKENSCOPE_FLUSH_INTERVAL_S"] = "0"
    import tokenscope_vllm

    try:
        return engine.make_scheduler(tokenscope_vllm.TracingScheduler, **kwargs)
    finally:
        del os.environ["TOKENSCOPE_FLUSH_INTERVAL_S"]


def requests(prefix: str, n: int = 3, max_tokens: int = 8) -> dict:
    return {0: [engine.make_request(f"{prefix}-{i}", 30, max_tokens) for i in range(n)]}


def completes(run, prefix: str, n: int = 3, max_tokens: int = 8) -> None:
    """The engine went on: every request made all its tokens."""
    assert {rid: len(t) for rid, t in run.tokens.items()} == {f"{prefix}-{i}": max_tokens for i in range(n)}


def renamed(cls, name: str):
    """`cls` as a vLLM release that renamed attribute `name` would look to the plugin."""

    def gone(self):
        raise AttributeError(f"'{cls.__name__}' object has no attribute '{name}'")

    return type(cls.__name__, (cls,), {name: property(gone)})


def off_lines(caplog) -> list:
    return [r for r in caplog.records if "recording stopped" in r.getMessage()]


def test_an_attribute_renamed_at_runtime_turns_recording_off_not_the_engine(caplog):
    # Without stats the scheduler itself never reads the KV cache manager's `usage`; the hook does.
    s = traced("127.0.0.1:9", "renamed", log_stats=False)
    ts = s.tokenscope
    assert ts.on
    s.kv_cache_manager.__class__ = renamed(type(s.kv_cache_manager), "usage")
    with caplog.at_level(logging.ERROR, logger="tokenscope_exporter"):
        run = engine.drive(s, requests("renamed"), decode_s=0)
    completes(run, "renamed")
    stats = ts.stats()
    assert stats["on"] == 0 and stats["hook_errors"] == 1, stats
    assert "usage" in ts.off_reason, ts.off_reason
    assert len(off_lines(caplog)) == 1, [r.getMessage() for r in caplog.records]
    # Nothing is kept for a plugin that is off: no buffered events, no recorder holding requests.
    assert len(ts.events) == 0
    ts._thread.join(2)
    assert not ts._thread.is_alive() and ts.recorder is None
    s.shutdown()


def test_an_attribute_renamed_in_the_release_turns_recording_off_at_startup(monkeypatch, caplog):
    from vllm.v1.core.kv_cache_manager import KVCacheManager

    def gone(self):
        raise AttributeError("'KVCacheManager' object has no attribute 'usage'")

    monkeypatch.setattr(KVCacheManager, "usage", property(gone))
    with caplog.at_level(logging.ERROR, logger="tokenscope_exporter"):
        s = traced("127.0.0.1:9", "renamed-at-startup", log_stats=False)
    assert not s.tokenscope.on and s.tokenscope.off_reason.startswith("startup"), s.tokenscope.off_reason
    run = engine.drive(s, requests("startup"), decode_s=0)
    completes(run, "startup")
    assert s.tokenscope.stats()["dropped_events"] == 0  # off: nothing was even offered
    assert len(off_lines(caplog)) == 1
    s.shutdown()


def test_a_recorder_that_fails_on_every_event_is_counted_and_the_engine_goes_on(monkeypatch):
    from tokenscope_vllm.recorder import Recorder

    def fails(self, so, *args):
        raise AttributeError("'SchedulerOutput' object has no attribute 'scheduled_cached_reqs'")

    monkeypatch.setattr(Recorder, "scheduled", fails)
    s = traced("127.0.0.1:9", "recorder-fails")
    run = engine.drive(s, requests("recorder"), decode_s=0.001)
    completes(run, "recorder")
    s.tokenscope.flush(timeout_s=5)
    stats = s.tokenscope.stats()
    assert stats["record_errors"] >= len(run.steps), stats
    assert stats["on"] == 1 and s.tokenscope._thread.is_alive(), stats  # a few errors: it goes on
    s.shutdown()


@pytest.mark.skipif(not GRPC, reason="needs a running tokenscope")
def test_an_encoder_that_raises_costs_that_export_and_the_thread_goes_on(monkeypatch):
    from tokenscope_exporter import wire

    encode = wire.export_request

    def raises(*args):
        raise ValueError("encoder failed")

    monkeypatch.setattr(wire, "export_request", raises)
    s = traced(GRPC, f"encoder-raises-{time.time_ns()}")
    run = engine.drive(s, requests("enc"), decode_s=0)
    completes(run, "enc")
    ts = s.tokenscope
    ts.flush(timeout_s=5)
    stats = ts.stats()
    assert stats["export_errors"] >= 1 and stats["dropped_requests"] == 3 and stats["sent_requests"] == 0, stats
    # The encoder mended, the same thread sends the next request.
    monkeypatch.setattr(wire, "export_request", encode)
    run = engine.drive(s, {0: [engine.make_request("enc-after", 30, 4)]}, decode_s=0)
    assert ts.flush(timeout_s=10)
    stats = ts.stats()
    assert stats["sent_requests"] == 1 and stats["on"] == 1, stats
    s.shutdown()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_exporter_thread_that_dies_stops_the_buffering():
    class Killed(BaseException):
        pass

    def dies():
        raise Killed("the exporter thread was killed")

    s = traced("127.0.0.1:9", "thread-dies")
    ts = s.tokenscope
    ts._cycle = dies
    ts._thread.join(2)
    assert not ts._thread.is_alive()
    run = engine.drive(s, requests("dead"), decode_s=0)
    completes(run, "dead")
    # Hooks saw it off and offered nothing; no references to the engine's requests are kept.
    assert not ts.on and len(ts.events) == 0 and ts.recorder is None, ts.stats()
    assert "exporter thread stopped" in ts.off_reason
    assert not ts.flush(timeout_s=0.5)
    s.shutdown()


def test_shutdown_with_a_black_holed_endpoint_takes_a_second_at_most():
    # Accepted by the kernel, never answered: every export waits for its timeout.
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)
    try:
        s = traced(f"127.0.0.1:{hole.getsockname()[1]}", "black-hole")
        run = engine.drive(s, requests("hole", max_tokens=30), decode_s=0.002)
        completes(run, "hole", max_tokens=30)
        ts = s.tokenscope
        time.sleep(0.3)  # an export is in flight, waiting
        assert ts.stats()["sent_requests"] == 0
        t = time.monotonic()
        s.shutdown()
        took = time.monotonic() - t
        print(f"shutdown with a black-holed endpoint: {took * 1000:.0f} ms")
        assert took <= 1.05, took
        assert not ts._thread.is_alive()
    finally:
        hole.close()


class _Failing:
    """A recorder that fails on the events that say so, as one would on an engine that changed
    under it."""

    def step(self, fails: bool):
        if fails:
            raise AttributeError("'SchedulerOutput' object has no attribute 'num_scheduled_tokens'")

    def take(self):
        return [], []


def _exporter(recorder, **kwargs):
    from tokenscope_exporter import Exporter

    return Exporter("127.0.0.1:9", b"", recorder, poll_interval_s=0.01, **kwargs)


def test_a_recorder_failing_on_most_events_turns_recording_off():
    e = _exporter(_Failing(), max_record_errors=50)
    for _ in range(60):
        e.push(("step", True))
    e._thread.join(2)
    assert not e.on and e.stats()["record_errors"] == 50, e.stats()
    assert "recorder failed on 50 events" in e.off_reason
    e.push(("step", True))
    assert len(e.events) == 0 and e.recorder is None  # nothing more is kept


def test_a_recorder_failing_now_and_then_keeps_recording():
    e = _exporter(_Failing(), max_record_errors=5)
    for k in range(2000):
        e.push(("step", k % 200 == 0))  # 10 failures in 2,000 events: 0.5 %
        if k % 100 == 0:
            e.flush(timeout_s=2)
    e.flush(timeout_s=2)
    assert e.on and e.stats()["record_errors"] >= 5, (e.off_reason, e.stats())
    e.close()


def test_an_install_without_the_native_part_says_so_once_at_start(monkeypatch, caplog):
    from tokenscope_exporter import wire

    said = "packs in Python"
    for native in (None, lambda rows, width, code: None):
        monkeypatch.setattr(wire, "_pack_rows", native)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="tokenscope_exporter"):
            e = _exporter(_Failing())
            e.close(timeout_s=1)
        assert (said in caplog.text) == (native is None), caplog.text
