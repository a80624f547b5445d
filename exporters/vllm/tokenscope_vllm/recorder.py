"""Turns what the scheduler did, step by step, into tokenscope's model: one `Iteration` per engine
step (its batch), one `Request` per finished request (stages, tokens, logprobs).

Runs on the exporter's thread, never on the scheduler's: the scheduler only hands over references
to objects it made anyway (`SchedulerOutput`, the `EngineCoreOutputs` of a step, the `Request` it
was given). Everything here reads them after the fact.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import wire

# vLLM's FinishReason (vllm/v1/engine/__init__.py): STOP, LENGTH, ABORT, ERROR, REPETITION.
_FINISH = {0: wire.FINISH_STOP, 1: wire.FINISH_LENGTH, 2: wire.FINISH_ABORT, 3: wire.FINISH_ERROR, 4: wire.FINISH_STOP}


def _stop_tokens(sp) -> frozenset:
    if sp is None:
        return frozenset()
    stop = set(getattr(sp, "all_stop_token_ids", ()) or ())
    if getattr(sp, "eos_token_id", None) is not None:
        stop.add(sp.eos_token_id)
    return frozenset(stop)


@dataclass
class Record:
    """A request while it runs, as tokenscope will store it."""

    request_id: str
    # vLLM's own request: its output token ids and finish status are read when it is done.
    request: object
    arrival_ns: int
    queued_ns: int
    prompt_tokens: int
    sampling: object
    # The model's EOS and the request's other stop tokens.
    stop_token_ids: frozenset
    # Its `BatchEntry` for a decode step, encoded once: most steps are decode steps.
    decode_entry: bytes = b""
    first_scheduled_ns: int = 0
    first_iteration: int = 0
    first_token_ns: int = 0
    finished_ns: int = 0
    finish_reason: int = 0
    cached_tokens: int = 0
    # (start, end, tokens, iteration id) of each prefill chunk; the end is filled in later.
    chunks: list = field(default_factory=list)
    # (preempted at, resumed at, recompute) of each preemption.
    preemptions: list = field(default_factory=list)
    token_ids: list = field(default_factory=list)
    # The step that produced each token (one per step that completed everything scheduled so
    # far); their times come from the step table when the request is done.
    token_iterations: list = field(default_factory=list)
    emitted_ns: list = field(default_factory=list)
    scheduled_ns: list = field(default_factory=list)
    logprobs: list = field(default_factory=list)
    ranks: list = field(default_factory=list)
    special: list = field(default_factory=list)
    candidate_counts: list = field(default_factory=list)
    candidate_ids: list = field(default_factory=list)
    candidate_logprobs: list = field(default_factory=list)
    # `num_computed_tokens` before a decode step: prompt + tokens made − 1.
    decode_at: int = -1
    # The last step that ran it other than a decode step (see `last_step`): where a preemption
    # found it, unless vLLM said when.
    last_iteration: int = 0
    preempted_ns: int = 0


@dataclass
class Step:
    """A scheduled step waiting for its model output."""

    iteration_id: int
    start_ns: int
    # Encoded `BatchEntry`s.
    entries: list
    # Records that ran a prefill chunk in it: (record, tokens, offset).
    prefills: list
    running: int
    waiting: int
    kv_cache_usage: float


def _last_step(r: Record) -> int:
    return max(r.last_iteration, r.token_iterations[-1] if r.token_iterations else 0)


class Recorder:
    """Consumes the scheduler's events in order; finished requests and steps come out encoded."""

    def __init__(self) -> None:
        self.records: dict[str, Record] = {}
        self.steps: dict[int, Step] = {}
        # (start, end) of recent steps by id: tokens and preemptions take their times from it.
        self.step_times: dict[int, tuple[int, int]] = {}
        # Step ids increase across restarts of the engine: tokenscope keys steps by instance and id.
        self.next_iteration = time.time_ns() // 1000
        self.requests_out: list[bytes] = []
        self.iterations_out: list[bytes] = []
        # Model outputs of steps whose schedule was dropped (buffer full).
        self.unmatched_outputs = 0
        self._prune_at = 4096
        # Live requests that asked for logprobs: only then are a step's outputs read one by one.
        self.logprob_requests = 0

    # --- events -------------------------------------------------------------------------------

    def add(self, request, at_ns: int) -> None:
        sp = request.sampling_params
        rid = request.request_id
        if sp is not None and sp.logprobs is not None:
            self.logprob_requests += 1
        self.records[rid] = Record(
            request_id=rid,
            request=request,
            arrival_ns=int(request.arrival_time * 1e9),
            queued_ns=at_ns,
            prompt_tokens=request.num_prompt_tokens,
            sampling=sp,
            stop_token_ids=_stop_tokens(sp),
            decode_entry=wire.batch_entry(rid, wire.PHASE_DECODE, 1, 0),
            decode_at=request.num_prompt_tokens - 1,
        )

    def scheduled(self, so, start_ns: int, running: int, waiting: int, kv_usage: float) -> None:
        """A `SchedulerOutput`: which requests run in the step and what each computes."""
        iteration_id = self.next_iteration
        self.next_iteration += 1
        counts = so.num_scheduled_tokens
        records = self.records
        entries: list[bytes] = []
        prefills: list = []
        # Requests that finished since the previous step and were not seen finishing (aborted
        # while waiting): done, at the end of the last step that ran them.
        for req_id in so.finished_req_ids:
            r = records.get(req_id)
            if r is not None:
                self._finish(r)
        # Said by vLLM's v2 model runner; otherwise a resume tells, later.
        for req_id in getattr(so, "preempted_req_ids", None) or ():
            r = records.get(req_id)
            if r is not None:
                r.preempted_ns = start_ns
        for nr in so.scheduled_new_reqs:
            r = records.get(nr.req_id)
            if r is None:
                continue
            if r.first_scheduled_ns:
                # The v2 model runner sends a resumed request as new.
                self._resumed(r, start_ns)
            else:
                r.first_scheduled_ns = start_ns
                r.first_iteration = iteration_id
                r.cached_tokens = nr.num_computed_tokens
            self._entry(r, counts.get(nr.req_id, 0), nr.num_computed_tokens, iteration_id, entries, prefills)
        cached = so.scheduled_cached_reqs
        resumed = cached.resumed_req_ids
        get, append = records.get, entries.append
        for req_id, before in zip(cached.req_ids, cached.num_computed_tokens):
            r = get(req_id)
            if r is None:
                continue
            if resumed and req_id in resumed:
                self._resumed(r, start_ns)
            # The common case first, kept lean (it runs for every request in every step): one
            # token past everything computed is a decode step, and makes the next token.
            if before == r.decode_at and counts[req_id] == 1:
                append(r.decode_entry)
                r.token_iterations.append(iteration_id)
                r.decode_at += 1
            else:
                self._entry(r, counts.get(req_id, 0), before, iteration_id, entries, prefills)
        self.steps[id(so)] = Step(iteration_id, start_ns, entries, prefills, running, waiting, kv_usage)

    def updated(self, so, outputs, done, end_ns: int) -> None:
        """A step's model output has been applied: the step ends, its tokens are out."""
        step = self.steps.pop(id(so), None)
        if step is None:
            self.unmatched_outputs += 1
            return
        it = step.iteration_id
        self.step_times[it] = (step.start_ns, end_ns)
        for r, tokens, offset in step.prefills:
            r.chunks.append((step.start_ns, end_ns, tokens, it))
        self.iterations_out.append(
            wire.iteration(
                it, step.start_ns, end_ns, b"".join(step.entries), step.running, step.waiting, step.kv_cache_usage
            )
        )
        if self.logprob_requests:
            records = self.records
            for eco in outputs.values():
                for o in eco.outputs:
                    if o.new_logprobs is not None:
                        r = records.get(o.request_id)
                        if r is not None:
                            self._logprobs(r, o.new_logprobs)
        for req_id in done:
            r = self.records.get(req_id)
            if r is not None:
                self._finish(r)
        if len(self.step_times) > self._prune_at:
            self._forget_old_steps()

    def finished(self, request_ids, at_ns: int) -> None:
        """Requests finished from outside the scheduler (a client went away, a stop string)."""
        for req_id in request_ids:
            r = self.records.get(req_id)
            if r is not None:
                self._finish(r, at_ns)

    # --- helpers ------------------------------------------------------------------------------

    def _entry(self, r: Record, tokens: int, before: int, it: int, entries: list, prefills: list) -> None:
        r.last_iteration = it
        produced = len(r.token_iterations)
        # Everything before the last sampled token is prompt (or, after a preemption, recomputed
        # prompt and output); computing past it is decoding. A step that reaches the end of what
        # there is to compute samples the next token.
        if before < r.prompt_tokens + max(0, produced - 1):
            entries.append(wire.batch_entry(r.request_id, wire.PHASE_PREFILL, tokens, before))
            prefills.append((r, tokens, before))
        elif tokens == 1:
            entries.append(r.decode_entry)
        else:  # speculative decoding: the drafts are verified in the same step
            entries.append(wire.batch_entry(r.request_id, wire.PHASE_DECODE, tokens, 0))
        if before + tokens >= r.prompt_tokens + produced:
            r.token_iterations.append(it)
            r.decode_at = r.prompt_tokens + produced

    def _resumed(self, r: Record, at_ns: int) -> None:
        # vLLM V1 frees a preempted request's blocks and recomputes them when it resumes.
        last = self.step_times.get(_last_step(r))
        at = r.preempted_ns or (last[1] if last else at_ns)
        r.preemptions.append((at, at_ns, True))
        r.preempted_ns = 0

    def _logprobs(self, r: Record, lp) -> None:
        # Row j: the sampled token's logprob first, then the top-k in rank order.
        r.ranks += lp.sampled_token_ranks.tolist()
        for row_ids, row_lps in zip(lp.logprob_token_ids.tolist(), lp.logprobs.tolist()):
            r.logprobs.append(row_lps[0])
            r.candidate_counts.append(len(row_ids) - 1)
            r.candidate_ids += row_ids[1:]
            r.candidate_logprobs += row_lps[1:]

    def _forget_old_steps(self) -> None:
        """Keeps the times of the steps that live requests may still need."""
        oldest = min((r.first_iteration or self.next_iteration for r in self.records.values()), default=self.next_iteration)
        self.step_times = {k: v for k, v in self.step_times.items() if k >= oldest}
        # A long request holds its steps: prune again only when the table has doubled.
        self._prune_at = max(4096, 2 * len(self.step_times))

    def _finish(self, r: Record, at_ns: int = 0) -> None:
        """Encodes a finished request: its tokens as vLLM holds them, their steps' times."""
        del self.records[r.request_id]
        req = r.request
        sp = r.sampling
        if sp is not None and sp.logprobs is not None:
            self.logprob_requests -= 1
        last = self.step_times.get(_last_step(r))
        r.finished_ns = max(at_ns or (last[1] if last else time.time_ns()), r.arrival_ns)
        reason = req.get_finished_reason()
        r.finish_reason = _FINISH.get(int(reason), wire.FINISH_STOP) if reason is not None else wire.FINISH_ABORT
        r.token_ids = list(req.output_token_ids)
        n = len(r.token_ids)
        # A step per token, unless speculative decoding made several in one step: then the
        # tokens go without times rather than with wrong ones.
        its = r.token_iterations[:n]
        times = [self.step_times.get(it) for it in its]
        if len(its) == n and all(times):
            r.token_iterations = its
            r.scheduled_ns = [t[0] for t in times]
            r.emitted_ns = [t[1] for t in times]
            if times:
                r.first_token_ns = times[0][1]
        else:
            r.token_iterations = []
        if r.logprobs and len(r.logprobs) != n:
            # Logprobs for some tokens only: a column must cover all or none.
            r.logprobs = r.ranks = r.candidate_counts = r.candidate_ids = r.candidate_logprobs = []
        if r.token_ids and r.token_ids[-1] in r.stop_token_ids:
            r.special = [0] * (n - 1) + [1]
        self.requests_out.append(wire.request(r))

    def take(self) -> tuple[list[bytes], list[bytes]]:
        """The encoded requests and iterations finished since the last call."""
        out = (self.requests_out, self.iterations_out)
        self.requests_out, self.iterations_out = [], []
        return out
