"""What the recorders share (`tokenscope_exporter.record`), on its own: the tenant read from a
request's trace headers, block hashes folded to 64 bits, and the wire encoding of the new fields."""

from __future__ import annotations

import hashlib

from tokenscope_exporter import wire
from tokenscope_exporter.record import BLOCK_HASHES, fold_hashes, tenant_of


def test_the_tenant_comes_from_baggage_or_tracestate_and_nothing_else():
    assert tenant_of(None) == "" and tenant_of({}) == ""
    assert tenant_of({"tracestate": "rojo=00f067aa0ba902b7,tenant=acme"}) == "acme"
    # Baggage values are percent-encoded and may carry properties after a semicolon.
    assert tenant_of({"baggage": "user=7, tenant=ac%20me;ttl=3"}) == "ac me"
    # Baggage first: it is the header meant for such entries.
    assert tenant_of({"baggage": "tenant=b", "tracestate": "tenant=t"}) == "b"
    assert tenant_of({"tracestate": "tenantx=no,xtenant=no"}) == ""
    assert tenant_of({"baggage": "org=globex"}, key="org") == "globex"
    assert len(tenant_of({"baggage": "tenant=" + "x" * 1000})) == 256


def test_block_hashes_fold_to_64_bits_and_keep_the_chain_start():
    digests = [hashlib.sha256(bytes([i])).digest() for i in range(100)]
    folded = fold_hashes(digests)
    assert len(folded) == BLOCK_HASHES
    assert folded[0] == int.from_bytes(digests[0][:8], "little")
    assert all(0 <= h < 1 << 64 for h in folded)
    assert fold_hashes([-1, 5]) == [(1 << 64) - 1, 5]


def test_a_prefix_cache_is_encoded_as_trace_proto_says():
    body = wire.prefix_cache(96, 0, 32, 16, [1, (1 << 64) - 1], 9)
    # gpu_tokens=96, external_tokens=32, block_size=16, block_hashes packed fixed64, blocks=9.
    assert body == bytes([0x08, 96, 0x18, 32, 0x20, 16, 0x2A, 16]) + (1).to_bytes(8, "little") + b"\xff" * 8 + bytes([0x30, 9])
