"""tokenscope's native wire format (proto/tokenscope/v1/*.proto), written by hand.

A few dozen lines of protobuf encoding instead of generated code: generated `_pb2` modules are tied
to the protobuf runtime version they were generated for, and each engine pins its own. Only what the
exporter sends is here; field numbers are the .proto's, checked end to end by the tests (the
tokenscope server decodes what this writes).
"""

from __future__ import annotations

import struct
from itertools import starmap

try:  # the optional native part (`_native.c`), built with the package when a compiler is there
    from tokenscope_exporter._native import pack_rows as _pack_rows
    from tokenscope_exporter._native import varint as _varint_native
except ImportError:
    _pack_rows = _varint_native = None

UNKNOWN_TOKEN = 0xFFFFFFFF

# Enum values, as in trace.proto.
ENGINE_VLLM, ENGINE_SGLANG = 1, 2
ROLE_COLOCATED, ROLE_PREFILL, ROLE_DECODE = 1, 2, 3
FINISH_STOP, FINISH_LENGTH, FINISH_ABORT, FINISH_ERROR = 1, 2, 3, 4
PHASE_PREFILL, PHASE_DECODE = 1, 2
SPECIAL_EOS = 1


_ONE_BYTE = [bytes((n,)) for n in range(0x80)]


def varint(n: int) -> bytes:
    """Unsigned LEB128; negative int64 values as their two's complement, as protobuf does."""
    if 0 <= n < 0x80:
        return _ONE_BYTE[n]
    if _varint_native is not None:
        out = _varint_native(n)
        if out is not None:
            return out
    return _varint_py(n)


def _varint_py(n: int) -> bytes:
    if n < 0:
        n += 1 << 64
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Every key (field number and wire type) of the .proto's fields, encoded: a finished request
# writes about forty of them.
_KEYS = [_varint_py(k) for k in range(32 << 3)]


def tag(field: int, wire_type: int) -> bytes:
    return _KEYS[field << 3 | wire_type]


def uint(field: int, n: int) -> bytes:
    """A varint field; proto3 leaves zeros out."""
    return _KEYS[field << 3] + varint(n) if n else b""


def length_delimited(field: int, payload: bytes) -> bytes:
    return _KEYS[field << 3 | 2] + varint(len(payload)) + payload


def string(field: int, s: str) -> bytes:
    return length_delimited(field, s.encode()) if s else b""


def message(field: int, payload: bytes) -> bytes:
    """An embedded message, present even when empty."""
    return length_delimited(field, payload)


def f32(field: int, x: float) -> bytes:
    return tag(field, 5) + struct.pack("<f", x)


def packed_varints(field: int, values) -> bytes:
    if len(values) == 0:
        return b""
    if isinstance(values, Packed):  # values under 128: one byte each, packed as they are
        return length_delimited(field, values.data)
    if len(values) >= 16 and np is not None:
        return length_delimited(field, _varints_np(values))
    return length_delimited(field, b"".join(varint(v) for v in values))


# A request's columns (token ids, step ids, nanosecond times) are most of what the exporter
# encodes: one Python call per value cost about 11 µs per token; numpy writes a column at once.
# Engines bring numpy; without it, the loop above.
try:
    import numpy as np
except ImportError:  # pragma: no cover
    np = None


