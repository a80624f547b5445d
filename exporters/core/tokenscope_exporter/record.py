"""What every engine's recorder keeps the same way: a request while it runs, as `wire.request`
will encode it once it is done, and the window of ended steps that times its tokens.

Tokens are not followed step by step: when a request is done, its token ids are read from the
engine's own request, and the steps that made them are the steps that ran it (kept here for as
long as a live request may need them), minus those that made no token for it (a prefill chunk
short of the prompt's end, a step whose output was dropped).
"""

from __future__ import annotations

import os
import struct
import time
from bisect import bisect_left
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter
from urllib.parse import unquote

from tokenscope_exporter import wire

np = wire.np  # numpy when the engine brings it (it does), as the wire has it; else lists

# Steps kept for the token times of live requests: beyond it, a very long request's earliest
# tokens go without times (a step holds its batch's request ids: about 10 KB at a batch of 256).
STEP_WINDOW = int(os.environ.get("TOKENSCOPE_STEP_WINDOW", "8192"))


# The key of the tenant's entry in a request's W3C `baggage` or `tracestate` (`tenant=acme`).
TENANT_KEY = os.environ.get("TOKENSCOPE_TENANT_KEY", "tenant")
# Block hashes sent per request: the start of the prompt's chain (`wire.prefix_cache`).
BLOCK_HASHES = 64


def tenant_of(headers, key: str = TENANT_KEY) -> str:
    """The tenant named in a request's trace headers: W3C `baggage` (`tenant=acme;prop,…`, values
    percent-encoded) or `tracestate` (`tenant=acme,…`), whichever the engine passed on."""
    if not headers:
        return ""
    for name in ("baggage", "tracestate"):
        for member in (headers.get(name) or "").split(","):
            k, _, v = member.split(";", 1)[0].partition("=")
            if k.strip() == key and v.strip():
                return unquote(v.strip())[:256]
    return ""


def fold_hashes(chain) -> list:
    """The first block hashes of a chain as 64-bit values: an engine's hashes are bytes (vLLM's
    sha256) or ints (SGLang's); the first 8 bytes, little-endian, of the former."""
    return [h & 0xFFFFFFFFFFFFFFFF if isinstance(h, int) else int.from_bytes(bytes(h)[:8], "little") for h in chain[:BLOCK_HASHES]]


