"""Incremental detokenization with stop strings: the text of one response, emitted as it grows.

Decoding token by token breaks multi-byte characters (a byte-level BPE token can hold half of
'日'), and a tokenizer may merge or clean text across token boundaries. So every step decodes
the whole response so far and emits only what follows the text already sent, holding back

- trailing U+FFFD: the replacement character of an incomplete UTF-8 sequence that the next
  token may complete, and
- a suffix that could be the start of a stop string: once sent it could not be taken back if
  the stop string then completes (OpenAI's `stop` strings are not part of the returned text).

Everything held back is released by `finish()` when the response ends for another reason, so
the streamed pieces always concatenate to the text a non-streamed request returns.
"""

from __future__ import annotations

from typing import Callable, Sequence

REPLACEMENT = "\ufffd"


def first_stop(text: str, stops: Sequence[str]) -> int | None:
    """Index in `text` where the earliest stop string begins, or None."""
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else None


def partial_stop_len(text: str, stops: Sequence[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of some stop string."""
    best = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), best, -1):
            if text.endswith(s[:k]):
                best = k
                break
    return best


class TextStream:
    """The decoded text of one response as tokens arrive; `push` returns the new text safe to send."""

    def __init__(self, decode: Callable[[list[int]], str], stops: Sequence[str] = ()):
        self.decode = decode  # token ids -> text (special tokens skipped)
        self.stops = tuple(stops)
        self.ids: list[int] = []
        self.text = ""  # everything emitted so far: the concatenation of the returned pieces
        self.stopped = False  # a stop string appeared; nothing more is emitted

    def push(self, ids: Sequence[int]) -> str:
        """Append tokens; the newly safe text (may be empty). Sets `stopped` on a stop string."""
        self.ids.extend(ids)
        return self._emit(self.decode(self.ids).rstrip(REPLACEMENT), final=False)

    def finish(self) -> str:
        """The response ended (EOS or length): the rest of its text, including what was held back."""
        return self._emit(self.decode(self.ids), final=True)

    def _emit(self, text: str, final: bool) -> str:
        if self.stopped:
            return ""
        end = first_stop(text, self.stops) if self.stops else None
        if end is not None:
            self.stopped = True
        elif final:
            end = len(text)
        else:
            end = len(text) - partial_stop_len(text, self.stops)
        # A tokenizer whose decoding is not prefix-stable could rewrite already-sent text; what was sent
        # stays sent and only text past its length is emitted.
        piece = text[len(self.text):end]
        self.text += piece
        return piece
