"""Token texts for the ids a scheduler sees: engines detokenize in their front end, so the exporter
gets the model's tokenizer itself, on its own thread, the first time it needs it, and decodes each
token id once.
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
            return lambda i: tok.decode([i], skip_special_tokens=False)
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