@dataclass
class RequestRecord:
    """A request while it runs; the fields `wire.request` encodes. Engines add their own."""

    request_id: str
    arrival_ns: int
    queued_ns: int
    prompt_tokens: int
    # The sampling parameters under the names `wire` reads (temperature, top_p, top_k,
    # max_tokens, seed), or None.
    sampling: object
    first_scheduled_ns: int = 0
    first_iteration: int = 0
    first_token_ns: int = 0
    finished_ns: int = 0
    finish_reason: int = 0
    cached_tokens: int = 0
    # (start, end, tokens, iteration id) of each prefill chunk.
    chunks: list = field(default_factory=list)
    # (preempted at, resumed at, recompute, the request it made room for or "", the tokens it
    # will compute again or 0) of each preemption.
    preemptions: list = field(default_factory=list)
    # The LoRA adapter's name, the priority asked for, the tenant ("" / None: not known).
    lora_adapter: str = ""
    priority: int | None = None
    tenant: str = ""
    # What the prefix cache served: `wire.prefix_cache`'s arguments (gpu, cpu, external tokens,
    # block size, the first block hashes as 64-bit values, the chain's length), or None.
    prefix: tuple | None = None
    # PD decode side: the tokens that came with the KV cache from the prefill instance (its first
    # token, made there), and when they arrived here; the KV transfer's (start, end) in ns, or
    # (start, end, bytes, blocks) (0: not known).
    handoff: int = 0
    handoff_ns: int = 0
    kv_transfer: tuple | None = None
    # When it was preempted, until it resumes.
    preempted_ns: int = 0
    # Filled when it is done.
    token_ids: list = field(default_factory=list)
    token_iterations: list = field(default_factory=list)
    emitted_ns: list = field(default_factory=list)
    scheduled_ns: list = field(default_factory=list)
    # Texts with each token and candidate: empty, as texts go by id (`Texts`), for a sender
    # whose texts are not its tokenizer's text per id.
    texts: list = field(default_factory=list)
    candidate_texts: list = field(default_factory=list)
    logprobs: list = field(default_factory=list)
    ranks: list = field(default_factory=list)
    special: list = field(default_factory=list)
    candidate_counts: list = field(default_factory=list)
    candidate_ids: list = field(default_factory=list)
    candidate_logprobs: list = field(default_factory=list)

    def close(self, making: list, at_ns: int, texts, window: StepWindow | None = None) -> None:
        """Once its token ids are in: when it finished (`at_ns`, else when the last step that made a
        token ended), and each token's step and times (`making`, from `window` when given). Its
        tokens' and candidates' texts go by id when the exporter has a tokenizer (`texts`), so
        their ids are noted there."""
        if not at_ns:
            at_ns = making[-1].end_ns if making else time.time_ns()
        self.finished_ns = max(at_ns, self.arrival_ns)
        self.time_tokens(making, window)
        if texts.available():
            texts.use(self.token_ids)
            texts.use(self.candidate_ids)

    def time_tokens(self, making: list, window: StepWindow | None = None) -> None:
        """Each token gets the step that made it, `making` being those steps in order (kept by
        `window`, when given): one step per token (after the handed-off ones, on a PD decode
        instance), or with speculative decoding as many as the step says it made (`made`; the
        last step's may have been cut by a stop or the length limit). When the steps do not add
        up (the window lost the earliest) the tokens go without times rather than with wrong
        ones."""
        h = self.handoff
        rid = self.request_id
        expanded = False  # a step in `making` once per token it made
        if (window is None or window.speculative) and _speculative(making):
            making = [s for s in making for _ in range((s.made or {}).get(rid, 1))]
            cut = len(making) + h - len(self.token_ids)
            if 0 < cut and making[-1 - cut] is making[-1]:
                del making[-cut:]
            expanded = True
        if len(making) + h != len(self.token_ids):
            return
        # Handed-off tokens were made on the prefill instance: no step here (iteration 0, not
        # known), there when the KV cache arrived.
        columns = window.columns(making, rid) if window is not None and not expanded else None
        if columns is not None:
            # Consecutive steps (most requests): each column is a slice of the window's.
            if h:
                head = (bytes(8 * h), _NS.pack(self.handoff_ns) * h, _NS.pack(self.handoff_ns) * h)
                columns = [a + b for a, b in zip(head, columns)]
            ids, starts, ends = columns
            self.token_iterations, self.scheduled_ns, self.emitted_ns = wire.Packed(ids, "Q"), wire.Packed(starts, "q"), wire.Packed(ends, "q")
        elif np is not None and making:
            # Each step's id and times, packed when the window kept it, joined in one C call:
            # three Python passes over the steps were most of a finished request's encoding.
            rows = np.frombuffer(b"".join(map(_TIMES_OF, making)), _TIMES_DTYPE)
            head = [(0, self.handoff_ns, self.handoff_ns)] * h
            if head:
                rows = np.concatenate((np.array(head, _TIMES_DTYPE), rows))
            self.token_iterations, self.scheduled_ns, self.emitted_ns = rows["id"], rows["start"], rows["end"]
        else:
            self.token_iterations = [0] * h + [s.iteration_id for s in making]
            self.scheduled_ns = [self.handoff_ns] * h + [s.start_ns for s in making]
            self.emitted_ns = [self.handoff_ns] * h + [s.end_ns for s in making]
        if h:
            self.first_token_ns = self.handoff_ns
        elif making:
            self.first_token_ns = making[0].end_ns


def stopped_by_last(n: int) -> wire.Packed:
    """The special-token column of `n` tokens whose last one stopped the request (EOS or a stop
    token), packed as it goes on the wire."""
    return wire.Packed(bytes(n - 1) + bytes((wire.SPECIAL_EOS,)), "B")


_MADE = attrgetter("made")
# A kept step's iteration id, start and end, packed (`StepWindow.keep`): a finished request's
# token columns are its steps' rows joined.
_TIMES = struct.Struct("<Qqq")
_NS = struct.Struct("<q")
_TIMES_OF = attrgetter("times")
_TIMES_DTYPE = [("id", "<u8"), ("start", "<i8"), ("end", "<i8")]


def _speculative(steps: list) -> bool:
    """Whether a step made several tokens for some request (`made`): checked in C for steps that
    all have the field (every finished request's steps go through here), else one by one."""
    try:
        return any(map(_MADE, steps))
    except AttributeError:
        return any(getattr(s, "made", None) for s in steps)


def first_tokens(steps: list, rid: str, n: int, speculative: bool = True) -> list | None:
    """Of `steps`, the steps that made a request's first `n` tokens (one each, or as many as a
    speculative step says it made, `made`: the last one may have made more, past a stop), or None
    when they made fewer. Steps after those are an overlap scheduler's overshoot. `speculative`
    False: no step made more than one (`StepWindow.speculative`), not looked for."""
    if not speculative or not _speculative(steps):
        return steps[:n] if len(steps) >= n else None
    made = 0
    for i, s in enumerate(steps):
        if made >= n:
            return steps[:i]
        made += (s.made or {}).get(rid, 1)
    return steps if made >= n else None


