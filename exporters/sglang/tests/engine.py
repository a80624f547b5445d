"""Drives SGLang's `Scheduler` hooks with SGLang's own request and batch objects, on CPU.

SGLang's scheduler cannot be built without a model worker on a GPU, so its step loop is played
here: `drive` does what `Scheduler.get_next_batch_to_run` does for the cases under test (chunked
prefill that holds decodes back, a prefill mixed with the running decodes as with
`--enable-mixed-chunk`, a retraction when the KV pool runs out) and builds each step's real
`ScheduleBatch` (`forward_mode`, `prefix_lens`, `extend_lens`, `chunked_req`, `decoding_reqs`).
The three hooked methods are SGLang's real `Scheduler` attributes, replaced through SGLang's
`HookRegistry` (REPLACE, which the plugin's AROUND hooks wrap, as they would wrap the originals):
the model's part appends each request's next token, its logprobs when asked, and lets SGLang's
own `Req.update_finish_state()` decide when it finishes. Records what the "engine" did, to compare
with what tokenscope stored.
"""

from __future__ import annotations

import os
import time
from array import array
from dataclasses import dataclass, field
from types import SimpleNamespace

from sglang.srt.disaggregation.utils import DisaggregationMode
from sglang.srt.managers.schedule_batch import Req, ScheduleBatch
from sglang.srt.managers.scheduler import Scheduler
from sglang.srt.model_executor.forward_batch_info import ForwardMode
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry, HookType
from sglang.srt.sampling.sampling_params import SamplingParams

EOS = 2
CHUNK = 256
# The first token of a PD request, made on the prefill instance.
HANDOFF = 77
TARGET = "sglang.srt.managers.scheduler.Scheduler"
ADDER = "sglang.srt.managers.schedule_policy.PrefillAdder"


@dataclass
class Run:
    # Per step: {request id: (phase, tokens)}.
    steps: list = field(default_factory=list)
    tokens: dict = field(default_factory=dict)
    # Per request, the step that made each token (SGLang's `forward_iter`).
    made: dict = field(default_factory=dict)
    # Speculative decoding: (step, request id) -> (drafts verified, accepted).
    drafts: dict = field(default_factory=dict)
    retracted: list = field(default_factory=list)
    aborted: list = field(default_factory=list)
    # Priority preemption: victim id -> (the request it made room for, the tokens it had: its
    # prompt and output, all of which it computes again).
    preempted: dict = field(default_factory=dict)


# --- the model's side of the three hooked methods --------------------------------------------------


def _queue(self, req, is_retracted=False):
    self.waiting_queue.append(req)


def _run_batch(self, batch, *args, **kwargs):
    self.forward_ct += 1
    batch.forward_iter = self.forward_ct
    batch.launch_ts = time.monotonic()
    computed = sum(batch.extend_lens or ()) if batch.forward_mode.is_extend() else 0
    time.sleep(self.decode_s + computed * self.prefill_s_per_token)
    result = SimpleNamespace(forward_mode=batch.forward_mode)
    k = self.spec_drafts
    if k and batch.forward_mode.is_decode():
        # Speculative decoding (EAGLE's chain): each request's k drafts and the token before
        # them verified; the first `(step + len(id)) % (k + 1)` drafts accepted.
        result.speculative_num_draft_tokens = k + 1
        result.accept = [(self.forward_ct + len(req.rid)) % (k + 1) for req in batch.reqs]
    return result


def _process_batch_result(self, batch, result):
    if batch.forward_mode.is_prebuilt():
        return  # PD decode taking in transferred KV: nothing computed, no token
    accept = getattr(result, "accept", None)
    if accept is not None:
        # As SGLang's `_resolve_spec_v2_tokens` does before it applies the tokens.
        result.num_correct_drafts_per_req_cpu = list(accept)
    for i, req in enumerate(batch.reqs):
        if req.inflight_middle_chunks > 0:
            req.inflight_middle_chunks -= 1
            continue  # a chunk short of the prompt's end samples nothing
        if req.finished_reason is not None or req.is_retracted:
            continue  # overlap: a finished or retracted request's overshoot step is dropped
        n = len(req.output_ids)
        drafts = [3000 + j for j in range(accept[i])] if accept is not None else []
        token = EOS if self.eos_after.get(req.rid) == n + len(drafts) + 1 else 100 + (hash(req.rid) + n) % 1000
        made = drafts + [token]
        if accept is not None:
            self.drafts[(batch.forward_iter, req.rid)] = (self.spec_drafts, accept[i])
        req.output_ids.extend(made)
        self.made.setdefault(req.rid, []).extend([batch.forward_iter] * len(made))
        if req.return_logprob:
            lp, k = req.logprob, req.logprob.top_logprobs_num
            if lp.output_token_logprobs_val is None:
                lp.output_token_logprobs_val, lp.output_token_logprobs_idx = [], []
                lp.output_top_logprobs_val, lp.output_top_logprobs_idx = [], []
            for t in made:
                lp.output_token_logprobs_val.append(-0.5)
                lp.output_token_logprobs_idx.append(t)
                lp.output_top_logprobs_val.append([-0.25 * (j + 1) for j in range(k)])
                lp.output_top_logprobs_idx.append([1000 + j for j in range(k)])
        req.update_finish_state(len(made))


