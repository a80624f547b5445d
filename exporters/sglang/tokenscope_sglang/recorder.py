"""Turns what SGLang's scheduler did, step by step, into tokenscope's model: one `Iteration` per
engine step (its batch), one `Request` per finished request (stages, tokens, logprobs).

Runs on the exporter's thread. The scheduler hands over references (its `Req` objects, a step's
`prefix_lens` / `extend_lens`); this module reads them after the fact, and only what SGLang no
longer changes by then: a request's output ids and finish reason once it has finished, a prefill
batch's lengths (new lists for each batch). Whether a prefill chunk makes a token is the batch's
`chunked_req` (the one request whose prompt the chunk does not finish), decided by SGLang itself.

Tokens are timed as in the vLLM recorder (`tokenscope_exporter.record`): when a request is done
its token ids are read from its `Req`, and the steps that made them come from the step window.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from itertools import chain, compress
from operator import attrgetter

from tokenscope_exporter import Texts, wire
from tokenscope_exporter.refs import ANY, RequestRefs
from tokenscope_exporter.record import RequestRecord, StepWindow, first_tokens, stopped_by_last, tokens_made

# Every so many steps, requests that finished without running a step (aborted while waiting)
# are looked for among the live ones.
SWEEP_EVERY = 64

# SGLang's finish reasons (managers/schedule_batch.py), by class name.
_FINISH = {
    "FINISH_MATCHED_TOKEN": wire.FINISH_STOP,
    "FINISH_MATCHED_STR": wire.FINISH_STOP,
    "FINISHED_MATCHED_REGEX": wire.FINISH_STOP,
    "FINISH_LENGTH": wire.FINISH_LENGTH,
    "FINISH_ABORT": wire.FINISH_ABORT,
}
_FINISHED = attrgetter("finished_reason")
_RID = attrgetter("rid")
# SGLang's "whole vocabulary" top-k (sampling/sampling_params.py TOP_K_ALL), and its -1.
_TOP_K_ALL = 1 << 30


def _output(req):
    """The request's output as its client gets it: with speculative decoding a step may accept
    tokens past a stop or the length limit, which SGLang keeps in `output_ids` but cuts here."""
    return getattr(req, "output_ids_through_stop", None) or req.output_ids


@dataclass
class Sampling:
    """SGLang's `SamplingParams` under the names `wire` writes."""

    temperature: float | None
    top_p: float | None
    top_k: int | None
    max_tokens: int | None
    seed: int | None

    @staticmethod
    def of(sp) -> Sampling | None:
        if sp is None:
            return None
        top_k = getattr(sp, "top_k", None)
        return Sampling(
            temperature=getattr(sp, "temperature", None),
            top_p=getattr(sp, "top_p", None),
            top_k=None if top_k is None or top_k >= _TOP_K_ALL else top_k,
            max_tokens=getattr(sp, "max_new_tokens", None),
            seed=getattr(sp, "sampling_seed", None),
        )


@dataclass
class Record(RequestRecord):
    """A request while it runs, as tokenscope will store it."""

    # SGLang's own request: its output ids and finish reason are read when it is done.
    req: object = None
    # Once preempted by priority (`Recorder.preempting`), until it resumes: the request it made
    # room for.
    preempted_for: str = ""


@dataclass
class Step:
    iteration_id: int
    start_ns: int
    reqs: tuple
    # Request ids that ran in it, and those of them that made no token.
    ran: frozenset
    silent: set
    batch: bytes
    # The export's request ids the batch is numbered against (`RequestRefs.ids`).
    ids: list
    # Prefill chunks: (record, tokens).
    prefills: list
    running: int
    waiting: int
    kv_cache_usage: float
    end_ns: int = 0
    # Speculative decoding: the tokens the step made for each request (accepted drafts + 1).
    made: dict | None = None
    # Set when the step window keeps it (`record.StepWindow`): its id and times packed, the
    # request ids it made a token for, its place in the window's stream of main steps.
    times: bytes = b""
    made_by: object = None
    at: int = -1
    # A decode step: the ids its batch has entries for, in order (`RequestRefs.decode_batch_of`).
    decoded: list | None = None


