"""Turns what the scheduler did, step by step, into tokenscope's model: one `Iteration` per engine
step (its batch), one `Request` per finished request (stages, tokens, logprobs).

Runs on the exporter's thread, never on the scheduler's: the scheduler only hands over references
to objects it made anyway (`SchedulerOutput`, the `EngineCoreOutputs` of a step, the `Request` it
was given). Everything here reads them after the fact.

Cost is what shapes this module: it shares the GIL with the engine loop, and a step of a busy
engine holds hundreds of requests. So nothing here loops over a step's requests in Python in the
common case. A step in which every request computes one token (a decode step) is encoded by
joining each request's `BatchEntry`, encoded once per export (`RequestRefs`), in one call; only a
step's prefill chunks and new requests are looked at one by one. Tokens are not followed step by
step either: when a request is done, its token ids are read from vLLM's `Request`, and the steps
that made them are the steps that ran it (each step's `num_scheduled_tokens` is kept, by
reference, for as long as a live request may need it), minus the prefill chunks that did not
finish its prompt.
"""

from __future__ import annotations

import time
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter

import numpy as np

from tokenscope_exporter import Texts, wire
from tokenscope_exporter.refs import RequestRefs
from tokenscope_exporter.record import RequestRecord, StepWindow, fold_hashes, stopped_by_last, tenant_of

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
class Record(RequestRecord):
    """A request while it runs, as tokenscope will store it."""

    # vLLM's own request: its output token ids and finish status are read when it is done.
    request: object = None
    # The model's EOS and the request's other stop tokens.
    stop_token_ids: frozenset = frozenset()
    # Once preempted (`Recorder.preempted`), until it resumes: the request it made room for,
    # and the tokens it will compute again.
    preempted_for: tuple = ("", 0)
    # Its logprob rows, in pieces (`StepLogprobs.rows`), and where in their numbering they
    # start.
    lp_chunks: list = field(default_factory=list)
    lp_since: int = 0


@dataclass
class Step:
    """A scheduled step: what ran in it, and (once its output is in) when it ended."""

    iteration_id: int
    start_ns: int
    # The step's `num_scheduled_tokens` (request id → tokens), vLLM's own dict: who ran in it.
    ran: dict
    batch: bytes
    # The export's request ids the batch is numbered against (`RequestRefs.ids`).
    ids: list
    # Prefill chunks: (record, tokens).
    prefills: list
    # Requests in the step that made no token (a prefill chunk short of the prompt's end).
    silent: frozenset
    running: int
    waiting: int
    kv_cache_usage: float
    end_ns: int = 0
    # Speculative decoding: the ids of the requests that verify drafts in the step (their tokens
    # in `ran`), encoded once the output says how many were accepted (not in `batch`).
    spec: list = field(default_factory=list)
    # Speculative decoding: the tokens the step made for each request that verified drafts
    # (accepted + 1); every other request in it made one.
    made: dict | None = None
    # Set when the step window keeps it (`record.StepWindow`): its id and times packed, the
    # request ids it made a token for, its place in the window's stream of main steps.
    times: bytes = b""
    made_by: object = None
    at: int = -1


def per_request_logprobs(lp) -> bool:
    """Whether a step's logprobs hold several rows to a request (`cu_num_generated_tokens`:
    speculation), read from vLLM's per-request slices in the step's outputs; otherwise the
    batch's arrays are read whole (`StepLogprobs`)."""
    return lp is not None and getattr(lp, "cu_num_generated_tokens", None) is not None


_ITERATION_ID = attrgetter("iteration_id")