def _preempt_to_schedule(self, req) -> bool:
    """`PrefillAdder.preempt_to_schedule` as SGLang 0.5.23 does it, on this harness's KV
    accounting (`self.harness`: the scheduler): running requests of a lower priority, lowest and
    newest first, released (their KV freed, `Req.reset_for_retract`) until the request fits;
    each appended to `preempt_list`, and the running batch filtered. False, evicting no one, when
    they would not make room."""
    s, need = self.harness
    order = {id(r): i for i, r in enumerate(self.running_batch.reqs)}  # later: newer
    lower = sorted(
        (r for r in self.running_batch.reqs if (r.priority or 0) < (req.priority or 0)), key=lambda r: (r.priority or 0, -order[id(r)])
    )
    free = s.max_total_num_tokens - sum(s.kv.values())
    victims = []
    for r in lower:
        if free >= need:
            break
        victims.append(r)
        free += s.kv.get(r.rid, 0)
    if not victims or free < need:
        return False
    for r in victims:
        s.kv.pop(r.rid, None)
        r.reset_for_retract()
    self.preempt_list.extend(victims)
    self.running_batch.reqs = [r for r in self.running_batch.reqs if r not in victims]
    return True


def _event_loop(self):
    arrivals, kwargs = self.scenario
    self.run = drive(self, arrivals, **kwargs)
    self.loop_ended = time.monotonic()  # what follows is the plugin's shutdown


_installed = False


def install_plugins() -> None:
    """The model's methods (REPLACE), then SGLang's plugin loading, which finds tokenscope's entry
    point, runs its `register()` and applies every hook. Once per process."""
    global _installed
    if _installed:
        return
    _installed = True
    HookRegistry.register(f"{TARGET}._add_request_to_queue", _queue, HookType.REPLACE)
    HookRegistry.register(f"{TARGET}.run_batch", _run_batch, HookType.REPLACE)
    HookRegistry.register(f"{TARGET}.process_batch_result", _process_batch_result, HookType.REPLACE)
    HookRegistry.register(f"{TARGET}.run_event_loop", _event_loop, HookType.REPLACE)
    HookRegistry.register(f"{ADDER}.preempt_to_schedule", _preempt_to_schedule, HookType.REPLACE)
    load_plugins()


def start(instance: str, endpoint: str) -> None:
    """The next exporter made sends as `instance` to `endpoint` (read when a hook first runs)."""
    os.environ["TOKENSCOPE_ENDPOINT"] = endpoint
    os.environ["TOKENSCOPE_INSTANCE"] = instance


def exporter(s):
    """The scheduler's exporter (None where it does not export)."""
    from tokenscope_sglang.hooks import exporter_of

    return exporter_of(s)


def serve(s, arrivals: dict, **kwargs) -> Run:
    """Runs the scenario as the scheduler's event loop (`Scheduler.run_event_loop`), which returns
    when every request has finished, as a graceful shutdown would."""
    s.scenario = (arrivals, kwargs)
    s.run_event_loop()
    return s.run


def make_scheduler(
    kv_tokens: int = 4096, prefill_s_per_token: float = 60e-6, decode_s: float = 0.004, eos_after=None, spec_drafts: int = 0
):
    """A `Scheduler` with only what the hooks and the plugin read (its constructor would start a
    model worker). `spec_drafts`: speculative decoding with that many drafts a step."""
    s = Scheduler.__new__(Scheduler)
    s.forward_ct = 0
    s.waiting_queue = []
    s.running_batch = ScheduleBatch(reqs=[])
    s.max_total_num_tokens = kv_tokens
    s.tokenizer = None
    s.disaggregation_mode = DisaggregationMode.NULL
    s.server_args = SimpleNamespace(served_model_name="tiny-sglang", model_path="tiny-sglang")
    s.prefill_s_per_token = prefill_s_per_token
    s.decode_s = decode_s
    s.eos_after = eos_after or {}
    s.kv = {}  # request id -> KV tokens held
    s.made = {}  # request id -> the step (`forward_iter`) that made each of its tokens
    s.spec_drafts = spec_drafts
    s.drafts = {}  # (step, request id) -> (drafts verified, accepted)
    s.token_to_kv_pool_allocator = SimpleNamespace(available_size=lambda: kv_tokens - sum(s.kv.values()))
    s.tree_cache = SimpleNamespace(evictable_size=lambda: 0, finish=lambda handle, outcome: None)
    return s


