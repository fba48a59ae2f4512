"""When a speaker is done: the rule a client applies to Transcribe's results before it asks.

Transcribe (and the local recognizer) end a result after a short silence (the local one after
600 ms): a breath mid-sentence ends one too. Asking at every final result would cut off a user
who pauses to think ("Turn on the lights ... in the kitchen"); waiting a fixed second after each
adds that second to every answer. So the wait depends on what was said (a semantic end of turn,
from the words alone, which cost nothing to read):

- the final text ends a sentence (``.``, ``?`` or ``!``) and its last word is not one that
  announces more (``and``, ``the``, ``to``...): the user is most likely done; wait
  ``complete_ms`` (250 ms) for a new result, then ask;
- otherwise (no closing mark, a trailing ``and``, a comma): wait ``incomplete_ms`` (1.5 s).

Any new result (the user speaks again) restarts the wait, and the finals are joined into one
question. The page applies the same rule with the same defaults (``web/listening.js``); Smart
Turn, an audio model of the same decision, was left out (docs/decisions.md says why).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Words after which a sentence goes on, even when the recognizer closed it with a full stop.
CONTINUING_WORDS = frozenset(
    {
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "so",
        "because",
        "if",
        "then",
        "to",
        "of",
        "in",
        "on",
        "at",
        "for",
        "with",
        "from",
        "by",
        "as",
        "than",
        "that",
        "which",
        "who",
        "whose",
        "my",
        "your",
        "his",
        "her",
        "its",
        "our",
        "their",
        "this",
        "these",
        "those",
        "is",
        "are",
        "was",
        "were",
        "be",
        "um",
        "uh",
        "er",
        "like",
    }
)
_CLOSED = re.compile(r"[.?!]['\")\]]*$")
_WORD = re.compile(r"[\w']+")


@dataclass(frozen=True)
class EndOfTurn:
    complete_ms: float = 250.0
    incomplete_ms: float = 1500.0

    def wait_ms(self, final_text: str) -> float:
        """How long to wait for more after a final result reading ``final_text``."""
        return self.complete_ms if sounds_complete(final_text) else self.incomplete_ms


def sounds_complete(text: str) -> bool:
    """Whether ``text`` reads as a finished question or request."""
    stripped = text.strip()
    words = _WORD.findall(stripped.lower())
    return bool(words) and bool(_CLOSED.search(stripped)) and words[-1] not in CONTINUING_WORDS
