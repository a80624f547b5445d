"""Token texts for the ids a scheduler sees: engines detokenize in their front end, so the exporter
gets the model's tokenizer itself, on its own thread, the first time it needs it, and decodes each
token id once.

Texts go to tokenscope by id (`ResourceTraces.token_texts`), each id's once: an export carries the
texts of the ids its requests use that no acknowledged export has carried yet. Once an export is
acknowledged, its texts are committed, and any server replica has them.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("tokenscope_exporter")


class Texts:
    """`texts(ids)`: the tokens' texts, once `available()` says a tokenizer could be had.

    `tokenizer` is called once, on the exporter's thread, and returns a Hugging Face style
    tokenizer (anything with `decode(ids, skip_special_tokens=...)`) or None. The environment's
    `TOKENSCOPE_TOKENIZER` (a `tokenizer.json`, or a directory holding one) overrides it."""

    def __init__(self, tokenizer=None) -> None:
        self._tokenizer = tokenizer
        self._decode = None
        self._tried = False
        self._cache: dict[int, str] = {}
        # Ids used by the requests recorded since the last export; ids whose texts an
        # acknowledged export carried.
        self._used: set[int] = set()
        self._sent: set[int] = set()

    def _load(self):
        self._tried = True
        path = os.environ.get("TOKENSCOPE_TOKENIZER")
        try:
            if path:
                from tokenizers import Tokenizer

                if os.path.isdir(path):
                    path = os.path.join(path, "tokenizer.json")
                tok = Tokenizer.from_file(path)
            elif self._tokenizer is not None:
                tok = self._tokenizer()
            else:
                tok = None
            if tok is None:
                return None

            def decode(i: int) -> str:
                # Ids past the tokenizer's vocabulary (models pad theirs) have no text.
                try:
                    return tok.decode([i], skip_special_tokens=False)
                except Exception:
                    return ""

            return decode
        except Exception as e:  # no texts rather than no traces
            log.warning("tokenscope: no token texts, the tokenizer did not load: %s", e)
            return None

    def available(self) -> bool:
        if not self._tried:
            self._decode = self._load()
        return self._decode is not None

    def texts(self, ids) -> list[str]:
        """Texts of these ids (call only when `available()`)."""
        cache, decode = self._cache, self._decode
        out = []
        for i in ids:
            t = cache.get(i)
            if t is None:
                t = cache[i] = decode(i)
            out.append(t)
        return out

    def use(self, ids) -> None:
        """Notes the ids of a recorded request's tokens or candidates (call only when
        `available()`). A set update, not a loop in Python: this runs for every token. A numpy
        column (vLLM's candidates) as Python ints: the wire and the tokenizer take those."""
        tolist = getattr(ids, "tolist", None)
        self._used.update(tolist() if tolist is not None else ids)

    def take(self) -> tuple[list[int], list[str]]:
        """The ids and texts the next export carries: those used since the last call whose texts
        no acknowledged export carried."""
        # Only ids the wire can carry: 0xFFFFFFFF means "unknown".
        ids = [i for i in self._used - self._sent if 0 <= i < 0xFFFFFFFF]
        self._used = set()
        return ids, self.texts(ids)

    def acknowledged(self, ids) -> None:
        """An export carrying these ids' texts was acknowledged: later ones leave them out."""
        self._sent.update(ids)

    def forget(self) -> None:
        """The server lacked texts it was meant to have (a reply's `texts_missing`: say its
        database was replaced): send every id's text again."""
        self._sent = set()
