"""Token texts for the ids the scheduler sees: vLLM detokenizes in its front end, so the exporter
loads the model's tokenizer itself, on its own thread, the first time it needs it, and decodes
each token id once.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("tokenscope_vllm")


class Texts:
    """`text(id)`: a token's text, or None when no tokenizer could be loaded."""

    def __init__(self, model_config=None) -> None:
        self._model_config = model_config
        self._decode = None
        self._tried = False
        self._cache: dict[int, str] = {}

    def _load(self):
        self._tried = True
        path = os.environ.get("TOKENSCOPE_TOKENIZER")
        try:
            if path:
                # A `tokenizer.json`, or a directory holding one.
                from tokenizers import Tokenizer

                if os.path.isdir(path):
                    path = os.path.join(path, "tokenizer.json")
                tok = Tokenizer.from_file(path)
                return lambda i: tok.decode([i], skip_special_tokens=False)
            mc = self._model_config
            if mc is None or getattr(mc, "skip_tokenizer_init", False):
                return None
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(
                mc.tokenizer,
                revision=getattr(mc, "tokenizer_revision", None),
                trust_remote_code=getattr(mc, "trust_remote_code", False),
            )
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
