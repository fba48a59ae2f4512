"""How a turn cuts the agent's text into what it sends the speech server, and which of those
the speech server is told to start early (``fast_start``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from voicewire.chunker import Chunker, IncrementalSentenceChunker
from voicewire.speech_text import to_speech_text

# voicewire's: the first chunk ends at its first clause or after 6 words, whichever comes first
# (an LLM writes 6 words in ~300 ms, a long first sentence in seconds).
FIRST_CLAUSE_CHUNKER = partial(IncrementalSentenceChunker, first_max_words=6)


@dataclass(frozen=True)
class Chunking:
    """How a turn cuts its text. The division of labour: this chunker (``voicewire.chunker``)
    cuts the model's stream where a listener can hear a boundary (sentences, and a first chunk
    short enough to be written in ~300 ms: its first clause or 6 words); the speech server only
    cuts the first chunk *it is sent* further, at the fastest point its engine can start on
    (``fast_start``: ``speech_server.chunk_plan``), and never adds text boundaries of its own."""

    # Called with language=<the voice's BCP 47 tag>: the abbreviation rules follow the voice.
    chunker_factory: Callable[..., Chunker] = FIRST_CLAUSE_CHUNKER
    # The speech server's early cut of the first chunk for the first sentence and for batch and
    # speak texts.
    fast_start: bool = True


VOICEWIRE_CHUNKING = Chunking()

# A later sentence this long takes the engine longer than the audio queued before it usually
# lasts (bench: a 41-word sentence after two short ones left a 2.4 s silence on 2 cores).
LONG_SENTENCE_WORDS = 24


def cut_early(sentence: str, index: int) -> bool:
    """Whether the speech server should cut this sentence's first clause off early
    (``fast_start``): the first sentence, for the first audio; a long later one, so that its
    first audio is ready before the audio already queued runs out. Other sentences are spoken
    whole, as they sound best."""
    return index == 0 or len(sentence.split()) > LONG_SENTENCE_WORDS


class WholeAnswer:
    """Batch's chunker: nothing until the end or a tool call, then all of it as one text."""

    def __init__(self) -> None:
        self._parts: list[str] = []

    def feed(self, fragment: str) -> list[str]:
        self._parts.append(fragment)
        return []

    def finish(self) -> list[str]:
        text = " ".join(to_speech_text("".join(self._parts)).split())
        self._parts = []
        return [text] if text else []