def make_request(rid: str, prompt: int, max_tokens: int, logprobs: int = 0, temperature: float = 0.7, **kwargs) -> Req:
    """SGLang's own `Req`; `kwargs`: its other arguments (`lora_id`, `priority`)."""
    sp = SamplingParams(max_new_tokens=max_tokens, temperature=temperature, top_p=0.9, stop_token_ids=[EOS])
    sp.normalize(None)
    return Req(
        rid,
        "",
        array("q", [1 + (i % 500) for i in range(prompt)]),
        sp,
        return_logprob=logprobs > 0,
        top_logprobs_num=logprobs,
        eos_token_ids={EOS},
        **kwargs,
    )


# --- the step loop --------------------------------------------------------------------------------


def drive(
    s, arrivals: dict, mixed_from: int | None = None, overlap: bool = False, aborts: dict | None = None, max_steps: int = 2000
) -> Run:
    """Runs steps until every request has finished. `arrivals`: step number -> requests that
    arrive then; `aborts`: step number -> id of a waiting request its client gives up on then
    (SGLang's `abort_request` pops it from the queue and calls `_release_aborted_request`).
    From step `mixed_from` on, a prefill runs with the decodes (mixed chunk). With
    `overlap`, as SGLang's default overlap scheduler: step N+1 is scheduled and launched before
    step N's output is processed (for a `batch.copy()`), so a request that finishes in step N
    still runs in step N+1, whose output for it is dropped."""
    run = Run()
    running: list = []
    chunked = None  # the request whose prompt is being prefilled in chunks
    done_prefill: dict = {}
    in_flight = None  # overlap: the launched step whose output is not processed yet
    run.made, run.drafts = s.made, s.drafts
    total = sum(len(v) for v in arrivals.values())
    for n in range(max_steps):
        for req in arrivals.get(n, ()):
            s._add_request_to_queue(req)
        gone = (aborts or {}).get(n)
        for req in [r for r in s.waiting_queue if r.rid == gone]:
            s.waiting_queue.remove(req)
            s._release_aborted_request(req)
            run.aborted.append(req.rid)
        if len(run.tokens) + len(run.aborted) == total:
            if in_flight is not None:
                _process(s, *in_flight, running, run)
            return run
        if s.disaggregation_mode == DisaggregationMode.DECODE:
            batch = _prebuilt_batch(s)
        else:
            batch = _prefill_batch(s, running, chunked, done_prefill, mixed_from is not None and n >= mixed_from, run)
        if batch is None and running:
            _retract_if_full(s, running, run)
            batch = ScheduleBatch(reqs=list(running), forward_mode=ForwardMode.DECODE)
            for req in running:
                s.kv[req.rid] += 1
        if batch is None:
            if in_flight is not None:
                _process(s, *in_flight, running, run)
                in_flight = None
            else:
                time.sleep(0.001)
            continue
        chunked = batch.chunked_req
        s.running_batch = ScheduleBatch(reqs=list(running))
        if not batch.forward_mode.is_prebuilt():
            run.steps.append(_composition(batch))
        result = s.run_batch(batch)
        # Requests whose prompt is done decode from the next step on.
        for req in batch.reqs:
            if req is not chunked and req not in running:
                running.append(req)
        if overlap:
            if in_flight is not None:
                _process(s, *in_flight, running, run)
            in_flight = (batch.copy(), result)
        else:
            _process(s, batch, result, running, run)
    raise AssertionError("the scenario did not finish")


def _process(s, batch, result, running: list, run: Run) -> None:
    s.process_batch_result(batch, result)
    for req in batch.reqs:
        if req.finished_reason is not None and req.rid not in run.tokens:
            run.tokens[req.rid] = list(req.output_ids_through_stop)  # what its client gets
            s.kv.pop(req.rid, None)
    running[:] = [r for r in running if r.finished_reason is None]


