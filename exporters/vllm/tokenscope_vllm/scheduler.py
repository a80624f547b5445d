"""vLLM schedulers that record every step for tokenscope.

`vllm serve … --scheduler-cls tokenscope_vllm.TracingScheduler` (or `TracingAsyncScheduler` with
async scheduling). Each method calls vLLM's own and, around it, hands references to what it
already built to the exporter's buffer: a clock read and an append, nothing per request.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time

import vllm
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from tokenscope_exporter import OFF, Exporter, Texts, wire

from .recorder import Recorder, per_request_logprobs

log = logging.getLogger("tokenscope_vllm")

# The vLLM releases the plugin is tested against (scripts/test-engines runs both); the package's
# `vllm` extra says the same range.
TESTED = ("0.33.0", "0.34.0")
SHUTDOWN_S = float(os.environ.get("TOKENSCOPE_SHUTDOWN_S", "1.0"))


def _role(vllm_config) -> int:
    """PD disaggregation: a KV producer prefills, a consumer decodes."""
    kv = getattr(vllm_config, "kv_transfer_config", None)
    role = getattr(kv, "kv_role", None) if kv is not None else None
    return {"kv_producer": wire.ROLE_PREFILL, "kv_consumer": wire.ROLE_DECODE}.get(role, wire.ROLE_COLOCATED)


def _tokenizer(model_config):
    """The model's tokenizer, loaded on the exporter's thread (the scheduler holds none)."""
    if model_config is None or getattr(model_config, "skip_tokenizer_init", False):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(
        model_config.tokenizer,
        revision=getattr(model_config, "tokenizer_revision", None),
        trust_remote_code=getattr(model_config, "trust_remote_code", False),
    )


def _exporter(vllm_config) -> Exporter:
    model_config = vllm_config.model_config
    model = os.environ.get("TOKENSCOPE_MODEL") or (
        model_config.served_model_name
        if isinstance(getattr(model_config, "served_model_name", None), str)
        else model_config.model
    )
    host = socket.gethostname()
    dp_rank = getattr(vllm_config.parallel_config, "data_parallel_rank", 0) or 0
    instance = os.environ.get("TOKENSCOPE_INSTANCE") or (f"{host}/dp{dp_rank}" if dp_rank else host)
    resource = wire.resource(wire.ENGINE_VLLM, vllm.__version__, model, instance, _role(vllm_config), host)
    return Exporter(
        endpoint=os.environ.get("TOKENSCOPE_ENDPOINT", "127.0.0.1:4317"),
        resource=resource,
        recorder=Recorder(Texts(lambda: _tokenizer(model_config)), block_size=vllm_config.cache_config.block_size),
        capacity=int(os.environ.get("TOKENSCOPE_BUFFER_EVENTS", "65536")),
        flush_interval_s=float(os.environ.get("TOKENSCOPE_FLUSH_INTERVAL_S", "0.5")),
        key=os.environ.get("TOKENSCOPE_INGEST_KEY") or None,
    )


class _Tracing:
    """The hooks, shared by both scheduler classes.

    vLLM's own method runs first and outside any guard: its errors are the engine's. What the
    hook then reads of vLLM's objects is inside one: a name a new vLLM release renamed turns the
    plugin off (`Exporter.fault`, one log line and a counter), never raises into the scheduler."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        try:
            self.tokenscope = _exporter(self.vllm_config)
        except Exception:  # no traces rather than no engine
            log.exception("tokenscope: not recording: the exporter did not start")
            self.tokenscope = OFF
            return
        try:
            _check(self)
        except Exception as e:
            self.tokenscope.fault("startup", e)

    def add_request(self, request) -> None:
        super().add_request(request)
        ts = self.tokenscope
        if ts.on:
            ts.push(("add", request, time.time_ns()))

    def schedule(self, *args, **kwargs):
        start = time.time_ns()
        out = super().schedule(*args, **kwargs)
        ts = self.tokenscope
        if ts.on:
            try:
                ts.push(self._step_event(out, start))
            except Exception as e:
                ts.fault("schedule", e)
        return out

    def update_from_output(self, scheduler_output, model_runner_output):
        end = time.time_ns()
        ts = self.tokenscope
        made = None
        if ts.on:
            try:
                made = self._made(scheduler_output, model_runner_output)
            except Exception as e:
                ts.fault("update_from_output", e)
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        if ts.on:
            try:
                ts.push(self._update_event(scheduler_output, outputs, end, model_runner_output, made))
            except Exception as e:
                ts.fault("update_from_output", e)
        return outputs

    # What the two per-step hooks hand over (the benchmark times exactly these).

    def _step_event(self, out, start_ns: int) -> tuple:
        return ("scheduled", out, start_ns, len(self.running), len(self.waiting), self.kv_cache_manager.usage)

    @staticmethod
    def _made(scheduler_output, model_runner_output):
        """With speculative decoding, how many tokens the model runner made for each request,
        read before vLLM cuts its lists at a stop or the length limit (it counts accepted
        drafts from the uncut list too)."""
        if not getattr(scheduler_output, "scheduled_spec_decode_tokens", None):
            return None
        return list(map(len, model_runner_output.sampled_token_ids))

    def _update_event(self, scheduler_output, outputs, end_ns: int, model_runner_output=None, made=None) -> tuple:
        # Requests it finished: vLLM collects them for the next step's output; a copy, as that
        # set is handed on and replaced at the next schedule().
        done = tuple(self.finished_req_ids) if self.finished_req_ids else ()
        # The batch's logprobs as the model runner made them (None unless a request asked), and
        # with speculative decoding the tokens it kept (how many drafts each accepted).
        lp = getattr(model_runner_output, "logprobs", None)
        ids = model_runner_output.req_ids if lp is not None or made is not None else None
        # The step's outputs are read only for their logprobs, and only when the batch's arrays
        # hold several tokens to a request (`Recorder._keep_logprobs`); vLLM slices them from the
        # model runner's, so without those there are none. Not kept otherwise: they are freed
        # here with the engine's step as without the plugin, not on the exporter's thread (half
        # of its time at batch 256).
        kept = outputs if per_request_logprobs(lp) else None
        return ("updated", scheduler_output, kept, done, end_ns, lp, ids, made)

    def finish_requests(self, request_ids, finished_status):
        finished = super().finish_requests(request_ids, finished_status)
        ts = self.tokenscope
        if ts.on and finished:
            # Finished from outside: a client went away, or the front end saw a stop string.
            try:
                ts.push(("finished", _finished_ids(finished), time.time_ns()))
            except Exception as e:
                ts.fault("finish_requests", e)
        return finished

    def _preempt_request(self, request, *args, **kwargs):
        # Called only when vLLM evicts a request, from inside `schedule()`, whose local `request`
        # is then the one it is making room for: read from its frame (there is no other way to
        # learn it without changing vLLM); a vLLM that names it otherwise leaves it unknown.
        # Read before vLLM resets it to 0 (all of it is computed again); read so that it cannot
        # raise, as this runs before vLLM's own method.
        computed = getattr(request, "num_computed_tokens", 0)
        out = super()._preempt_request(request, *args, **kwargs)
        ts = self.tokenscope
        if ts.on:
            try:
                for_ = sys._getframe(1).f_locals.get("request")
                aggressor = getattr(for_, "request_id", "") if for_ is not request else ""
                ts.push(("preempted", request.request_id, aggressor, computed, time.time_ns()))
            except Exception as e:
                ts.fault("_preempt_request", e)
        return out

    def _set_kv_fetch_stage(self, request, stage, *args, **kwargs):
        # A KV connector's asynchronous load (PD decode: the prompt's KV cache from the prefill
        # instance; an offloading connector: from its tier): vLLM marks its start
        # ("in_progress", from `schedule()`, when it parks the request to wait for it) and its
        # end ("completed_waiting", when the workers report the blocks received).
        super()._set_kv_fetch_stage(request, stage, *args, **kwargs)
        ts = self.tokenscope
        if ts.on and stage in _KV_LOAD:
            try:
                if stage == _KV_LOAD[0]:
                    # The tokens loaded are a local of the caller's (`schedule()`), as the
                    # aggressor above: unknown (0) where vLLM names it otherwise.
                    tokens = sys._getframe(1).f_locals.get("num_external_computed_tokens", 0)
                    ts.push(("kv_loading", request.request_id, tokens if isinstance(tokens, int) else 0, time.time_ns()))
                else:
                    ts.push(("kv_loaded", request.request_id, time.time_ns()))
            except Exception as e:
                ts.fault("_set_kv_fetch_stage", e)

    def shutdown(self) -> None:
        # Sends what is buffered, for at most a second whatever the endpoint does.
        self.tokenscope.close(timeout_s=SHUTDOWN_S)
        super().shutdown()