class StepLogprobs:
    """Logprobs kept as vLLM's model runner made them: each step's arrays for its whole batch
    (`ModelRunnerOutput.logprobs`) appended to one table of rows per width, each row tagged with
    its request's code and its step's id; a finished request's rows are found with one
    comparison over the rows since it arrived. Reading them per request and step, as vLLM's own
    outputs slice them, cost about 3 µs per request (0.8 ms a step at a batch of 256); splitting
    every export's steps by request cost 1.3 ms an export, and a request that finished each
    step, its hundreds of pieces, 5 ms a step (docs/BENCHMARKS.md)."""

    def __init__(self) -> None:
        # Request id -> its code, for the live requests that asked for logprobs.
        self.codes: dict[str, int] = {}
        self.by_code: dict[int, Record] = {}
        self._next = 0
        # The rows, by width (vLLM's arrays are as wide as the batch's largest top-k, which
        # changes as requests come and go); rows are numbered across widths as they come.
        self.tables: dict[int, _Rows] = {}
        self.clock = 0
        self._adds = 0
        # The last batch's request ids and their codes: a decode batch repeats step after step.
        self._last_ids: list | None = None
        self._last_codes = None

    def want(self, r: Record) -> None:
        self.codes[r.request_id] = self._next
        self.by_code[self._next] = r
        r.lp_since = self.clock  # its rows come after
        self._next += 1
        self._last_ids = None  # a batch with it has other codes

    def done(self, r: Record) -> None:
        code = self.codes.pop(r.request_id, None)
        if code is not None:
            del self.by_code[code]

    def add(self, iteration_id: int, req_ids: list, lp) -> None:
        if req_ids != self._last_ids:  # a C-level comparison of the same str objects
            self._last_codes = np.array(list(map(self.codes.get, req_ids, repeat(-1, len(req_ids)))), np.int64)
            self._last_ids = req_ids
        ids = lp.logprob_token_ids
        table = self.tables.get(ids.shape[1])
        if table is None:
            table = self.tables[ids.shape[1]] = _Rows(ids.shape[1])
        table.append(self.clock, iteration_id, self._last_codes, ids, lp.logprobs, lp.sampled_token_ranks)
        self.clock += len(self._last_codes)
        self._adds += 1
        if self._adds % 256 == 0:
            # Only live requests' rows are kept: a long request would otherwise keep every row
            # of the thousands that came and went beside it.
            live = np.fromiter(self.by_code, np.int64, len(self.by_code))
            for table in self.tables.values():
                table.keep_only(live)

    def rows(self, r: Record) -> None:
        """Hands the request its rows (one piece per width it has rows in), before it is done."""
        code = self.codes.get(r.request_id)
        if code is not None:
            for table in self.tables.values():
                piece = table.rows_of(code, r.lp_since)
                if piece is not None:
                    r.lp_chunks.append(piece)

    @staticmethod
    def columns(r: Record, making: list, n: int) -> None:
        """The request's logprob columns for its `n` tokens, in step order: its rows of the steps
        that made them (rows of other widths in chunks of their own; a speculative step's
        several rows in their order)."""
        chunks, r.lp_chunks = r.lp_chunks, []
        made = np.fromiter(map(_ITERATION_ID, making), np.int64, len(making))
        if len(chunks) == 1 and len(chunks[0][0]) == n == len(made) and np.array_equal(chunks[0][0], made):
            # One row for each step that made a token, in order (most requests): vLLM's arrays
            # are the columns, the sampled token's logprob first in each row.
            _, ids, lps, ranks = chunks[0]
            k = ids.shape[1] - 1
            r.ranks, r.logprobs = ranks, lps[:, 0]
            r.candidate_counts = wire.Packed(bytes((k,)) * n, "B") if k < 128 else [k] * n
            r.candidate_ids, r.candidate_logprobs = ids[:, 1:].ravel(), lps[:, 1:].ravel()
            return
        masks = [np.isin(c[0], made) for c in chunks]
        its = np.concatenate([c[0][m] for c, m in zip(chunks, masks)])
        if len(its) != n or len(np.unique(its)) != len(making):
            return  # not one row per token, or a step without its rows: no logprobs rather than wrong ones
        order = np.argsort(its, kind="stable")  # chunks of different widths interleave in time
        r.ranks = np.concatenate([c[3][m] for c, m in zip(chunks, masks)])[order].tolist()
        if len({c[1].shape[1] for c in chunks}) == 1:
            ids = np.concatenate([c[1][m] for c, m in zip(chunks, masks)])[order]
            lps = np.concatenate([c[2][m] for c, m in zip(chunks, masks)])[order]
            r.logprobs = lps[:, 0].tolist()
            r.candidate_counts = [ids.shape[1] - 1] * n
            r.candidate_ids = ids[:, 1:].ravel().tolist()
            r.candidate_logprobs = lps[:, 1:].ravel().tolist()
            return
        # Rows of several widths (requests asking for different top-k came and went): row by row.
        ids = [row for c, m in zip(chunks, masks) for row in c[1][m].tolist()]
        lps = [row for c, m in zip(chunks, masks) for row in c[2][m].tolist()]
        ids, lps = [ids[i] for i in order], [lps[i] for i in order]
        r.logprobs = [row[0] for row in lps]
        r.candidate_counts = [len(row) - 1 for row in ids]
        r.candidate_ids = [t for row in ids for t in row[1:]]
        r.candidate_logprobs = [x for row in lps for x in row[1:]]


