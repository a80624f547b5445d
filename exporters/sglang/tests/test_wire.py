"""The exporters' hand-written protobuf, where it has two ways to write the same thing."""

from __future__ import annotations

import random

from tokenscope_exporter import wire
from tokenscope_exporter.refs import RequestRefs


def test_packed_varints_written_at_once_equal_one_by_one():
    rng = random.Random(7)
    edges = [0, 1, 127, 128, 16383, 16384, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1]
    for n in (16, 17, 100, 2000):
        values = edges + [rng.randrange(0, 1 << rng.randrange(1, 64)) for _ in range(n)]
        one_by_one = b"".join(wire.varint(v) for v in values)
        assert wire._varints_np(values) == one_by_one
        assert wire.packed_varints(9, values) == wire.length_delimited(9, one_by_one)


def test_packed_varints_of_one_width_equal_one_by_one():
    # Columns whose values all take as many bytes (times, step ids) are written as a table.
    rng = random.Random(8)
    for width in range(1, 11):
        lo, hi = (0 if width == 1 else 1 << 7 * (width - 1)), min(1 << 7 * width, 1 << 64) - 1
        for values in ([lo] * 16, [hi] * 16, [rng.randint(lo, hi) for _ in range(200)]):
            assert wire._varints_np(values) == b"".join(wire.varint(v) for v in values), width


def test_packed_floats_written_at_once_equal_one_by_one():
    import struct

    values = [-0.5, -1e-9, 0.0, -3.4028234e38, float("-inf"), -17.25] * 5
    assert wire.packed_f32(10, values) == wire.length_delimited(10, struct.pack(f"<{len(values)}f", *values))


def test_batch_entries_read_back_as_written():
    entries = [(1, wire.PHASE_PREFILL, 512, 1024, 0, 0), (300, wire.PHASE_DECODE, 1, 0, 0, 0), (2, wire.PHASE_DECODE, 5, 0, 4, 2)]
    batch = b"".join(wire.batch_entry(*e) for e in entries)
    assert list(wire.read_batch(batch)) == entries


def test_request_refs_number_each_export_from_one():
    refs = RequestRefs()
    known = {"a", "b", "c"}
    first = refs.decode_batch(["b", "a", "lost"], known) + refs.entry("c", wire.PHASE_PREFILL, 64, 0)
    assert refs.ids == ["b", "a", "c"]
    assert [e[0] for e in wire.read_batch(first)] == [1, 2, 3], "the unknown request is left out"
    numbered_against = refs.ids
    # A step launched before a send and ended after it: renumbered into the next export's list.
    assert refs.take() == ["b", "a", "c"]
    refs.decode_batch(["c"], known)
    moved = refs.current(first, numbered_against)
    assert refs.ids == ["c", "b", "a"]
    assert list(wire.read_batch(moved)) == [
        (2, wire.PHASE_DECODE, 1, 0, 0, 0),
        (3, wire.PHASE_DECODE, 1, 0, 0, 0),
        (1, wire.PHASE_PREFILL, 64, 0, 0, 0),
    ]
    # A batch numbered against the current list is sent as it is.
    assert refs.current(moved, refs.ids) is moved


def test_a_decode_step_encoded_again_after_a_send_equals_its_entries_renumbered():
    from tokenscope_exporter.refs import ANY

    for ref in [1, 2, 127, 128, 300, 16384, 2**21]:
        assert wire.decode_entry(ref) == wire.batch_entry(ref, wire.PHASE_DECODE, 1, 0), ref
    known = {f"r{i}" for i in range(300)} - {"r7"}
    rids = [f"r{i}" for i in range(300)]
    for warm in (False, True):  # the export's entries cached (most steps) or not
        a, b = RequestRefs(), RequestRefs()
        for refs in (a, b):
            if warm:
                refs.decode_batch(rids, known)
            refs.entry("p", wire.PHASE_PREFILL, 9, 0)
        batch, decoded = a.decode_batch_of(rids, known)
        assert batch == b.decode_batch(rids, known) and "r7" not in decoded and len(decoded) == 299
        old = a.ids
        a.take(), b.take()
        a.decode_batch(["r5"], known), b.decode_batch(["r5"], known)
        assert a.decode_batch(decoded, ANY) == b.current(batch, old)
        assert a.ids == b.ids