def tokens_made(steps: list, rid: str) -> int:
    """How many tokens `steps`, those that made a token for the request, made for it."""
    if not _speculative(steps):
        return len(steps)
    return sum((s.made or {}).get(rid, 1) for s in steps)


class _Gap:
    """Where a step's events were dropped: a step that ran nothing."""

    ran = made_by = frozenset()


_GAP = _Gap()


class StepWindow:
    """Ended steps in iteration order, `steps[i]` being iteration `base + i` (`_GAP` where a
    step's events were dropped). A step has `iteration_id`, `start_ns`, `end_ns`, `ran` (the
    request ids that ran in it: a set, or a dict by id) and `silent` (those that made no token in
    it); when it is kept here it gets `made_by` (the ids it made a token for), `times` (its id
    and times packed, `_TIMES`) and `at` (its place in the stream below, or -1).

    Which steps made a request's tokens is followed as requests join and leave, not looked up
    step by step when it is done: walking a request's lifetime of steps, each testing a set of
    hundreds of ids out of cache, cost 120 µs for each request that finished (one every step or
    two on a busy engine). The "main" steps (a decode batch from one step to the next) form a
    stream in which each request has runs, from the step it joined to the one it left; a step
    with few requests beside a big batch (SGLang's prefill of a new request between two decode
    steps) is a side step, listed under each of its requests."""

    def __init__(self, cap: int = STEP_WINDOW) -> None:
        self.steps: list = []
        self.base = 0
        # The steps' ids, starts and ends, 8 bytes each (zeros for a gap), in the same order: the
        # token columns of a request that ran in consecutive steps are slices of them (`columns`).
        self.ids, self.starts, self.ends = bytearray(), bytearray(), bytearray()
        # The main steps, `stream[i]` being the stream's step `stream_base + i` (its `at`), their
        # ids, starts and ends packed as the window's are, and the ids the last of them made a
        # token for.
        self.stream: list = []
        self.stream_base = 0
        self.stream_columns = (bytearray(), bytearray(), bytearray())
        self.main: frozenset = frozenset()
        # By request id: where its run in the stream began (while it is in the main steps), its
        # ended runs (begin, end), and its side steps.
        self.joined_at: dict = {}
        self.runs: dict = {}
        self.side: dict = {}
        self.cap = cap
        # Set by the recorder once a step made several tokens for a request (speculative
        # decoding): until then no request's steps need to be looked through for it.
        self.speculative = False

    def keep(self, step, records) -> None:
        """Adds an ended step; now and then forgets the steps no live request (of `records`,
        request id → `RequestRecord`) ran in, and past the cap the oldest."""
        w = self.steps
        if not w:
            self.base = step.iteration_id
        gap = step.iteration_id - (self.base + len(w))
        if gap < 0:
            return  # out of order: older than the window
        if gap:
            w.extend([_GAP] * gap)
            for column in (self.ids, self.starts, self.ends):
                column += bytes(8 * gap)
        step.made_by = step.ran if not step.silent else frozenset(step.ran).difference(step.silent)
        step.times = _TIMES.pack(step.iteration_id, step.start_ns, step.end_ns)
        w.append(step)
        self.ids += step.times[:8]
        self.starts += step.times[8:16]
        self.ends += step.times[16:]
        self._follow(step)
        if len(w) > self.cap or len(w) % 1024 == 0:
            self._trim(step.iteration_id, records)

    def _follow(self, step) -> None:
        """The step in the stream (its requests' runs begun and ended against the main steps'
        before it), or listed as a side step under each of its requests: whichever writes less.
        Set operations on the ids, in C; a loop only over those that joined or left."""
        members = step.made_by
        if not isinstance(members, (set, frozenset)):
            members = members.keys()  # vLLM's dict of scheduled tokens by id
        main = self.main
        if members is main:
            self._stream(step)  # the same id set as the main step before
            return
        joined = members - main
        n = len(members)
        if not joined and n == len(main):
            self._stream(step)  # the same requests
            return
        left = len(main) - (n - len(joined))
        # A side step when listing its requests costs less than following them, and it is
        # less than half the main batch (a step as big is followed whatever it costs: the stream
        # moves on to a new batch; one that shrank at once to a few requests is listed, a few
        # entries a step, until a step as big comes).
        if len(joined) + left > n and 2 * n < len(main):
            step.at = -1
            for rid in members:
                self.side.setdefault(rid, []).append(step)
            return
        at = self.stream_base + len(self.stream)
        if left:
            joined_at, runs = self.joined_at, self.runs
            for rid in main.difference(members):
                runs.setdefault(rid, []).append((joined_at.pop(rid), at))
        for rid in joined:
            self.joined_at[rid] = at
        self._stream(step)
        self.main = members if isinstance(members, frozenset) else frozenset(members)

    def _stream(self, step) -> None:
        step.at = self.stream_base + len(self.stream)
        self.stream.append(step)
        t, (ids, starts, ends) = step.times, self.stream_columns
        ids += t[:8]
        starts += t[8:16]
        ends += t[16:]

    def _trim(self, newest: int, records) -> None:
        """Forgets the steps before the oldest live request's first, and past the cap the oldest;
        and what it followed of requests that are no longer live."""
        w = self.steps
        oldest = min((r.first_iteration for r in records.values() if r.first_iteration), default=newest + 1)
        drop = min(max(oldest - self.base, len(w) - self.cap, 0), len(w))
        del w[:drop]
        for column in (self.ids, self.starts, self.ends):
            del column[: 8 * drop]
        self.base += drop
        s = self.stream
        k = bisect_left(s, self.base, key=_ITERATION_ID)
        del s[:k]
        for column in self.stream_columns:
            del column[: 8 * k]
        self.stream_base += k
        for followed in (self.runs, self.side):
            for rid in [rid for rid in followed if rid not in records]:
                del followed[rid]

    def columns(self, steps: list, rid: str | None = None) -> tuple | None:
        """The ids, starts and ends of `steps` (kept here, in order), each packed 8 bytes a step,
        when they are consecutive steps of the window (a request decoding in every step from its
        first) or, for request `rid`'s steps, a few of its side steps (its prefill) and then
        consecutive steps of the stream (decoding in every main step, prefills of others between
        them); else None. Joining the steps' rows took a pass over them, each out of cache by the
        time its request finishes."""
        if not steps:
            return None
        first, last = steps[0].iteration_id - self.base, steps[-1].iteration_id - self.base
        w = self.steps
        if 0 <= first and last - first + 1 == len(steps) and last < len(w) and w[first] is steps[0] and w[last] is steps[-1]:
            a, b = 8 * first, 8 * (last + 1)
            return self.ids[a:b], self.starts[a:b], self.ends[a:b]  # copies, as slices of a bytearray
        k = 0
        while k < len(steps) and k < _SIDE_HEAD and steps[k].at < 0:
            k += 1
        if rid is None or k == len(steps):
            return None
        s, sb = self.stream, self.stream_base
        first, last = steps[k].at - sb, steps[-1].at - sb
        if first < 0 or last - first + 1 != len(steps) - k or last >= len(s) or s[first] is not steps[k] or s[last] is not steps[-1]:
            return None
        # As many steps as stream steps between the two ends: all of them, unless one of its side
        # steps stands in for a stream step it missed.
        lo, hi = steps[k].iteration_id, steps[-1].iteration_id
        if any(lo < x.iteration_id < hi for x in self.side.get(rid, ())):
            return None
        a, b = 8 * first, 8 * (last + 1)
        head = [step.times for step in steps[:k]]
        return tuple(b"".join([t[8 * i : 8 * i + 8] for t in head]) + column[a:b] for i, column in enumerate(self.stream_columns))

    def making(self, r: RequestRecord) -> list:
        """The ended steps that made a token for the request, oldest first, from its first (a new
        list: slices of the stream and its side steps)."""
        rid = r.request_id
        s, sb = self.stream, self.stream_base
        pieces = [s[max(a, sb) - sb : b - sb] for a, b in self.runs.get(rid, ()) if b > sb]
        begin = self.joined_at.get(rid)
        if begin is not None:
            pieces.append(s[max(begin, sb) - sb :])
        side = self.side.get(rid)
        if side:
            pieces.append(side)
        pieces = [p for p in pieces if p]
        if not pieces:
            return []
        if len(pieces) == 1:
            out = list(pieces[0])
        else:
            pieces.sort(key=_first_id)
            out = list(chain.from_iterable(pieces))
            if any(a[-1].iteration_id >= b[0].iteration_id for a, b in zip(pieces, pieces[1:])):
                out.sort(key=_ITERATION_ID)  # a side step inside a run
        lo = max(r.first_iteration, self.base)
        if out[0].iteration_id < lo:
            out = [x for x in out if x.iteration_id >= lo]
        return out

    def last(self, r: RequestRecord):
        rid = r.request_id
        for step in reversed(self.steps):
            if rid in step.ran:
                return step
        return None


_ITERATION_ID = attrgetter("iteration_id")
# Side steps a request's steps may start with (its prefill, in chunks) and still be sliced from the
# stream's columns (`StepWindow.columns`).
_SIDE_HEAD = 4


def _first_id(piece: list) -> int:
    return piece[0].iteration_id
