"""Fault injection: the plugin's hooks on SGLang's `Scheduler` meet an SGLang they do not expect,
an encoder that raises, an exporter thread that dies, an endpoint that swallows everything. In
every case the engine's step loop finishes every request, and the counters say what was dropped.
"""

from __future__ import annotations

import logging
import os
import socket
import time

import pytest

import engine


def serving(instance: str, endpoint: str = "127.0.0.1:9"):
    engine.start(instance, endpoint)
    return engine.make_scheduler(decode_s=0.001)


def requests(prefix: str, n: int = 3, max_tokens: int = 8) -> dict:
    return {0: [engine.make_request(f"{prefix}-{i}", 30, max_tokens) for i in range(n)]}


def completes(run, prefix: str, n: int = 3, max_tokens: int = 8) -> None:
    """The engine went on: every request made all its tokens."""
    assert {rid: len(t) for rid, t in run.tokens.items()} == {f"{prefix}-{i}": max_tokens for i in range(n)}


def test_an_attribute_renamed_turns_recording_off_not_the_engine(plugins, caplog):
    s = serving("renamed")
    ts = engine.exporter(s)

    # What an SGLang release that renamed the scheduler's `running_batch` looks like to the hook:
    # the engine's own code (here, the test's step loop) uses it under its new name.
    def gone(self):
        raise AttributeError("'Scheduler' object has no attribute 'running_batch'")

    def keep(self, value):
        self.__dict__["renamed_batch"] = value

    s.__class__ = type("Scheduler", (plugins,), {"running_batch": property(gone, keep)})
    with caplog.at_level(logging.ERROR, logger="tokenscope_exporter"):
        run = engine.serve(s, requests("renamed"))
    completes(run, "renamed")
    stats = ts.stats()
    assert stats["on"] == 0 and stats["hook_errors"] == 1, stats
    assert "running_batch" in ts.off_reason and ts.off_reason.startswith("run_batch"), ts.off_reason
    assert [r.getMessage() for r in caplog.records if "recording stopped" in r.getMessage()] != []
    assert sum("recording stopped" in r.getMessage() for r in caplog.records) == 1
    # Nothing kept for a plugin that is off: no buffered events, no recorder holding requests.
    assert len(ts.events) == 0 and ts.recorder is None and not ts._thread.is_alive()


def test_an_encoder_that_raises_costs_that_export_and_the_thread_goes_on(plugins, monkeypatch):
    from tokenscope_exporter import wire

    def raises(*args):
        raise ValueError("encoder failed")

    monkeypatch.setattr(wire, "export_request", raises)
    s = serving("encoder-raises")
    run = engine.serve(s, requests("enc"))
    completes(run, "enc")
    stats = engine.exporter(s).stats()
    assert stats["export_errors"] >= 1 and stats["dropped_requests"] == 3 and stats["sent_requests"] == 0, stats


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_an_exporter_thread_that_dies_stops_the_buffering(plugins):
    class Killed(BaseException):
        pass

    def dies():
        raise Killed("the exporter thread was killed")

    s = serving("thread-dies")
    ts = engine.exporter(s)
    ts._cycle = dies
    ts._thread.join(2)
    assert not ts._thread.is_alive()
    run = engine.serve(s, requests("dead"))
    completes(run, "dead")
    assert not ts.on and len(ts.events) == 0 and ts.recorder is None, ts.stats()
    assert "exporter thread stopped" in ts.off_reason


def test_shutdown_with_a_black_holed_endpoint_takes_a_second_at_most(plugins):
    # Accepted by the kernel, never answered: every export waits for its timeout.
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)
    try:
        os.environ["TOKENSCOPE_FLUSH_INTERVAL_S"] = "0"
        s = serving("black-hole", f"127.0.0.1:{hole.getsockname()[1]}")
        ts = engine.exporter(s)
        del os.environ["TOKENSCOPE_FLUSH_INTERVAL_S"]
        run = engine.serve(s, requests("hole", max_tokens=60))
        took = time.monotonic() - s.loop_ended
        completes(run, "hole", max_tokens=60)
        print(f"shutdown with a black-holed endpoint: {took * 1000:.0f} ms")
        assert took <= 1.05, took
        assert ts.stats()["sent_requests"] == 0 and not ts._thread.is_alive()
    finally:
        hole.close()
