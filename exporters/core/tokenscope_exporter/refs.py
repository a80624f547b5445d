"""Batch entries that name their request by reference into the export's request ids.

A step's batch names the same requests step after step, and engines' ids run to 40 bytes: sent
with every entry they were two fifths of the bytes an export carried per token. Each export
instead lists each id once (`ResourceTraces.request_ids`) and entries carry `request_ref`, 1 + the
id's position in that list.

The list belongs to one export: `take()` hands it to the exporter as it sends, and later entries
number from a new one. A step's batch is encoded when the step is launched but sent when it
ends, possibly after a send in between: `current()` renumbers such a batch into the new list.
All of this runs on the exporter thread, as the recorders do.
"""

from __future__ import annotations

from . import wire


class _Any:
    """Known: every request id (`RequestRefs.decode_batch`'s `known`)."""

    def __contains__(self, request_id) -> bool:
        return True


ANY = _Any()


class RequestRefs:
    def __init__(self) -> None:
        # This export's ids: replaced at each `take()`, never changed in place, so a batch can
        # keep the list it was numbered against and `current()` can tell.
        self.ids: list[str] = []
        self._refs: dict[str, int] = {}
        # Each request's entry for a plain decode step (one token), encoded once per export.
        self.decode_entries: dict[str, bytes] = {}
        # Speculative decode entries by (id, tokens, drafts, accepted): a few counts a request.
        self.speculative: dict[tuple, bytes] = {}
        # Batches renumbered into a later export's list (steps that ended after a send).
        self.renumbered = 0

    def ref(self, request_id: str) -> int:
        n = self._refs.get(request_id)
        if n is None:
            self.ids.append(request_id)
            n = self._refs[request_id] = len(self.ids)
        return n

    def entry(self, request_id: str, phase: int, tokens: int, prefill_offset: int) -> bytes:
        return wire.batch_entry(self.ref(request_id), phase, tokens, prefill_offset)

    def speculative_entry(self, request_id: str, tokens: int, draft: int, accepted: int) -> bytes:
        """A decode entry verifying `draft` tokens, `accepted` of them; encoded once per export
        for each count (a step of 256 requests encoding theirs each time took milliseconds)."""
        key = (request_id, tokens, draft, accepted)
        entry = self.speculative.get(key)
        if entry is None:
            entry = self.speculative[key] = wire.batch_entry(self.ref(request_id), wire.PHASE_DECODE, tokens, 0, draft, accepted)
        return entry

    def decode_batch(self, request_ids, known) -> bytes:
        """The entries of `request_ids` decoding one token each; ids not in `known` (requests
        whose arrival was dropped with a full buffer) are left out."""
        return self.decode_batch_of(request_ids, known)[0]

    def decode_batch_of(self, request_ids, known, id_set=None) -> tuple[bytes, list]:
        """`decode_batch`, and the ids it has entries for: a step that ends after a send is
        encoded again from them (`decode_batch(ids, ANY)`), where renumbering its entries one by
        one (`current`) cost a millisecond at a batch of 256, once or twice a send. `id_set`:
        the ids as a set, when the caller has it (then new ids are found without a failed pass)."""
        entries = self.decode_entries
        if id_set is not None:
            missing = id_set.difference(entries)
            if not missing:
                return b"".join(map(entries.__getitem__, request_ids)), request_ids
        else:
            try:
                return b"".join(map(entries.__getitem__, request_ids)), request_ids  # in C: most steps
            except KeyError:
                # Requests new to this export (one joins the batch every step or two): found with
                # a set operation, in C, rather than a loop over the batch.
                missing = set(request_ids).difference(entries)
        if len(missing) > 1:  # numbered in the batch's order
            missing = [rid for rid in request_ids if rid in missing]
        for rid in missing:
            if rid in known:
                entries[rid] = wire.decode_entry(self.ref(rid))
        if all(rid in entries for rid in missing):
            return b"".join(map(entries.__getitem__, request_ids)), request_ids
        encoded = [rid for rid in request_ids if rid in entries]
        return b"".join(map(entries.__getitem__, encoded)), encoded

    def take(self) -> list[str]:
        """This export's ids; entries encoded from now on number from a new list."""
        ids = self.ids
        self.ids, self._refs, self.decode_entries, self.speculative = [], {}, {}, {}
        return ids

    def current(self, batch: bytes, ids: list[str]) -> bytes:
        """`batch`, numbered against `ids`, numbered against this export's list."""
        if ids is self.ids:
            return batch
        self.renumbered += 1
        return b"".join(
            wire.batch_entry(self.ref(ids[ref - 1]), phase, tokens, offset, draft, accepted)
            for ref, phase, tokens, offset, draft, accepted in wire.read_batch(batch)
        )