def test_a_decode_batch_is_its_known_requests_entries_new_ones_numbered_in_order():
    """Requests joining a batch whose others have entries (one or several, known or not), found
    with the caller's id set or by a failed join: each known request's entry, in the batch's
    order, the new ones numbered in that order, as one by one."""
    import random

    rng = random.Random(3)
    for case in range(200):
        rids = [f"r{i}" for i in rng.sample(range(60), rng.randrange(1, 40))]
        known = set(rids) - set(rng.sample(rids, min(len(rids), rng.randrange(0, 3))))
        before = [rid for rid in rids if rng.random() < 0.5]  # with entries already
        expected = RequestRefs()
        for rid in before + rids:  # one by one
            if rid in known and rid not in expected.decode_entries:
                expected.decode_entries[rid] = wire.decode_entry(expected.ref(rid))
        encoded = [rid for rid in rids if rid in known]
        for id_set in (frozenset(rids), None):
            refs = RequestRefs()
            refs.decode_batch_of([rid for rid in before if rid in known], known)
            batch, decoded = refs.decode_batch_of(rids, known, id_set)
            assert refs.ids == expected.ids, case
            assert decoded == encoded and batch == b"".join(expected.decode_entries[rid] for rid in encoded), case


def test_speculative_entries_are_cached_per_export_and_renumbered_after_a_send():
    refs = RequestRefs()
    refs.entry("x", wire.PHASE_PREFILL, 8, 0)
    first = refs.speculative_entry("s", 4, 3, 2)
    assert refs.speculative_entry("s", 4, 3, 2) is first, "one encoding per export and count"
    assert list(wire.read_batch(first)) == [(2, wire.PHASE_DECODE, 4, 0, 3, 2)]
    assert list(wire.read_batch(refs.speculative_entry("s", 4, 3, 0))) == [(2, wire.PHASE_DECODE, 4, 0, 3, 0)]
    refs.take()
    # The next export numbers from one: the cached entry, numbered against the old list, is gone.
    assert list(wire.read_batch(refs.speculative_entry("s", 4, 3, 2))) == [(1, wire.PHASE_DECODE, 4, 0, 3, 2)]
    assert refs.ids == ["s"]


def test_fixed_width_columns_from_lists_arrays_and_rows_are_the_same_bytes():
    import struct

    import numpy as np

    times = [1_796_022_000_000_000_000 + 7 * i for i in range(40)]
    expected = wire.length_delimited(16, struct.pack("<40q", *times))
    assert wire.packed_fixed(16, times, "q") == expected
    assert wire.packed_fixed(16, np.array(times, dtype=np.int64), "q") == expected
    # A view with a stride (a field of the step window's packed rows) is written contiguously.
    rows = np.array([(1, t, t + 1) for t in times], [("id", "<u8"), ("start", "<i8"), ("end", "<i8")])
    assert wire.packed_fixed(16, rows["start"], "q") == expected
    assert wire.packed_fixed(16, [], "q") == b""
    # A logprob beyond float32's range is -inf, not an error.
    assert wire.packed_fixed(4, [-1e39, -0.5], "f") == wire.length_delimited(4, struct.pack("<2f", float("-inf"), -0.5))


def test_rows_packed_at_once_equal_the_flattened_rows():
    ids = [[1000 + i, 5, 2**32 - 1] for i in range(50)]
    packed = wire.packed_rows(ids, 3, "I")
    flat = [v for row in ids for v in row]
    assert len(packed) == 150 and list(packed) == flat
    assert wire.packed_fixed(19, packed, "I") == wire.packed_fixed(19, flat, "I")
    assert wire.packed_rows(ids + [[1, 2]], 3, "I") is None, "a row of another width"
    assert wire.packed_rows([[2**32, 0, 0]], 3, "I") is None, "a value that does not fit"
    # Varints under 128 are their own bytes.
    counts = wire.Packed(bytes((3,)) * 50, "B")
    assert wire.packed_varints(8, counts) == wire.packed_varints(8, [3] * 50)


def test_sglang_candidates_of_one_width_are_packed_and_of_several_listed():
    from types import SimpleNamespace as NS

    from tokenscope_sglang.recorder import Recorder

    def req(widths):
        lp = NS(
            output_token_logprobs_val=[-0.5] * len(widths),
            output_top_logprobs_val=[[-0.1] * w for w in widths],
            output_top_logprobs_idx=[list(range(7, 7 + w)) for w in widths],
        )
        return NS(return_logprob=True, logprob=lp)

    for widths in ([3, 3, 3], [3, 2, 3]):
        r = NS(logprobs=[], ranks=[], candidate_counts=[], candidate_ids=[], candidate_logprobs=[])
        Recorder._logprobs(r, req(widths), len(widths))
        assert list(r.candidate_counts) == widths
        assert list(r.candidate_ids) == [7 + j for w in widths for j in range(w)]
        assert len(r.candidate_logprobs) == sum(widths) and list(r.ranks) == [0, 0, 0]
        assert isinstance(r.candidate_ids, wire.Packed) == (widths == [3, 3, 3]), widths


