"""The hooks on SGLang's `Scheduler` (names read in sglang 0.5.23's source, `managers/scheduler.py`).

- `_add_request_to_queue(req, is_retracted)`: a request enters the waiting queue, new or back
  after a retraction or a priority preemption.
- `_release_aborted_request(req)`: a request leaves without finishing: aborted while it waited,
  or refused at the queue (full, or outranked). SGLang sets no finish reason for these.
- `run_batch(batch)`: a step starts; `batch.forward_iter` (set by it) names the step, and the
  batch says who runs and what each computes.
- `process_batch_result(batch, result)`: the step's output has been applied: tokens appended,
  requests finished. With the overlap scheduler it comes one step late, for a copy of the batch
  that keeps `forward_iter`. With speculative decoding the result says how many drafts each
  request accepted (`num_correct_drafts_per_req_cpu`, which SGLang fills while applying it) out
  of how many (`speculative_num_draft_tokens`, less the one token that is not a draft, as
  SGLang's own acceptance rate counts).
- `run_event_loop()`: when it returns (a graceful shutdown), what is buffered is sent before the
  process exits. SGLang's scheduler processes end with `os._exit`, which skips `atexit`.
- `PrefillAdder.preempt_to_schedule(req)` (`managers/schedule_policy.py`, with
  `--enable-priority-scheduling` and preemption): when it returns True it has evicted running
  requests of a lower priority, appended to its `preempt_list`, to make room for `req`; the
  scheduler then queues them again. (A decode retraction, `ScheduleBatch.retract_decode`, makes
  room for no one request: the running batch's next tokens did not fit. Its requests are
  preempted by no one.)

Each hook calls SGLang's method and hands references to what SGLang built anyway to the exporter's
buffer: a clock read, a tuple of the batch's requests, an append. Everything else happens on the
exporter's thread (`recorder`). SGLang's method runs outside any guard (its errors are the
engine's); what a hook then reads of SGLang's objects is inside one: a renamed attribute turns the
plugin off (`Exporter.fault`: one log line, a counter), never raises into the scheduler.
"""

from __future__ import annotations

import logging
import os
import socket
import time

from tokenscope_exporter import OFF, Exporter, Texts, wire

from .recorder import Recorder

log = logging.getLogger("tokenscope_sglang")

# The SGLang release the plugin is tested against; the package's `sglang` extra says the same.
TESTED = ("0.5.23",)
SHUTDOWN_S = float(os.environ.get("TOKENSCOPE_SHUTDOWN_S", "1.0"))

SCHEDULER = "sglang.srt.managers.scheduler.Scheduler"
PREFILL_ADDER = "sglang.srt.managers.schedule_policy.PrefillAdder"

# The exporter of this process's scheduler, for the hooks on objects that hold no reference to it
# (the prefill adder): SGLang runs one scheduler per process.
_process = OFF