class Recorder:
    """Consumes the hooks' events in order; finished requests and steps come out encoded."""

    def __init__(self, texts: Texts | None = None) -> None:
        self.texts = texts or Texts()
        self.records: dict[str, Record] = {}
        # SGLang times stages on `perf_counter`: this moves its times onto the wall clock.
        self.perf_to_wall_ns = time.time_ns() - time.perf_counter_ns()
        # Batch entries name requests by reference into the export's ids; the exporter takes
        # them as it sends.
        self.refs = RequestRefs()
        # Launched steps waiting for their output, by SGLang's `forward_iter`.
        self.pending: dict[int, Step] = {}
        self.window = StepWindow()
        # Step ids increase across restarts of the engine: tokenscope keys steps by instance and id.
        self.next_iteration = time.time_ns() // 1000
        self.requests_out: list[bytes] = []
        self.iterations_out: list[bytes] = []
        self.unmatched_outputs = 0
        self.processed_steps = 0
        # The last decode step's requests, encoding, id set and the ids it is numbered against.
        self.last_decode: tuple | None = None

    # --- events -------------------------------------------------------------------------------

    def queued(self, req, at_ns: int) -> None:
        """A request entered the waiting queue: new, or back after a retraction or preemption."""
        r = self.records.get(req.rid)
        if r is not None:
            if r.first_scheduled_ns and not r.preempted_ns:
                r.preempted_ns = at_ns
            # With the overlap scheduler, a step that ran it may still be in flight: SGLang drops
            # a retracted request's output from it, so that step made no token for it.
            for step in self.pending.values():
                if req.rid in step.ran:
                    step.silent.add(req.rid)
            return
        self.records[req.rid] = Record(
            request_id=req.rid,
            req=req,
            arrival_ns=at_ns,
            queued_ns=at_ns,
            prompt_tokens=len(req.origin_input_ids),
            sampling=Sampling.of(getattr(req, "sampling_params", None)),
            # SGLang's adapter id (its LoRA registry's name for the adapter) and priority.
            lora_adapter=getattr(req, "lora_id", None) or "",
            priority=getattr(req, "priority", None),
        )

    def preempting(self, aggressor: str, victims: tuple, at_ns: int) -> None:
        """Priority preemption: SGLang evicted `victims` to make room for `aggressor` (they are
        queued again next, which is when they count as preempted)."""
        for rid in victims:
            r = self.records.get(rid)
            if r is not None:
                r.preempted_for = aggressor

    def aborted(self, req, at_ns: int) -> None:
        """A request left without finishing (aborted while it waited, refused by the queue)."""
        r = self.records.get(req.rid)
        if r is None or self._in_flight(req.rid):
            return  # a step still running it finishes it
        making = self.window.making(r)
        made = first_tokens(making, r.request_id, len(_output(req)), self.window.speculative)
        self._finish(r, made if made is not None else making, at_ns, wire.FINISH_ABORT)

    def launched(
        self,
        forward_iter,
        mode,
        reqs: tuple,
        prefix_lens,
        extend_lens,
        decoding_reqs,
        chunked_req,
        start_ns: int,
        running: int,
        waiting: int,
        kv_usage: float,
    ) -> None:
        """A step started: who runs in it and what each computes."""
        if mode is not None and mode.is_prebuilt():
            self._handed_off(reqs, start_ns)
            return
        if not reqs or mode is None or mode.is_idle():
            return  # nothing computed
        it = self.next_iteration
        self.next_iteration += 1
        if mode.is_decode() or mode.is_target_verify():
            prev = self.last_decode
            if prev is not None and prev[0] == reqs and prev[3] is self.refs.ids:
                # The same requests as the step before (a comparison of references, in C), in
                # the same export: most decode steps. Their encoding and id set are the
                # previous step's.
                _, batch, ran, _, decoded = prev
            else:
                rids = list(map(_RID, reqs))
                ran = frozenset(rids)
                batch, decoded = self.refs.decode_batch_of(rids, self.records, ran)
                self.last_decode = (reqs, batch, ran, self.refs.ids, decoded)
            prefills, silent = [], set()
        else:
            batch, prefills, silent = self._mixed_batch(reqs, prefix_lens, extend_lens, decoding_reqs, chunked_req, start_ns, it)
            ran, decoded = frozenset(map(_RID, reqs)), None
        self.pending[forward_iter] = Step(
            it, start_ns, reqs, ran, silent, batch, self.refs.ids, prefills, running, waiting, kv_usage, decoded=decoded
        )

    def processed(self, forward_iter, end_ns: int, accepted=None, drafts: int = 0) -> None:
        """The step's output has been applied: the step ends, and what finished in it is done.
        With speculative decoding, `accepted`: the drafts each of its requests accepted, of
        `drafts` each."""
        step = self.pending.pop(forward_iter, None)
        if step is None:
            self.unmatched_outputs += 1
            return
        step.end_ns = end_ns
        self.window.keep(step, self.records)
        if accepted is not None and not step.prefills and len(accepted) == len(step.reqs):
            batch = self._speculative_batch(step, accepted, drafts)
        elif step.decoded is not None and step.ids is not self.refs.ids:
            # A decode step launched before a send: its entries again, numbered for this export.
            batch = self.refs.decode_batch(step.decoded, ANY)
        else:
            batch = self.refs.current(step.batch, step.ids)  # numbered for the export it goes in
        step.batch = b""
        step.ids = []
        for r, tokens in step.prefills:
            r.chunks.append((step.start_ns, end_ns, tokens, step.iteration_id))
        self.iterations_out.append(
            wire.iteration(step.iteration_id, step.start_ns, end_ns, batch, step.running, step.waiting, step.kv_cache_usage)
        )
        # The requests that finished by now: picked in C (a finish reason is an object, so true;
        # a step's batch has hundreds of requests, and few finish in any one step).
        records = self.records
        for req in compress(step.reqs, map(_FINISHED, step.reqs)):
            r = records.get(req.rid)
            if r is not None:
                self._maybe_finish(r, end_ns)
        step.reqs = ()  # the window keeps ids, not SGLang's requests
        self.processed_steps += 1
        if self.processed_steps % SWEEP_EVERY == 0:
            self._sweep(step.iteration_id, end_ns)

    def take(self) -> tuple[list[bytes], list[bytes]]:
        out = (self.requests_out, self.iterations_out)
        self.requests_out, self.iterations_out = [], []
        return out

    # --- a step's batch -----------------------------------------------------------------------

    def _speculative_batch(self, step: Step, accepted, drafts: int) -> bytes:
        """A verify step's entries, once its output says what each request accepted: each
        request computed its drafts and the token before them, and made its accepted drafts and
        one token of the target model's. A request that made nothing in it (retracted or finished
        while it ran, under the overlap scheduler) made none."""
        rids = list(map(_RID, step.reqs))
        silent, records, entry = step.silent, self.records, self.refs.speculative_entry
        step.made = {rid: a + 1 for rid, a in zip(rids, accepted) if rid not in silent}
        self.window.speculative = True
        return b"".join([entry(rid, drafts + 1, drafts, min(a, drafts)) for rid, a in zip(rids, accepted) if rid in records])

    def _mixed_batch(self, reqs, prefix_lens, extend_lens, decoding_reqs, chunked_req, start_ns: int, it: int):
        """A prefill batch (SGLang's EXTEND), or one mixed with the running decodes (MIXED)."""
        records, refs = self.records, self.refs
        decoding = {id(q) for q in decoding_reqs or ()}
        prefix_lens, extend_lens = prefix_lens or (), extend_lens or ()
        entries, prefills, silent = [], [], set()
        decodes: list = []  # consecutive decoding requests, encoded in one call
        for i, req in enumerate(reqs):
            if id(req) in decoding or i >= len(extend_lens):
                decodes.append(req.rid)
                continue
            if decodes:
                entries.append(refs.decode_batch(decodes, records))
                decodes = []
            r = records.get(req.rid)
            if r is None:
                continue
            tokens, before = extend_lens[i], prefix_lens[i] if i < len(prefix_lens) else 0
            if not r.first_scheduled_ns:
                r.first_scheduled_ns = start_ns
                r.first_iteration = it
                r.cached_tokens = before  # the prefix cache's hit
            elif r.preempted_ns:
                # SGLang frees a retracted or preempted request's KV and prefills its prompt and
                # output again, but for what the prefix cache still holds (`before`).
                again = r.prompt_tokens + r.handoff + tokens_made(self.window.making(r), r.request_id) - before
                r.preemptions.append((r.preempted_ns, start_ns, True, r.preempted_for, max(again, 0)))
                r.preempted_ns, r.preempted_for = 0, ""
            entries.append(refs.entry(r.request_id, wire.PHASE_PREFILL, tokens, before))
            prefills.append((r, tokens))
            if req is chunked_req:
                silent.add(r.request_id)
        if decodes:
            entries.append(refs.decode_batch(decodes, records))
        return b"".join(entries), prefills, silent

    # --- finishing ----------------------------------------------------------------------------

    def _in_flight(self, rid: str) -> bool:
        """Whether a launched step whose output is not in yet runs the request."""
        return any(rid in s.ran for s in self.pending.values())

    def _maybe_finish(self, r: Record, at_ns: int) -> None:
        """`r`'s request has finished by now, as SGLang holds it; it is done here once the step
        that made its last token has ended. (This thread may run behind the scheduler: the
        request may have finished in a step whose output this thread has not yet seen, and is
        looked at again in each step it ran in until then: `StepWindow.making` is a few slices.)"""
        w = self.window
        making = first_tokens(w.making(r), r.request_id, len(_output(r.req)) - r.handoff, w.speculative)
        if making is not None:
            self._finish(r, making, at_ns)

    def _handed_off(self, reqs, at_ns: int) -> None:
        """PD decode: requests whose KV cache arrived from the prefill instance join the batch
        (SGLang's PREBUILT pass, which computes nothing), each with its first token, made there and
        appended by SGLang outside any step here: one (`decode.py` commits one output id per
        transfer; its output ids are not read here, where the engine has moved on since)."""
        for req in reqs:
            r = self.records.get(req.rid)
            if r is not None and not r.first_scheduled_ns:
                r.handoff, r.handoff_ns = 1, at_ns
                r.first_scheduled_ns, r.first_iteration = at_ns, self.next_iteration

    def _sweep(self, iteration_id: int, now_ns: int) -> None:
        """Finished requests no step finished: aborted while they waited, or whose tokens came
        more than one per step (speculative decoding), long after their last step."""
        for r in [r for r in self.records.values() if r.req.finished_reason is not None]:
            if not r.first_scheduled_ns:
                self._finish(r, [], now_ns)
                continue
            if self._in_flight(r.request_id):
                continue
            last = self.window.last(r)
            if last is None or iteration_id - last.iteration_id >= SWEEP_EVERY:
                self._finish(r, self.window.making(r), 0)

    def _finish(self, r: Record, making: list, at_ns: int, reason_code: int = 0) -> None:
        """Encodes a finished request: its tokens as SGLang holds them, the steps that made them."""
        del self.records[r.request_id]
        req = r.req
        r.token_ids = list(_output(req))
        n = len(r.token_ids)
        reason = req.finished_reason
        r.finish_reason = reason_code or _FINISH.get(type(reason).__name__, wire.FINISH_STOP)
        self._logprobs(r, req, n)
        if n and type(reason).__name__ == "FINISH_MATCHED_TOKEN":
            r.special = stopped_by_last(n)  # stopped by EOS or a stop token: the last one
        r.prefix = self._prefix(r, req)
        if r.preempted_ns:  # preempted and never resumed
            r.preemptions.append((r.preempted_ns, 0, True, r.preempted_for, 0))
        r.kv_transfer = self._kv_transfer(req)
        r.close(making, at_ns, self.texts, self.window)
        self.requests_out.append(wire.request(r))

    def _kv_transfer(self, req):
        """PD decode: the KV cache's transfer from the prefill instance, as SGLang timed it (its
        `time_stats`, on `perf_counter`'s clock: moved onto the wall clock here)."""
        ts = getattr(req, "time_stats", None)
        start = getattr(ts, "decode_transfer_queue_entry_time", 0.0) or 0.0
        end = getattr(ts, "decode_prebuilt_finish_time", 0.0) or 0.0
        if not start or end < start:
            return None
        return (self.perf_to_wall_ns + int(start * 1e9), self.perf_to_wall_ns + int(end * 1e9))

    @staticmethod
    def _prefix(r: Record, req):
        """What the prefix cache served, per tier as SGLang counts it (device: the GPU's radix
        cache; host: HiCache's CPU tier; storage: its external tier). SGLang's radix tree keeps no
        per-request chain of block hashes, so no fingerprint is sent."""
        tiers = [getattr(req, f"cached_tokens_{t}", 0) or 0 for t in ("device", "host", "storage")]
        if not r.cached_tokens and not any(tiers):
            return None
        if sum(tiers) != r.cached_tokens:
            tiers = [r.cached_tokens, 0, 0]  # tiers not counted (or counted otherwise): all the GPU's
        return (*tiers, 0, [], 0)

    @staticmethod
    def _logprobs(r: Record, req, n: int) -> None:
        """SGLang keeps, when a request asked for them, each output token's logprob and its
        top-k (ids and logprobs, a list per token); the rank is left for tokenscope to derive
        from the top-k. The rows are packed as they are read, one pass over each kind: at a
        batch of 256 with top-5 this ran on every token, and each pass over a request's rows
        cost about as much as the rest of its encoding."""
        if not getattr(req, "return_logprob", False):
            return
        lp = getattr(req, "logprob", None)
        vals = getattr(lp, "output_token_logprobs_val", None)
        if not vals or len(vals) < n:
            return  # logprobs for some tokens only: a column must cover all or none
        # SGLang's own lists (the request is done, and it is encoded right away), but for the
        # rows of tokens a speculative step accepted past the stop.
        cut = len(vals) > n
        r.logprobs = vals[:n] if cut else vals
        r.ranks = wire.Packed(bytes(n), "B")  # 0 each: not known
        top_vals = getattr(lp, "output_top_logprobs_val", None) or []
        top_ids = getattr(lp, "output_top_logprobs_idx", None) or []
        if len(top_vals) != len(vals) or len(top_ids) != len(vals):
            return
        if cut:
            top_vals, top_ids = top_vals[:n], top_ids[:n]
        k = len(top_ids[0])
        ids, lps = wire.packed_rows(top_ids, k, "I"), wire.packed_rows(top_vals, k, "f")
        if k and ids is not None and lps is not None:  # every row k wide: packing checked it
            r.candidate_counts = wire.Packed(bytes((k,)) * n, "B") if k < 128 else [k] * n
            r.candidate_ids, r.candidate_logprobs = ids, lps
            return
        # Rows of different widths (or a value struct will not pack): row by row.
        counts = list(map(len, top_ids))
        if counts == list(map(len, top_vals)):
            r.candidate_counts = counts
            r.candidate_ids = list(chain.from_iterable(top_ids))
            r.candidate_logprobs = list(chain.from_iterable(top_vals))
