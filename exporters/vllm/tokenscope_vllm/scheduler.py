"""vLLM schedulers that record every step for tokenscope.

`vllm serve … --scheduler-cls tokenscope_vllm.TracingScheduler` (or `TracingAsyncScheduler` with
async scheduling). Each method calls vLLM's own and, around it, hands references to what it
already built to the exporter's buffer: a clock read and an append, nothing per request.
"""

from __future__ import annotations

import os
import socket
import time

from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.scheduler import Scheduler

from tokenscope_exporter import Exporter, Texts, wire

from .recorder import Recorder


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
    import vllm

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
        recorder=Recorder(Texts(lambda: _tokenizer(model_config))),
        capacity=int(os.environ.get("TOKENSCOPE_BUFFER_EVENTS", "65536")),
        flush_interval_s=float(os.environ.get("TOKENSCOPE_FLUSH_INTERVAL_S", "0.5")),
        key=os.environ.get("TOKENSCOPE_INGEST_KEY") or None,
    )


class _Tracing:
    """The hooks, shared by both scheduler classes."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.tokenscope = _exporter(self.vllm_config)

    def add_request(self, request) -> None:
        super().add_request(request)
        self.tokenscope.push(("add", request, time.time_ns()))

    def schedule(self, *args, **kwargs):
        start = time.time_ns()
        out = super().schedule(*args, **kwargs)
        self.tokenscope.push(self._step_event(out, start))
        return out

    def update_from_output(self, scheduler_output, model_runner_output):
        end = time.time_ns()
        outputs = super().update_from_output(scheduler_output, model_runner_output)
        self.tokenscope.push(self._update_event(scheduler_output, outputs, end))
        return outputs

    # What the two per-step hooks hand over (the benchmark times exactly these).

    def _step_event(self, out, start_ns: int) -> tuple:
        return ("scheduled", out, start_ns, len(self.running), len(self.waiting), self.kv_cache_manager.usage)

    def _update_event(self, scheduler_output, outputs, end_ns: int) -> tuple:
        # Requests it finished: vLLM collects them for the next step's output; a copy, as that
        # set is handed on and replaced at the next schedule().
        done = tuple(self.finished_req_ids) if self.finished_req_ids else ()
        return ("updated", scheduler_output, outputs, done, end_ns)

    def finish_requests(self, request_ids, finished_status):
        finished = super().finish_requests(request_ids, finished_status)
        if finished:
            # Finished from outside: a client went away, or the front end saw a stop string.
            self.tokenscope.push(("finished", [r.request_id for r in finished], time.time_ns()))
        return finished

    def shutdown(self) -> None:
        self.tokenscope.flush(timeout_s=5.0)
        self.tokenscope.close()
        super().shutdown()


class TracingScheduler(_Tracing, Scheduler):
    """vLLM's `Scheduler`, recording every step for tokenscope."""


class TracingAsyncScheduler(_Tracing, AsyncScheduler):
    """vLLM's `AsyncScheduler` (async scheduling), recording every step for tokenscope."""