def _prefill_batch(s, running, chunked, done_prefill, mixed, run):
    """The next prefill: the chunked request's next chunk, else waiting requests that fit (with
    priority preemption on, evicting running requests of a lower priority to fit)."""
    queue = [chunked] if chunked is not None else list(s.waiting_queue)
    if not queue:
        return None
    reqs, prefix, extend, budget, next_chunked = [], [], [], CHUNK, None
    for req in queue:
        need = len(req.origin_input_ids) + len(req.output_ids)  # a resumed one recomputes its output
        before = done_prefill.get(req.rid, 0)
        if before == 0 and s.max_total_num_tokens - sum(s.kv.values()) < need + len(running):
            if not _preempt_for(s, req, need + len(running), running, run):
                break  # no room for the whole prompt: decode on
        take = min(need - before, budget)
        if take <= 0:
            break
        reqs.append(req)
        prefix.append(before)
        extend.append(take)
        done_prefill[req.rid] = before + take
        s.kv[req.rid] = before + take
        budget -= take
        if before + take < need:
            next_chunked = req
            break
        if budget == 0:
            break
    if not reqs:
        return None
    if next_chunked is not None:
        next_chunked.inflight_middle_chunks += 1  # as SGLang's get_new_batch_prefill does
    for req in reqs:
        req.is_retracted = False  # as SGLang's prepare_for_extend does
        if req in s.waiting_queue:
            s.waiting_queue.remove(req)
        if req is not next_chunked:
            done_prefill.pop(req.rid, None)
    decoding = list(running) if mixed else None
    if decoding:
        for req in decoding:
            s.kv[req.rid] += 1
        reqs = reqs + decoding
        prefix = prefix + [0] * len(decoding)
        extend = extend + [1] * len(decoding)
    return ScheduleBatch(
        reqs=reqs,
        forward_mode=ForwardMode.MIXED if decoding else ForwardMode.EXTEND,
        prefix_lens=prefix,
        extend_lens=extend,
        chunked_req=next_chunked,
        decoding_reqs=decoding,
    )


def _preempt_for(s, req, need: int, running: list, run: Run) -> bool:
    """With `s.enable_priority_preemption`, as SGLang's `get_new_batch_prefill`: a prefill adder
    over the running batch is asked to preempt for `req`; what it evicted leaves the running
    requests and is queued again."""
    if not getattr(s, "enable_priority_preemption", False):
        return False
    from sglang.srt.managers.schedule_policy import PrefillAdder

    adder = PrefillAdder.__new__(PrefillAdder)
    adder.running_batch, adder.preempt_list, adder.harness = ScheduleBatch(reqs=list(running)), [], (s, need)
    had = {r.rid: len(r.origin_input_ids) + len(r.output_ids) for r in running}
    if not adder.preempt_to_schedule(req):
        return False
    for victim in adder.preempt_list:
        running.remove(victim)
        run.preempted[victim.rid] = (req.rid, had[victim.rid])
        s._add_request_to_queue(victim)
    return True


def _prebuilt_batch(s):
    """PD decode, as SGLang's decode queues do: the waiting requests' KV cache "arrives" from
    the prefill instance (a 50 ms transfer, timed in their `time_stats` on `perf_counter`'s clock),
    their first token with it, appended outside any step; then a PREBUILT pass takes them in."""
    reqs = list(s.waiting_queue)
    if not reqs:
        return None
    now = time.perf_counter()
    for req in reqs:
        s.waiting_queue.remove(req)
        req.time_stats.decode_transfer_queue_entry_time = now - 0.05
        req.time_stats.decode_prebuilt_finish_time = now
        req.output_ids.append(HANDOFF)
        s.kv[req.rid] = len(req.origin_input_ids) + 1
    return ScheduleBatch(reqs=reqs, forward_mode=ForwardMode.PREBUILT)


def _retract_if_full(s, running, run) -> None:
    """Out of KV for the next decode step: SGLang retracts the request that came last."""
    while running and s.max_total_num_tokens - sum(s.kv.values()) < len(running):
        req = running.pop()
        s.kv.pop(req.rid, None)
        req.reset_for_retract()
        run.retracted.append(req.rid)
        s._add_request_to_queue(req, is_retracted=True)


def _composition(batch) -> dict:
    decoding = {id(r) for r in batch.decoding_reqs or ()}
    out = {}
    for i, req in enumerate(batch.reqs):
        if batch.forward_mode.is_decode() or id(req) in decoding:
            out[req.rid] = ("decode", 1)
        else:
            out[req.rid] = ("prefill", batch.extend_lens[i])
    return out