class _Rows:
    """One width's logprob rows in the order they came (`StepLogprobs`): each row's request code
    and step id, and vLLM's row (the sampled token's id and logprob first, then the top-k's; the
    rank). Rows are numbered across widths: `since` arguments are such numbers."""

    def __init__(self, width: int, capacity: int = 4096) -> None:
        self.n = 0
        self.codes = np.empty(capacity, np.int64)
        self.its = np.empty(capacity, np.int64)
        self.ids = np.empty((capacity, width), np.int64)
        self.lps = np.empty((capacity, width), np.float32)
        self.ranks = np.empty(capacity, np.int64)
        # Where each step's rows start: their number across widths, and here.
        self.starts: list[int] = []
        self.local: list[int] = []

    def append(self, number: int, iteration_id: int, codes, ids, lps, ranks) -> None:
        n, m = self.n, len(codes)
        if n + m > len(self.codes):
            self._resize(max(2 * len(self.codes), n + m))
        self.codes[n : n + m] = codes
        self.its[n : n + m] = iteration_id
        self.ids[n : n + m] = ids
        self.lps[n : n + m] = lps
        self.ranks[n : n + m] = ranks
        self.starts.append(number)
        self.local.append(n)
        self.n = n + m

    def rows_of(self, code: int, since: int):
        """The request's rows from row number `since` on: (step ids, token ids, logprobs, ranks)."""
        k = bisect_left(self.starts, since)
        if k == len(self.starts):
            return None
        lo = self.local[k]
        hit = np.flatnonzero(self.codes[lo : self.n] == code)
        if not len(hit):
            return None
        hit += lo
        return self.its[hit], self.ids[hit], self.lps[hit], self.ranks[hit]

    def keep_only(self, codes) -> None:
        """Forgets the rows of other requests than `codes`' (one pass over the rows, in C)."""
        n = self.n
        kept = np.isin(self.codes[:n], codes)
        m = int(np.count_nonzero(kept))
        if m < n:
            for column in (self.codes, self.its, self.ids, self.lps, self.ranks):
                column[:m] = column[:n][kept]
            # Each step's rows start where as many rows were kept before them.
            before = np.concatenate(([0], np.cumsum(kept)))
            local = before[self.local].tolist()
            k = bisect_right(local, 0) - 1  # the steps before the first kept row (the first starts at 0)
            self.starts, self.local, self.n = self.starts[k:], local[k:], m
        if len(self.codes) > 4096 and 4 * self.n < len(self.codes):
            self._resize(max(4096, 2 * self.n))

    def _resize(self, capacity: int) -> None:
        for name in ("codes", "its", "ids", "lps", "ranks"):
            old = getattr(self, name)
            new = np.empty((capacity, *old.shape[1:]), old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)


