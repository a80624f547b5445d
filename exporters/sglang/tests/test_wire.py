"""The exporters' hand-written protobuf, where it has two ways to write the same thing."""

from __future__ import annotations

import random

from tokenscope_exporter import wire


def test_packed_varints_written_at_once_equal_one_by_one():
    rng = random.Random(7)
    edges = [0, 1, 127, 128, 16383, 16384, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1]
    for n in (16, 17, 100, 2000):
        values = edges + [rng.randrange(0, 1 << rng.randrange(1, 64)) for _ in range(n)]
        one_by_one = b"".join(wire.varint(v) for v in values)
        assert wire._varints_np(values) == one_by_one
        assert wire.packed_varints(9, values) == wire.length_delimited(9, one_by_one)