def register() -> None:
    """The `sglang.srt.plugins` entry point: SGLang calls it in every scheduler process, then
    applies the hooks before it builds the scheduler."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(f"{SCHEDULER}._add_request_to_queue", _queued, HookType.AROUND)
    HookRegistry.register(f"{SCHEDULER}.run_batch", _run_batch, HookType.AROUND)
    HookRegistry.register(f"{SCHEDULER}.process_batch_result", _process_batch_result, HookType.AROUND)
    HookRegistry.register(f"{SCHEDULER}.run_event_loop", _event_loop, HookType.AROUND)
    HookRegistry.register(f"{SCHEDULER}._release_aborted_request", _aborted, HookType.AROUND)
    HookRegistry.register(f"{PREFILL_ADDER}.preempt_to_schedule", _preempting, HookType.AROUND)


def _queued(original, self, req, *args, **kwargs):
    # Handed over first: the queue may refuse the request, and its refusal must come after.
    ts = _exporter_of(self)
    if ts.on:
        ts.push(("queued", req, time.time_ns()))
    return original(self, req, *args, **kwargs)


def _aborted(original, self, req, *args, **kwargs):
    out = original(self, req, *args, **kwargs)
    ts = _exporter_of(self)
    if ts.on:
        ts.push(("aborted", req, time.time_ns()))
    return out


def _run_batch(original, self, batch, *args, **kwargs):
    start = time.time_ns()
    out = original(self, batch, *args, **kwargs)
    ts = _exporter_of(self)
    if ts.on:
        try:
            ts.push(_launched_event(self, batch, start))
        except Exception as e:  # SGLang renamed what the step is read from: off, not the engine
            ts.fault("run_batch", e)
    return out


def _process_batch_result(original, self, batch, result=None, *args, **kwargs):
    out = original(self, batch, result, *args, **kwargs)
    ts = _exporter_of(self)
    if ts.on:
        try:
            # Speculative decoding: the drafts each request accepted, as SGLang counted them for
            # its metrics while it applied the output (None otherwise).
            accepted = getattr(result, "num_correct_drafts_per_req_cpu", None)
            if accepted is None:
                ts.push(("processed", batch.forward_iter, time.time_ns()))
            else:
                drafts = (getattr(result, "speculative_num_draft_tokens", None) or 1) - 1
                ts.push(("processed", batch.forward_iter, time.time_ns(), accepted, drafts))
        except Exception as e:
            ts.fault("process_batch_result", e)
    return out


def _preempting(original, self, req, *args, **kwargs):
    before = len(getattr(self, "preempt_list", ()))
    out = original(self, req, *args, **kwargs)
    ts = _process
    if out and ts.on:
        try:
            # The requests this call evicted, and the one they made room for.
            ts.push(("preempting", req.rid, tuple(q.rid for q in self.preempt_list[before:]), time.time_ns()))
        except Exception as e:
            ts.fault("preempt_to_schedule", e)
    return out


def _event_loop(original, self, *args, **kwargs):
    try:
        return original(self, *args, **kwargs)
    finally:
        # What is buffered is sent, for at most a second whatever the endpoint does.
        ts = self.__dict__.get("_tokenscope")
        if ts is not None:
            ts.close(timeout_s=SHUTDOWN_S)


def _launched_event(self, batch, start_ns: int) -> tuple:
    """What a step's start hands over. The batch's request list is copied (a tuple, in C): the
    running batch is one object that SGLang filters and merges from step to step. Its
    `prefix_lens` / `extend_lens` are new lists for each prefill batch."""
    running = self.running_batch
    return (
        "launched",
        batch.forward_iter,
        batch.forward_mode,
        tuple(batch.reqs),
        batch.prefix_lens,
        batch.extend_lens,
        batch.decoding_reqs,
        batch.chunked_req,
        start_ns,
        len(running.reqs) if running is not None else 0,
        len(self.waiting_queue),
        _kv_usage(self),
    )


def _kv_usage(self) -> float:
    """The share of the KV pool held by requests (what the prefix cache could evict is free)."""
    try:
        total = self.max_total_num_tokens
        free = self.token_to_kv_pool_allocator.available_size() + self.tree_cache.evictable_size()
        return max(0.0, min(1.0, 1.0 - free / total)) if total else 0.0
    except Exception:
        return 0.0


# --- one exporter per scheduler process -----------------------------------------------------------

def _exporter_of(self):
    """The scheduler's exporter, made on first use; `OFF` on the ranks that do not export, or when
    it could not start."""
    global _process
    ts = self.__dict__.get("_tokenscope")
    if ts is None:
        try:
            ts = _make_exporter(self) or OFF
        except Exception:  # no traces rather than no engine
            log.exception("tokenscope: exporter not started")
            ts = OFF
        self.__dict__["_tokenscope"] = _process = ts
    return ts


def _make_exporter(self) -> Exporter | None:
    import sglang

    # Tensor- and pipeline-parallel ranks run the same steps: one of them speaks for the group.
    if _rank("attn_tp_rank") or _rank("pp_rank"):
        return None
    dp_rank = _rank("dp_rank")
    host = socket.gethostname()
    instance = os.environ.get("TOKENSCOPE_INSTANCE") or (f"{host}/dp{dp_rank}" if dp_rank else host)
    resource = wire.resource(wire.ENGINE_SGLANG, sglang.__version__, _model(self), instance, _role(self), host)
    exporter = Exporter(
        endpoint=os.environ.get("TOKENSCOPE_ENDPOINT", "127.0.0.1:4317"),
        resource=resource,
        recorder=Recorder(Texts(lambda: getattr(self, "tokenizer", None))),
        capacity=int(os.environ.get("TOKENSCOPE_BUFFER_EVENTS", "65536")),
        flush_interval_s=float(os.environ.get("TOKENSCOPE_FLUSH_INTERVAL_S", "0.5")),
        key=os.environ.get("TOKENSCOPE_INGEST_KEY") or None,
    )
    log.info("tokenscope: exporting %s's steps to %s", instance, exporter._endpoint)
    if sglang.__version__ not in TESTED:
        log.warning(
            "tokenscope: tested with SGLang %s, this is %s: recording turns itself off if it finds SGLang changed",
            " and ".join(TESTED),
            sglang.__version__,
        )
    return exporter


def _rank(name: str) -> int:
    """This process's rank in SGLang's runtime context; 0 where the launcher wrote none."""
    try:
        from sglang.srt.runtime_context import get_parallel

        return getattr(get_parallel(), name) or 0
    except Exception:
        return 0


def _model(self) -> str:
    name = os.environ.get("TOKENSCOPE_MODEL")
    if name:
        return name
    try:
        from sglang.srt.runtime_context import get_serving

        name = get_serving().served_model_name
    except Exception:
        name = None
    args = getattr(self, "server_args", None)
    return name or getattr(args, "served_model_name", None) or getattr(args, "model_path", "") or ""


def _role(self) -> int:
    """PD disaggregation: the prefill server and the decode server each run a scheduler."""
    mode = getattr(getattr(self, "disaggregation_mode", None), "value", "null")
    return {"prefill": wire.ROLE_PREFILL, "decode": wire.ROLE_DECODE}.get(mode, wire.ROLE_COLOCATED)


def exporter_of(scheduler) -> Exporter | None:
    """The scheduler's exporter (for tests): `flush()`, `stats()`, `close()`; None when off."""
    ts = _exporter_of(scheduler)
    return None if ts is OFF else ts