# vLLM's names for a KV load's start and end (0.33 and 0.34); a release without them sends no
# transfer times.
try:
    from vllm.v1.metrics.stats import KV_FETCH_COMPLETED_WAITING, KV_FETCH_IN_PROGRESS

    _KV_LOAD: tuple = (KV_FETCH_IN_PROGRESS, KV_FETCH_COMPLETED_WAITING)
except ImportError:
    _KV_LOAD = ()


def _finished_ids(finished) -> list:
    """The ids of what `finish_requests` returns: the `Request`s it finished (vLLM 0.33 and 0.34);
    releases before returned nothing (then nothing is pushed: the next step's `finished_req_ids`
    say it), and a release that returns ids or (id, …) tuples works too."""
    return [f.request_id if hasattr(f, "request_id") else f[0] if isinstance(f, tuple) else f for f in finished]


def _check(scheduler) -> None:
    """What the hooks read on the engine's thread, read once at startup: a vLLM that renamed any of
    it turns the plugin off here, with the name, rather than at the first step."""
    len(scheduler.running), len(scheduler.waiting), float(scheduler.kv_cache_manager.usage)
    scheduler.finished_req_ids
    if vllm.__version__ not in TESTED:
        log.warning(
            "tokenscope: tested with vLLM %s, this is %s: recording turns itself off if it finds vLLM changed",
            " and ".join(TESTED),
            vllm.__version__,
        )


class TracingScheduler(_Tracing, Scheduler):
    """vLLM's `Scheduler`, recording every step for tokenscope."""


class TracingAsyncScheduler(_Tracing, AsyncScheduler):
    """vLLM's `AsyncScheduler` (async scheduling), recording every step for tokenscope."""
