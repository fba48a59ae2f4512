"""One turn of the conversation: what it sends the client and the speech server, in order.

- ``runner``: ``TurnRunner``, a turn in its mode (bidi, batch, speak) from its ``turn_start``
  to its ``turn_end``, over adapters (the agent, a speech session, the relay).
- ``chunking``: how the agent's text is cut into what the speech server is sent.
- ``fillers``: the rounds of tool calls and the filler that covers a slow tool's silence.
- ``audio_reader``: each speech request's audio and word timings, moved onto the turn's.
- ``arrival``: the text and audio tasks feeding one consumer in true arrival order.
- ``clock``: when the turn's firsts happened.
"""

from functions.turn.chunking import (
    FIRST_CLAUSE_CHUNKER,
    LONG_SENTENCE_WORDS,
    VOICEWIRE_CHUNKING,
    Chunking,
    cut_early,
)
from functions.turn.runner import SpeechSource, TurnOutcome, TurnRunner, TurnSpec

__all__ = [
    "FIRST_CLAUSE_CHUNKER",
    "LONG_SENTENCE_WORDS",
    "VOICEWIRE_CHUNKING",
    "Chunking",
    "SpeechSource",
    "TurnOutcome",
    "TurnRunner",
    "TurnSpec",
    "cut_early",
]