def _size(v: int) -> int:
    """Bytes of `v`'s LEB128."""
    return max(1, (v.bit_length() + 6) // 7)


def _varints_np(values) -> bytes:
    """LEB128 of non-negative integers, all at once: byte k of every value long enough for it."""
    a = np.asarray(values, dtype=np.uint64)
    width = _size(int(a.max()))
    if _size(int(a.min())) == width:
        # All as long (a column of nanosecond times or step ids): a plain n × width table,
        # three times faster than picking the bytes each value has.
        table = ((a[:, None] >> (np.arange(width, dtype=np.uint64) * np.uint64(7))) & np.uint64(0x7F)).astype(np.uint8)
        table[:, :-1] |= 0x80
        return table.tobytes()
    sizes = np.ones(len(a), dtype=np.int64)
    for k in range(1, 10):
        longer = a >= np.uint64(1 << (7 * k))
        if not longer.any():
            break
        sizes += longer
    ends = np.cumsum(sizes)
    starts = ends - sizes
    out = np.empty(int(ends[-1]), dtype=np.uint8)
    for k in range(int(sizes.max())):
        has = sizes > k
        low7 = (a[has] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = (sizes[has] > k + 1).astype(np.uint64) << np.uint64(7)
        out[starts[has] + k] = (low7 | more).astype(np.uint8)
    return out.tobytes()


def packed_f32(field: int, values) -> bytes:
    return packed_fixed(field, values, "f")


# Fixed-width columns: struct's codes and numpy's dtypes, little-endian as protobuf writes them.
_DTYPES = {"I": "<u4", "Q": "<u8", "q": "<i8", "f": "<f4"}


class Packed:
    """A column already packed as the wire holds it: fixed-width values (`code` as for
    `packed_fixed`), or `B` for varints under 128 (a byte each). A recorder that reads an
    engine's rows of candidates packs them in one pass over the rows (`packed_rows`)."""

    __slots__ = ("data", "code", "count")

    def __init__(self, data: bytes, code: str) -> None:
        self.data, self.code = data, code
        self.count = len(data) // struct.calcsize(code)

    def __len__(self) -> int:
        return self.count

    def __iter__(self):
        return iter(struct.unpack(f"<{self.count}{self.code}", self.data))


def packed_rows(rows, width: int, code: str) -> Packed | None:
    """Rows of `width` values each, packed fixed-width (`code` as for `packed_fixed`): in C when
    the native part is built and the rows are plain lists of ints or floats (most), else with one
    `struct` call per row, which also checks the row's width; None when a row has another width
    or a value that does not fit."""
    if _pack_rows is not None:
        data = _pack_rows(rows, width, code)
        if data is not None:
            return Packed(data, code)
    return _packed_rows_py(rows, width, code)


def _packed_rows_py(rows, width: int, code: str) -> Packed | None:
    row = struct.Struct(f"<{width}{code}")
    try:
        return Packed(b"".join(starmap(row.pack, rows)), code)
    except (struct.error, OverflowError, TypeError):
        return None


def packed_fixed(field: int, values, code: str) -> bytes:
    """A packed fixed-width column (`code`: `I` fixed32, `Q` fixed64, `q` sfixed64, `f` float)
    from a list or a numpy array. The long token columns go this way (`TokenColumns`' `_fixed`
    fields): a column is one C call, where varints cost a pass per byte of each value."""
    if len(values) == 0:
        return b""
    if isinstance(values, Packed):
        return length_delimited(field, values.data)
    if np is not None and isinstance(values, np.ndarray):
        return length_delimited(field, values.astype(_DTYPES[code], copy=False).tobytes())
    if _pack_rows is not None:  # a list of plain ints or floats (a request's token ids, logprobs)
        data = _pack_rows((values,), len(values), code)
        if data is not None:
            return length_delimited(field, data)
    try:
        return length_delimited(field, struct.pack(f"<{len(values)}{code}", *values))
    except (struct.error, OverflowError):
        if np is None:
            raise
        # A float beyond float32's range (±inf in numpy, an error in struct).
        return length_delimited(field, np.asarray(values, dtype=_DTYPES[code]).tobytes())


def resource(engine: int, engine_version: str, model: str, instance_id: str, role: int, host: str) -> bytes:
    return (
        uint(1, engine) + string(2, engine_version) + string(3, model) + string(4, instance_id) + uint(5, role) + string(6, host)
    )


def batch_entry(request_ref: int, phase: int, tokens: int, prefill_offset: int, draft: int = 0, accepted: int = 0) -> bytes:
    """A `BatchEntry` as the `batch` field (4) of an `Iteration`, naming its request by reference
    (`request_ref`, 1 + the id's place in the export's `request_ids`; see `refs.py`). `draft`,
    `accepted`: speculative decoding's draft tokens verified in the step and accepted."""
    return message(
        4,
        uint(5, request_ref) + uint(2, phase) + uint(3, tokens) + uint(4, prefill_offset) + uint(6, draft) + uint(7, accepted),
    )


# A decode entry's fields after its reference: phase decode, one token (`batch_entry`).
_DECODE_ONE = uint(2, PHASE_DECODE) + uint(3, 1)


def decode_entry(request_ref: int) -> bytes:
    """`batch_entry(request_ref, PHASE_DECODE, 1, 0)`, the entry of most requests in most steps,
    written without its six fields' calls."""
    body = b"\x28" + varint(request_ref) + _DECODE_ONE  # field 5, varint
    return b"\x22" + varint(len(body)) + body  # field 4, length-delimited


def read_batch(batch: bytes):
    """The (request_ref, phase, tokens, prefill_offset, draft, accepted) of each entry
    `batch_entry` wrote."""
    i = 0
    while i < len(batch):
        _, i = _read_varint(batch, i)  # the batch field's tag
        size, i = _read_varint(batch, i)
        end, fields = i + size, {}
        while i < end:
            key, i = _read_varint(batch, i)
            fields[key >> 3], i = _read_varint(batch, i)
        yield fields.get(5, 0), fields.get(2, 0), fields.get(3, 0), fields.get(4, 0), fields.get(6, 0), fields.get(7, 0)


def iteration(
    iteration_id: int,
    start_ns: int,
    end_ns: int,
    batch: bytes,
    running: int,
    waiting: int,
    kv_cache_usage: float,
) -> bytes:
    """An `Iteration`; `batch` is its entries already encoded (see `batch_entry`)."""
    return (
        uint(1, iteration_id)
        + uint(2, start_ns)
        + uint(3, end_ns)
        + batch
        + uint(5, running)
        + uint(6, waiting)
        + (f32(7, kv_cache_usage) if kv_cache_usage else b"")
    )


def resource_traces(
    resource_bytes: bytes, requests: list[bytes], iterations: list[bytes], token_texts=None, request_ids=()
) -> bytes:
    """One `ResourceTraces`: field 1 resource, 2 requests, 3 iterations, 4 the token texts by
    id when `token_texts` is given as (ids, texts) (present even when empty: it says the
    requests' texts go by id), and 5 the request ids the iterations' batch entries refer to."""
    out = (
        message(1, resource_bytes)
        + b"".join(length_delimited(2, r) for r in requests)
        + b"".join(length_delimited(3, i) for i in iterations)
        + b"".join(length_delimited(5, rid.encode()) for rid in request_ids)
    )
    if token_texts is not None:
        ids, texts = token_texts
        out += message(4, packed_varints(1, ids) + b"".join(length_delimited(2, t.encode()) for t in texts))
    return out


def export_request(traces: bytes) -> bytes:
    """An `ExportRequest` holding one `ResourceTraces`."""
    return length_delimited(1, traces)


def decode_export_response(data: bytes) -> dict[str, int]:
    """The counts of an `ExportResponse` (its rejections are skipped)."""
    names = {
        1: "accepted_requests",
        2: "duplicate_requests",
        3: "rejected_requests",
        4: "accepted_iterations",
        5: "rejected_iterations",
        7: "texts_missing",
    }
    out = dict.fromkeys(names.values(), 0)
    i = 0
    while i < len(data):
        key, i = _read_varint(data, i)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, i = _read_varint(data, i)
            if field in names:
                out[names[field]] = value
        elif wire_type == 2:
            size, i = _read_varint(data, i)
            i += size
        else:
            raise ValueError(f"ExportResponse: unexpected wire type {wire_type}")
    return out


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        b = data[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def request(r) -> bytes:
    """A `Request` from a finished `record.RequestRecord`."""
    out = [
        string(1, r.request_id),
        uint(4, r.arrival_ns),
        uint(5, r.queued_ns),
        uint(6, r.first_scheduled_ns),
        uint(7, r.first_token_ns),
        uint(8, r.finished_ns),
        uint(9, r.finish_reason),
        uint(10, r.prompt_tokens),
        uint(11, len(r.token_ids)),
        uint(12, r.cached_tokens),
    ]
    for start, end, tokens, iteration_id in r.chunks:
        out.append(message(13, uint(1, start) + uint(2, end) + uint(3, tokens) + uint(4, iteration_id)))
    for at, resumed, recompute, aggressor, recompute_tokens in r.preemptions:
        p = uint(1, at) + uint(2, resumed) + uint(3, int(recompute)) + string(4, aggressor) + uint(5, recompute_tokens)
        out.append(message(14, p))
    if r.kv_transfer is not None:
        # (start, end) or (start, end, bytes, blocks): 0 is not known.
        start, end, size, blocks = (*r.kv_transfer, 0, 0)[:4]
        out.append(message(15, uint(1, start) + uint(2, end) + uint(3, size) + uint(4, blocks)))
    out.append(message(16, _sampling(r.sampling)))
    out.append(message(17, _tokens(r)))
    out.append(string(18, r.lora_adapter))
    if r.priority is not None:  # optional: a priority of 0 is written
        out.append(tag(19, 0) + varint(r.priority))
    out.append(string(20, r.tenant))
    if r.prefix is not None:
        out.append(message(21, prefix_cache(*r.prefix)))
    return b"".join(out)


def prefix_cache(gpu: int, cpu: int, external: int, block_size: int, hashes, blocks: int) -> bytes:
    """A `PrefixCache`: tokens served per tier, and the prompt's block-hash chain (its first
    hashes, as 64-bit values, packed fixed64) with the chain's length."""
    out = [uint(1, gpu), uint(2, cpu), uint(3, external), uint(4, block_size)]
    if hashes:
        out.append(length_delimited(5, struct.pack(f"<{len(hashes)}Q", *hashes)))
    out.append(uint(6, blocks))
    return b"".join(out)


def _sampling(s) -> bytes:
    """`SamplingParams`: its fields are `optional`, so a zero that was given is written."""
    if s is None:
        return b""
    out = []
    if s.temperature is not None:
        out.append(f32(1, s.temperature))
    if s.top_p is not None:
        out.append(f32(2, s.top_p))
    # "No top-k" is 0 or -1 in vLLM and SGLang: not given.
    if s.top_k is not None and s.top_k > 0:
        out.append(tag(3, 0) + varint(s.top_k))
    if s.max_tokens is not None:
        out.append(tag(4, 0) + varint(s.max_tokens))
    if s.seed is not None:
        out.append(tag(5, 0) + varint(s.seed))
    return b"".join(out)


def _tokens(r) -> bytes:
    # Columns may be lists, numpy arrays or `Packed`: their length says whether they were recorded.
    out = [
        packed_fixed(15, r.token_ids, "I"),
        packed_fixed(16, r.emitted_ns, "q"),
        packed_fixed(17, r.token_iterations, "Q"),
        packed_fixed(18, r.scheduled_ns, "q"),
    ]
    if len(r.logprobs):
        out.append(packed_f32(4, r.logprobs))
        out.append(packed_varints(5, r.ranks))
    # Strings are not packed: one field per token, empty ones included (partial UTF-8).
    out.extend(length_delimited(6, t.encode()) for t in r.texts)
    if len(r.special):
        out.append(packed_varints(7, r.special))
    if len(r.candidate_counts):
        out.append(packed_varints(8, r.candidate_counts))
        out.append(packed_fixed(19, r.candidate_ids, "I"))
        out.append(packed_f32(10, r.candidate_logprobs))
        out.extend(length_delimited(11, t.encode()) for t in r.candidate_texts)
    return b"".join(out)
