"""The exporter thread: takes the scheduler's events from a bounded buffer, hands them to the
engine's recorder, which turns them into tokenscope records, and ships those in batches over gRPC.
When tokenscope is slow or down, records are dropped and counted; the scheduler never waits.

The engine comes first. A hook that finds the engine not as it expects (an attribute renamed by a
new release) calls `fault()`: the plugin turns itself off with one log line and a counter, and the
engine goes on untraced. The exporter thread catches what fails in it, counts it and goes on; if
it stops anyway, `push` drops from then on, so the buffer never fills with references to the
engine's objects. Shutdown takes at most `close()`'s deadline (1 s), even with the endpoint
black-holed: an export still in flight then is cancelled.

An event is a tuple whose first item names the recorder's method that takes it, e.g.
`("scheduled", output, start_ns, ...)` calls `recorder.scheduled(output, start_ns, ...)`. A
recorder also has `take()`, which returns the requests and iterations it has encoded since.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

from . import wire

log = logging.getLogger("tokenscope_exporter")

EXPORT_METHOD = "/tokenscope.v1.TraceIngest/Export"


def _worth_logging(errors: int) -> bool:
    """Failures are logged sparingly: the 1st, 10th, 100th, then every 10,000th."""
    return errors in (1, 10, 100) or errors % 10000 == 0


class Exporter:
    """One per scheduler. `push` is the only method the scheduler's thread calls."""

    def __init__(
        self,
        endpoint: str,
        resource: bytes,
        recorder,
        capacity: int = 65536,
        flush_interval_s: float = 0.5,
        max_batch_bytes: int = 4 << 20,
        timeout_s: float = 5.0,
        poll_interval_s: float = 0.05,
        key: str | None = None,
        max_record_errors: int = 1000,
    ) -> None:
        if wire._pack_rows is None:
            # An install without a C compiler or Python's headers: the same bytes, slower (about
            # 3-5 times with logprobs), which an operator would otherwise not know.
            log.info("tokenscope: the exporter packs in Python (its native part was not built when it was installed)")
        # False once the plugin is off (a fault, or the thread stopped): hooks check it first.
        self.on = True
        self.resource = resource
        self.capacity = capacity
        self.flush_interval_s = flush_interval_s
        self.max_batch_bytes = max_batch_bytes
        self.timeout_s = timeout_s
        self.poll_interval_s = poll_interval_s
        self.events: deque = deque()
        self.recorder = recorder
        # Counters (read them for metrics; written by one thread each).
        self.dropped_events = 0
        self.sent_requests = 0
        self.sent_iterations = 0
        self.dropped_requests = 0
        self.dropped_iterations = 0
        self.rejected_requests = 0
        self.rejected_iterations = 0
        # Token texts sent by id, and replies that said the server lacked some.
        self.sent_texts = 0
        self.texts_missing = 0
        # Events the recorder failed on (an engine version it does not know): logged sparingly.
        # Past `max_record_errors`, when they are more than 1 % of the events, the plugin turns
        # off: a recorder failing on everything would keep every request it never finishes.
        self.record_errors = 0
        self.recorded_events = 0
        self.max_record_errors = max_record_errors
        # Hooks that failed reading the engine (each turns the plugin off), and exports that
        # failed in the exporter's own code (encoding, a recorder's take()).
        self.hook_errors = 0
        self.export_errors = 0
        # Why the plugin is off, when it is.
        self.off_reason = ""
        # The exporter thread's own CPU time, and the steps it recorded.
        self.cpu_ns = 0
        self.steps = 0
        self._pending_requests: list[bytes] = []
        self._pending_iterations: list[bytes] = []
        self._pending_bytes = 0
        self._last_flush = time.monotonic()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._endpoint = endpoint
        # The server's ingest key, when it requires one (sent as gRPC metadata, never logged).
        self._metadata = (("authorization", f"Bearer {key}"),) if key else None
        self._channel = None
        self._call = None
        # Set by close(): the final export must end by then.
        self._deadline: float | None = None
        self._last_error_log = 0.0
        self._thread = threading.Thread(target=self._run, name="tokenscope-exporter", daemon=True)
        self._thread.start()

    # --- the scheduler's side -----------------------------------------------------------------

    def push(self, event: tuple) -> None:
        """Hands one event over; drops it (counted) when the buffer is full."""
        if len(self.events) >= self.capacity:
            self.dropped_events += 1
            return
        self.events.append(event)

    def fault(self, where: str, error: BaseException) -> None:
        """A hook could not read the engine (`where`: the hook): the plugin turns off, says so
        once, and the engine goes on. Called on the engine's thread, inside the hook's guard."""
        self.hook_errors += 1
        self._turn_off(f"{where}: {type(error).__name__}: {error}")

    def _turn_off(self, reason: str) -> None:
        if not self.on:
            return
        self.on = False
        self.off_reason = reason
        # `push` drops from now on; what waits would only hold the engine's objects alive.
        self.capacity = 0
        self.events.clear()
        log.error("tokenscope: recording stopped, the engine goes on untraced (%s)", reason)

    # --- the exporter thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and self.on:
                self._guarded(self._cycle)
                # Woken rarely, busy or not: each wake takes the GIL from the engine loop, and a
                # thread that keeps asking for it makes the engine hand it over every 5 ms.
                self._stop.wait(self.poll_interval_s)
            if self.on:
                self._guarded(self._drain)
                self._guarded(self._flush)
        finally:
            # However the thread ends, nothing more is buffered for it, and the recorder's
            # requests (references to the engine's) are let go.
            if not self._stop.is_set():
                self._turn_off("the exporter thread stopped")
            self.capacity = 0
            self.events.clear()
            self.recorder = None
            self._idle.set()

    def _cycle(self) -> None:
        busy = self._drain()
        if busy:
            self._idle.clear()
        now = time.monotonic()
        if self._pending_bytes >= self.max_batch_bytes or (self._pending_bytes and now - self._last_flush >= self.flush_interval_s):
            self._flush()
        if not busy and not self._pending_bytes:
            self._idle.set()

    def _guarded(self, part) -> None:
        """Runs a part of the exporter's loop; what fails in it is counted and logged, and the
        loop goes on (what the part held is dropped)."""
        try:
            part()
        except Exception:
            self.export_errors += 1
            self._pending_requests, self._pending_iterations, self._pending_bytes = [], [], 0
            if _worth_logging(self.export_errors):
                log.exception("tokenscope: the exporter failed (%d so far); it goes on", self.export_errors)

    def _drain(self) -> bool:
        events, rec = self.events, self.recorder
        handlers: dict = {}
        started = time.thread_time_ns()
        n = 0
        while True:
            try:  # not `while events`: a hook's fault() may empty the buffer in between
                kind, *args = events.popleft()
            except IndexError:
                break
            n += 1
            try:
                handle = handlers.get(kind)
                if handle is None:
                    handle = handlers[kind] = getattr(rec, kind)
                handle(*args)
            except Exception as e:  # an engine change must not take the engine down with us
                self.record_errors += 1
                if _worth_logging(self.record_errors):
                    log.exception("tokenscope: could not record a %s event (%d so far)", kind, self.record_errors)
                if self.record_errors >= self.max_record_errors and self.record_errors * 100 > self.recorded_events + n:
                    self._turn_off(f"the recorder failed on {self.record_errors} events, the last: {kind}: {e}")
                    return False
            # Hand the GIL back now and then: the engine's thread, if it is waiting for it, runs
            # now instead of after the interpreter's 5 ms switch interval.
            if n % 32 == 0:
                time.sleep(0)
        self.recorded_events += n
        requests, iterations = rec.take()
        self._pending_requests += requests
        self._pending_iterations += iterations
        self._pending_bytes += sum(map(len, requests)) + sum(map(len, iterations))
        self.steps += len(iterations)
        self.cpu_ns += time.thread_time_ns() - started
        return n > 0

    def _flush(self) -> None:
        requests, iterations = self._pending_requests, self._pending_iterations
        self._pending_requests, self._pending_iterations, self._pending_bytes = [], [], 0
        self._last_flush = time.monotonic()
        if not requests and not iterations:
            return
        try:
            body, texts, by_id = self._encode(requests, iterations)
        except Exception:  # the text table or the encoder failed: this batch is lost, not the thread
            self.export_errors += 1
            self.dropped_requests += len(requests)
            self.dropped_iterations += len(iterations)
            if _worth_logging(self.export_errors):
                log.exception("tokenscope: could not encode an export (%d so far); it goes on", self.export_errors)
            return
        timeout = self.timeout_s
        if self._deadline is not None:  # shutting down: the last export ends by close()'s deadline
            timeout = min(timeout, self._deadline - time.monotonic())
        try:
            if timeout <= 0:
                raise TimeoutError("no time left before shutdown")
            raw = self._rpc()(body, timeout=timeout, metadata=self._metadata)
            reply = wire.decode_export_response(raw)
        except Exception as e:  # tokenscope down or slow: drop, count, go on
            self.dropped_requests += len(requests)
            self.dropped_iterations += len(iterations)
            now = time.monotonic()
            if now - self._last_error_log > 60:
                self._last_error_log = now
                log.warning(
                    "tokenscope: export to %s failed (%s); dropped so far: %d requests, %d steps",
                    self._endpoint,
                    e,
                    self.dropped_requests,
                    self.dropped_iterations,
                )
            return
        self.sent_requests += len(requests)
        self.sent_iterations += len(iterations)
        self.rejected_requests += reply["rejected_requests"]
        self.rejected_iterations += reply["rejected_iterations"]
        if by_id is not None:
            texts.acknowledged(by_id[0])
            self.sent_texts += len(by_id[0])
            if reply["texts_missing"]:
                self.texts_missing += 1
                texts.forget()

    def _encode(self, requests: list, iterations: list):
        """The export's body, with the token texts it carries by id (`Texts`) when the recorder has a
        tokenizer, and the request ids the steps' batches refer to (`RequestRefs`)."""
        texts = getattr(self.recorder, "texts", None)
        by_id = texts.take() if requests and texts is not None and texts.available() else None
        refs = getattr(self.recorder, "refs", None)
        request_ids = refs.take() if refs is not None else ()
        body = wire.export_request(wire.resource_traces(self.resource, requests, iterations, by_id, request_ids))
        return body, texts, by_id

    def _rpc(self):
        if self._call is None:
            import grpc

            self._channel = channel = grpc.insecure_channel(self._endpoint)
            self._call = channel.unary_unary(
                EXPORT_METHOD,
                request_serializer=lambda b: b,
                response_deserializer=lambda b: b,
            )
        return self._call

    # --- control ------------------------------------------------------------------------------

    def flush(self, timeout_s: float = 10.0) -> bool:
        """Waits until everything pushed so far was sent (or dropped). For tests and shutdown."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self._thread.is_alive():
            self._idle.clear()
            # Force the pending batch out now rather than at the next interval.
            self._last_flush = 0.0
            if self._idle.wait(max(0.0, deadline - time.monotonic())) and not self.events:
                return self._thread.is_alive()
        return False

    def close(self, timeout_s: float = 1.0) -> None:
        """Sends what is buffered and stops the thread, within `timeout_s` whatever the endpoint
        does: past it, the export in flight is cancelled (closing its channel ends it)."""
        self._deadline = time.monotonic() + timeout_s
        self._stop.set()
        self._thread.join(max(0.0, timeout_s - 0.1))
        if self._thread.is_alive() and self._channel is not None:
            self._channel.close()
            self._thread.join(0.1)

    def stats(self) -> dict[str, int]:
        return {
            "dropped_events": self.dropped_events,
            "sent_requests": self.sent_requests,
            "sent_iterations": self.sent_iterations,
            "dropped_requests": self.dropped_requests,
            "dropped_iterations": self.dropped_iterations,
            "rejected_requests": self.rejected_requests,
            "rejected_iterations": self.rejected_iterations,
            "sent_texts": self.sent_texts,
            "texts_missing": self.texts_missing,
            "record_errors": self.record_errors,
            "hook_errors": self.hook_errors,
            "export_errors": self.export_errors,
            "on": int(self.on),
            "cpu_ns": self.cpu_ns,
            "steps": self.steps,
        }


class _Off:
    """The exporter of a plugin that could not start: hooks see `on` False and push nothing."""

    on = False
    off_reason = "the exporter did not start"

    def push(self, event: tuple) -> None:
        pass

    def flush(self, timeout_s: float = 0.0) -> bool:
        return False

    def close(self, timeout_s: float = 0.0) -> None:
        pass

    def stats(self) -> dict[str, int]:
        return {"on": 0}


OFF = _Off()