def test_the_native_part_is_built_where_the_plugin_is_installed():
    # `scripts/test-engines` installs the exporter as pip does on an engine's host: with a C
    # compiler there, the native part must have been built (else it fell back, silently).
    assert wire._pack_rows is not None and wire._varint_native is not None


def _edge_values(rng, code):
    """Values that pack, and values on either side of what `struct` takes, for `code`."""
    if code == "I":
        good = [0, 1, 255, 2**31, 2**32 - 1, True, rng.randrange(2**32)]
        bad = [-1, 2**32, 2**64, 1.5, "7", None]
    else:
        good = [0.0, -0.0, -0.5, 1e-45, 3.4028234663852886e38, float("inf"), float("-inf"), float("nan"), 7, rng.random()]
        bad = [1e39, -1e300, "x", None]
    return good, bad


def test_rows_packed_natively_equal_rows_packed_by_struct():
    # The native part packs plain rows; for anything else it declines and `struct` decides, so
    # the bytes are the same whether it was built or not.
    import numpy as np

    rng = random.Random(11)
    for code in ("I", "f"):
        good, bad = _edge_values(rng, code)
        extra = [np.uint32(5), np.float32(0.25), np.int64(3)] if code == "I" else [np.float64(0.5), np.float32(-2.0)]
        for _ in range(300):
            width = rng.randrange(0, 6)
            rows = [[rng.choice(good) for _ in range(width)] for _ in range(rng.randrange(0, 40))]
            if rows and rng.random() < 0.5:
                i, j = rng.randrange(len(rows)), rng.randrange(width) if width else 0
                if width:
                    rows[i][j] = rng.choice(bad + extra)
                elif rng.random() < 0.5:
                    rows[i] = [1]  # a row of another width
            if rows and rng.random() < 0.2:
                rows = [tuple(r) for r in rows] if rng.random() < 0.5 else tuple(rows)
            native = wire._pack_rows(rows, width, code)
            python = wire._packed_rows_py(rows, width, code)
            if native is not None:
                assert python is not None and native == python.data, rows
            packed = wire.packed_rows(rows, width, code)
            assert (packed is None) == (python is None) and (packed is None or packed.data == python.data), rows
    # A column is one row: the same bytes as `struct` for the token ids and logprobs.
    ids = [rng.randrange(2**32) for _ in range(3000)]
    assert wire._pack_rows((ids,), len(ids), "I") == wire._packed_rows_py((ids,), len(ids), "I").data
    assert wire._pack_rows([[1, 2]], 2, "q") is None, "only the codes it knows"


def test_columns_packed_natively_equal_columns_packed_without_it(monkeypatch):
    rng = random.Random(12)
    columns = [
        ("I", [rng.randrange(2**32) for _ in range(500)]),
        ("f", [rng.uniform(-30, 0) for _ in range(500)]),
        ("f", [-1e39, -0.5, float("nan")]),  # beyond float32 (-inf) and a NaN: numpy's way
        ("I", [1, True, 2]),
        ("q", [-5, 2**62]),
    ]
    native = [wire.packed_fixed(4, values, code) for code, values in columns]
    monkeypatch.setattr(wire, "_pack_rows", None)
    assert native == [wire.packed_fixed(4, values, code) for code, values in columns]


def test_varints_written_natively_equal_the_python_loop():
    rng = random.Random(13)
    values = [0, 1, 127, 128, 255, 16384, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1, -1, -2, -(2**63), True]
    values += [rng.randrange(1 << rng.randrange(1, 64)) for _ in range(2000)]
    values += [-rng.randrange(1, 1 << rng.randrange(1, 63)) for _ in range(500)]
    for v in values:
        assert wire.varint(v) == wire._varint_py(v), v
    # Outside int64 / uint64 the native part declines: the Python loop writes what it writes.
    assert wire._varint_native(2**64) is None and wire._varint_native(-(2**63) - 1) is None
    assert wire.varint(2**64) == wire._varint_py(2**64)