class Recorder:
    """Consumes the scheduler's events in order; finished requests and steps come out encoded."""

    def __init__(self, texts: Texts | None = None, block_size: int = 16) -> None:
        self.texts = texts or Texts()
        # Tokens per KV block (the prefix cache's block hashes cover this many each).
        self.block_size = block_size
        self.records: dict[str, Record] = {}
        # Batch entries name requests by reference into the export's ids; the exporter takes
        # them as it sends.
        self.refs = RequestRefs()
        # Scheduled steps waiting for their output, by `SchedulerOutput` identity.
        self.pending: dict[int, Step] = {}
        self.window = StepWindow()
        # Step ids increase across restarts of the engine: tokenscope keys steps by instance and id.
        self.next_iteration = time.time_ns() // 1000
        self.requests_out: list[bytes] = []
        self.iterations_out: list[bytes] = []
        # Model outputs of steps whose schedule was dropped (buffer full).
        self.unmatched_outputs = 0
        # Live requests that asked for logprobs: only then are a step's logprobs kept.
        self.logprob_requests = 0
        self.lp = StepLogprobs()

    # --- events -------------------------------------------------------------------------------

    def add(self, request, at_ns: int) -> None:
        sp = request.sampling_params
        rid = request.request_id
        if sp is not None and sp.logprobs is not None:
            self.logprob_requests += 1
        lora = request.lora_request
        self.records[rid] = Record(
            request_id=rid,
            request=request,
            arrival_ns=int(request.arrival_time * 1e9),
            queued_ns=at_ns,
            prompt_tokens=request.num_prompt_tokens,
            sampling=sp,
            stop_token_ids=_stop_tokens(sp),
            lora_adapter=lora.lora_name if lora is not None else "",
            priority=request.priority,
            # vLLM passes a request's `traceparent` and `tracestate` on (with --otlp-traces-endpoint).
            tenant=tenant_of(request.trace_headers),
        )
        if sp is not None and sp.logprobs is not None:
            self.lp.want(self.records[rid])

    def preempted(self, req_id: str, aggressor: str, recompute_tokens: int, at_ns: int) -> None:
        """vLLM evicted the request to make room for `aggressor` ("" when it was not making room
        for another: a cache reset, a request that preempted itself)."""
        r = self.records.get(req_id)
        if r is not None:
            r.preempted_for = (aggressor, recompute_tokens)

    def kv_loading(self, req_id: str, tokens: int, at_ns: int) -> None:
        """A KV connector started loading the request's KV cache (`tokens` of it; 0: not known):
        on a PD decode instance, its prompt's, from the prefill instance. Blocks are what vLLM
        allocated for them; bytes are left unknown: how they split across the workers (and,
        with MLA, whether each worker receives all of them) is the connector's, not the
        scheduler's."""
        r = self.records.get(req_id)
        if r is not None:
            blocks = -(-tokens // self.block_size) if tokens > 0 else 0
            r.kv_transfer = (at_ns, 0, 0, blocks)

    def kv_loaded(self, req_id: str, at_ns: int) -> None:
        """The workers reported the request's KV cache received."""
        r = self.records.get(req_id)
        if r is not None and r.kv_transfer is not None and not r.kv_transfer[1]:
            start, _, size, blocks = r.kv_transfer
            r.kv_transfer = (start, max(at_ns, start), size, blocks)

    def scheduled(self, so, start_ns: int, running: int, waiting: int, kv_usage: float) -> None:
        """A `SchedulerOutput`: which requests run in the step and what each computes."""
        records = self.records
        # Finished since the previous step without being seen finishing (aborted while waiting).
        for req_id in so.finished_req_ids:
            r = records.get(req_id)
            if r is not None:
                self._finish(r, 0)
        for req_id in getattr(so, "preempted_req_ids", None) or ():
            r = records.get(req_id)
            if r is not None:
                r.preempted_ns = start_ns
        counts = so.num_scheduled_tokens
        if not counts:
            return
        it = self.next_iteration
        self.next_iteration += 1
        cached = so.scheduled_cached_reqs
        # vLLM 0.33 lists requests resumed after a preemption here; 0.34 sends them as new ones
        # (`_mixed_batch` sees them there).
        for req_id in getattr(cached, "resumed_req_ids", None) or ():
            r = records.get(req_id)
            if r is not None:
                self._resumed(r, start_ns)
        new = so.scheduled_new_reqs
        if so.total_num_scheduled_tokens == len(counts) and not new:
            # A decode step: every request computes its next token.
            batch, prefills, silent, spec = self._decode_batch(cached.req_ids), [], frozenset(), []
        else:
            batch, prefills, silent, spec = self._mixed_batch(so, counts, start_ns, it)
        self.pending[id(so)] = Step(it, start_ns, counts, batch, self.refs.ids, prefills, silent, running, waiting, kv_usage, spec=spec)

    def updated(self, so, outputs, done, end_ns: int, logprobs=None, req_ids=None, made=None) -> None:
        """A step's model output has been applied: the step ends; `done` finished in it.
        `logprobs`, `req_ids`: the model runner's output for the whole batch, when logprobs
        were asked for; `made`: how many tokens it made per request, when the step verified drafts."""
        step = self.pending.pop(id(so), None)
        if step is None:
            self.unmatched_outputs += 1
            return
        step.end_ns = end_ns
        self.window.keep(step, self.records)
        # The window keeps the step, not its encoding; numbered for the export it goes in.
        batch, step.batch = self.refs.current(step.batch, step.ids), b""
        step.ids = []
        if step.spec:
            batch += self._drafts(step, req_ids, made)
        for r, tokens in step.prefills:
            r.chunks.append((step.start_ns, end_ns, tokens, step.iteration_id))
        self.iterations_out.append(
            wire.iteration(
                step.iteration_id,
                step.start_ns,
                end_ns,
                batch,
                step.running,
                step.waiting,
                step.kv_cache_usage,
            )
        )
        if self.logprob_requests:
            self._keep_logprobs(step, outputs, logprobs, req_ids)
        for req_id in done:
            r = self.records.get(req_id)
            if r is not None:
                self._finish(r, end_ns)

    def _drafts(self, step: Step, req_ids, made) -> bytes:
        """The entries of the step's speculative requests, with each one's drafts and how many it
        accepted: as vLLM counts them, every token the model runner kept but its own last one.
        The step keeps how many tokens it made for each (`Step.made`), to time them. Comprehensions
        over the batch: one Python loop's overhead per request was most of a speculative step's cost."""
        made_by = dict(zip(req_ids, made)) if made is not None and req_ids is not None else {}
        ids, step.spec = step.spec, []
        # Each verified 1 + its drafts (`_mixed_batch` checked), and made 1 + those it accepted.
        step.made = dict(zip(ids, map(made_by.get, ids)))
        self.window.speculative = True  # its requests' steps are looked through for `made` from now
        if None in step.made.values() or 0 in step.made.values():
            step.made = {rid: n for rid, n in step.made.items() if n}
        # The entries as `RequestRefs.speculative_entry` encodes them, looked up in its cache
        # without a call per request when they are there (most requests, most steps).
        entry, cache, ran, made = self.refs.speculative_entry, self.refs.speculative, step.ran, step.made.get
        keys = [
            (rid, t, t - 1, (m if m < t else t) - 1) if (m := made(rid)) else (rid, t, 0, 0)
            for rid, t in zip(ids, map(ran.__getitem__, ids))
        ]
        return b"".join([cache.get(k) or entry(*k) for k in keys])

    def _keep_logprobs(self, step: Step, outputs, logprobs, req_ids) -> None:
        """A step's logprobs: the batch's arrays whole when each row is one token; otherwise
        (speculation: several tokens to a request, or no batch arrays) vLLM's per-request slices."""
        if logprobs is not None and req_ids is not None and not per_request_logprobs(logprobs):
            self.lp.add(step.iteration_id, req_ids, logprobs)
            return
        # Rows of the same kind as the batch path's, kept with the request: the step's id for
        # each token it made, so that `StepLogprobs.columns` orders them with the others (the
        # prefill's first token comes by the batch arrays: no drafts in that step).
        records = self.records
        for eco in (outputs or {}).values():
            for o in eco.outputs:
                lp = o.new_logprobs
                r = records.get(o.request_id) if lp is not None else None
                if r is not None:
                    its = np.full(len(lp.sampled_token_ranks), step.iteration_id, dtype=np.int64)
                    r.lp_chunks.append((its, np.asarray(lp.logprob_token_ids), np.asarray(lp.logprobs), np.asarray(lp.sampled_token_ranks)))

    def finished(self, request_ids, at_ns: int) -> None:
        """Requests finished from outside the scheduler (a client went away, a stop string)."""
        for req_id in request_ids:
            r = self.records.get(req_id)
            if r is not None:
                self._finish(r, at_ns)

    def take(self) -> tuple[list[bytes], list[bytes]]:
        """The encoded requests and iterations finished since the last call."""
        out = (self.requests_out, self.iterations_out)
        self.requests_out, self.iterations_out = [], []
        return out

    # --- a step's batch -----------------------------------------------------------------------

    def _decode_batch(self, req_ids) -> bytes:
        # Requests whose arrival was dropped with a full buffer are left out.
        return self.refs.decode_batch(req_ids, self.records)

    def _mixed_batch(self, so, counts, start_ns: int, it: int):
        """A step with prefill chunks, new requests or drafts to verify: those one by one, the
        rest joined."""
        records, new, cached = self.records, so.scheduled_new_reqs, so.scheduled_cached_reqs
        entries, prefills, silent, spec = [], [], set(), []
        for nr in new:
            r = records.get(nr.req_id)
            if r is None:
                continue
            made = 0
            if r.first_scheduled_ns:
                # The v2 model runner sends a resumed request as new: it recomputes the tokens it
                # had made (counted from the steps that made them: vLLM's own lists are live).
                self._resumed(r, start_ns)
                made = len(self.window.making(r))
            else:
                r.first_scheduled_ns = start_ns
                r.first_iteration = it
                r.cached_tokens = nr.num_computed_tokens
            self._entry(r, counts.get(nr.req_id, 0), nr.num_computed_tokens, made, entries, prefills, silent, spec)
        new_ids = {nr.req_id for nr in new}
        odd = [rid for rid, n in counts.items() if n != 1 and rid not in new_ids]
        req_ids = cached.req_ids
        # Its last token and the drafts after it: vLLM drafts only for decoding requests.
        drafts = getattr(so, "scheduled_spec_decode_tokens", None) or {}
        spec = [rid for rid in odd if rid in drafts and counts[rid] == 1 + len(drafts[rid]) and rid in records]
        if spec:
            verifying = set(spec)
            odd_rest = [rid for rid in odd if rid not in verifying]
        else:
            odd_rest = odd
        at = {rid: i for i, rid in enumerate(req_ids)} if len(odd_rest) > 8 else None
        for rid in odd_rest:
            r = records.get(rid)
            if r is not None:
                i = at[rid] if at is not None else req_ids.index(rid)
                self._entry(r, counts[rid], cached.num_computed_tokens[i], cached.num_output_tokens[i], entries, prefills, silent, spec)
        if not odd_rest and len(spec) == len(req_ids):
            # Every request verifies drafts (speculative decoding's steady state): no plain
            # decode entry to join.
            return b"".join(entries), prefills, frozenset(silent), spec
        # The decoding rest in one join: the odd ones' decode entries blanked meanwhile.
        decode = self.refs.decode_entries
        saved = {rid: decode[rid] for rid in odd if rid in decode}
        decode.update(dict.fromkeys(odd, b""))
        batch = b"".join(entries) + self._decode_batch(req_ids)
        for rid in odd:
            del decode[rid]
        decode.update(saved)
        return batch, prefills, frozenset(silent), spec

    def _entry(self, r: Record, tokens: int, before: int, made: int, entries: list, prefills: list, silent: set, spec: list) -> None:
        """A request that computes more than one token, or is new to the batch; `made` is how
        many tokens it had made when the step was scheduled. A decode of several tokens verifies
        drafts: it goes to `spec`, encoded when the step's output is in."""
        # Everything before the last sampled token is prompt (or, after a preemption, recomputed
        # prompt and output); computing past it is decoding (several tokens: speculative).
        if before < r.prompt_tokens + max(0, made - 1):
            entries.append(self.refs.entry(r.request_id, wire.PHASE_PREFILL, tokens, before))
            prefills.append((r, tokens))
            if before + tokens < r.prompt_tokens + made:  # short of the prompt's end: no token
                silent.add(r.request_id)
        elif tokens > 1:
            spec.append(r.request_id)
        else:
            entries.append(self.refs.entry(r.request_id, wire.PHASE_DECODE, tokens, 0))

    # --- request events -----------------------------------------------------------------------

    def _resumed(self, r: Record, at_ns: int) -> None:
        # vLLM V1 frees a preempted request's blocks and recomputes them when it resumes.
        last = self.window.last(r)
        at = r.preempted_ns or (last.end_ns if last else at_ns)
        r.preemptions.append((at, at_ns, True, *r.preempted_for))
        r.preempted_ns, r.preempted_for = 0, ("", 0)

    def _prefix(self, r: Record, req):
        """What the prefix cache served (vLLM's `prefill_stats` split it into its own cache and a
        KV connector's, when stats are on), and the prompt's block-hash chain."""
        stats = getattr(req, "prefill_stats", None)
        if stats is not None and stats.num_local_cached_tokens + stats.num_external_cached_tokens == r.cached_tokens:
            gpu, external = stats.num_local_cached_tokens, stats.num_external_cached_tokens
        else:
            gpu, external = r.cached_tokens, 0
        # The chain covers the prompt's full blocks, and the output's as it grows.
        chain = req.block_hashes
        blocks = min(len(chain), r.prompt_tokens // self.block_size)
        if not blocks and not r.cached_tokens:
            return None
        return (gpu, 0, external, self.block_size, fold_hashes(chain[:blocks]), blocks)

    def _finish(self, r: Record, at_ns: int) -> None:
        """Encodes a finished request: its tokens as vLLM holds them, their steps' times."""
        del self.records[r.request_id]
        req = r.request
        sp = r.sampling
        r.token_ids = list(req.output_token_ids)
        n = len(r.token_ids)
        making = self.window.making(r)
        if sp is not None and sp.logprobs is not None:
            self.logprob_requests -= 1
            self.lp.rows(r)
            if r.lp_chunks:
                StepLogprobs.columns(r, making, n)
            self.lp.done(r)
        reason = req.get_finished_reason()
        r.finish_reason = _FINISH.get(int(reason), wire.FINISH_STOP) if reason is not None else wire.FINISH_ABORT
        if len(r.logprobs) and len(r.logprobs) != n:
            # Logprobs for some tokens only: a column must cover all or none.
            r.logprobs = r.ranks = r.candidate_counts = r.candidate_ids = r.candidate_logprobs = []
        if r.token_ids and r.token_ids[-1] in r.stop_token_ids:
            r.special = stopped_by_last(n)
        r.prefix = self._prefix(r, req)
        if r.preempted_ns:  # preempted and never resumed
            r.preemptions.append((r.preempted_ns, 0, True, *r.preempted_for))
        r.close(making, at_ns, self.texts, self.window)
        if r.kv_transfer is not None and not r.kv_transfer[1]:
            # Finished (aborted) while its KV cache was still on the way: it waited until then.
            start, _, size, blocks = r.kv_transfer
            r.kv_transfer = (start, max(r.finished_ns, start), size, blocks)
        self.requests_out.append(wire.request(r))
