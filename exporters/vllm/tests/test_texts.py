"""Token texts by id, as the exporter core sends them: each id's text once, until the server says it
lacks some. Against a running tokenscope (`scripts/test-engines` starts one), without an engine."""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request

import pytest

from tokenscope_exporter import Exporter, Texts, wire
from tokenscope_exporter.record import RequestRecord

GRPC = os.environ.get("TOKENSCOPE_GRPC")
HTTP = os.environ.get("TOKENSCOPE_HTTP")
pytestmark = pytest.mark.skipif(not (GRPC and HTTP), reason="needs a running tokenscope")


class WordTokenizer:
    """Token i reads "t<i>"."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(f"t{i}" for i in ids)


class Recorder:
    """Takes finished records (`("finished", record)` events) and encodes them."""

    def __init__(self) -> None:
        self.texts = Texts(WordTokenizer)
        self._done: list[bytes] = []

    def finished(self, r: RequestRecord) -> None:
        r.close([], r.arrival_ns + 1_000_000, self.texts)
        self._done.append(wire.request(r))

    def take(self):
        done, self._done = self._done, []
        return done, []


def record(request_id: str, ids: list[int]) -> RequestRecord:
    r = RequestRecord(request_id=request_id, arrival_ns=time.time_ns(), queued_ns=0, prompt_tokens=4, sampling=None)
    r.token_ids = ids
    r.candidate_counts = [1] * len(ids)
    r.candidate_ids = [i + 1000 for i in ids]
    r.candidate_logprobs = [-1.0] * len(ids)
    r.logprobs = [-0.5] * len(ids)
    r.ranks = [2] * len(ids)
    return r


def texts_read(instance: str, request_id: str) -> list:
    q = urllib.parse.urlencode({"instance": instance})
    with urllib.request.urlopen(f"{HTTP}/api/v1/requests/{request_id}?{q}", timeout=30) as resp:
        d = json.load(resp)
    return [(t["text"], [c["text"] for c in t["candidates"]]) for t in d["tokens"]]


@pytest.fixture(autouse=True)
def own_tokenizer(monkeypatch):
    """The word tokenizer here, not the one other tests name in the environment."""
    monkeypatch.delenv("TOKENSCOPE_TOKENIZER", raising=False)


def test_each_text_goes_once_and_again_when_the_server_lacks_it():
    # A model of its own, so that no other test has stored its texts.
    instance = f"texts-{os.getpid()}-{time.time_ns()}"
    resource = wire.resource(wire.ENGINE_VLLM, "", f"texts-model-{instance}", instance, wire.ROLE_COLOCATED, "")
    rec = Recorder()
    exporter = Exporter(GRPC, resource, rec, key=os.environ.get("TOKENSCOPE_INGEST_KEY"))

    def send(request_id: str, ids: list[int]) -> dict:
        exporter.push(("finished", record(request_id, ids)))
        assert exporter.flush(timeout_s=20)
        return exporter.stats()

    want = lambda ids: [(f"t{i}", [f"t{i + 1000}"]) for i in ids]  # noqa: E731
    try:
        # The exporter believes an earlier export carried every text (say the server's database
        # was replaced since): the server stores the request and says it lacks the texts.
        rec.texts.acknowledged(range(5000))
        stats = send("lost", [1, 2, 3])
        assert (stats["sent_requests"], stats["sent_texts"], stats["texts_missing"]) == (1, 0, 1), stats
        assert texts_read(instance, "lost") == [(None, [None])] * 3

        # So the next export carries them, and the request stored without them shows them too.
        stats = send("again", [1, 2, 3])
        assert (stats["sent_texts"], stats["texts_missing"]) == (6, 1), stats
        assert texts_read(instance, "again") == want([1, 2, 3])
        assert texts_read(instance, "lost") == want([1, 2, 3])

        # Then only the ids not sent yet.
        stats = send("more", [2, 3, 4])
        assert (stats["sent_texts"], stats["texts_missing"]) == (8, 1), stats
        assert texts_read(instance, "more") == want([2, 3, 4])
        assert stats["rejected_requests"] == 0 and stats["dropped_requests"] == 0, stats
    finally:
        exporter.close()


def test_texts_take_leaves_out_what_was_acknowledged():
    texts = Texts(WordTokenizer)
    assert texts.available()
    texts.use([5, 6, 5])
    texts.use([7, 0xFFFFFFFF])
    ids, words = texts.take()
    assert sorted(zip(ids, words)) == [(5, "t5"), (6, "t6"), (7, "t7")], "the unknown id has no text"
    assert texts.take() == ([], []), "taken once"
    texts.use([5, 8])
    texts.acknowledged([5, 6, 7])
    assert texts.take() == ([8], ["t8"])
    texts.forget()
    texts.use([5])
    assert texts.take() == ([5], ["t5"])
