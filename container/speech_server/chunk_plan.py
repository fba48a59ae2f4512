"""Cutting one message into the chunks the model speaks, first chunk short.

Kokoro is not autoregressive: a chunk's audio exists only when the whole chunk is synthesized, so
time to first audio is the synthesis time of the *first chunk*. The plan therefore makes the first
chunk short (its first clause) and lets later chunks grow, because each later chunk only has to be
ready before the audio already sent runs out, and longer chunks have better prosody.

With ``fast_start`` (the default)::

    >>> plan_chunks("Hello there, this is voicewire. It speaks while the agent writes.")
    ['Hello there,', 'this is voicewire.', 'It speaks while the agent writes.']

1. The first chunk ends at the first clause mark (``,`` ``;`` ``:`` or a spaced dash) once it has
   ``first_min_chars`` characters; else at the end of the first sentence; but never after more than
   ``first_max_words`` words::

       >>> plan_chunks("Sure! Here is the plan.")[0]          # a sentence end is a boundary
       'Sure!'
       >>> plan_chunks("In the long history of our small and quiet town nobody ever")[0]
       'In the long history of'

2. Each later chunk may be ``growth`` times longer than the one before it (up to ``max_chars``):
   whole sentences are packed while they fit; a sentence longer than the budget is cut at its last
   clause mark within the budget, else at its last word boundary within it.

Without ``fast_start`` the text is cut the way the model's own pipeline cuts it (hexgrad's
KPipeline splits on line breaks, then the engine at 510 phonemes): the seed's behaviour, kept so
that benchmarks can compare both.

Sentence boundaries come from ``sentencex`` (abbreviations, decimals, quotes); this module adds
only the clause and length rules, which no segmenter offers.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from sentencex import segment

# A clause mark followed by a space, or a dash with spaces around it ("well - maybe", "yes — no").
_CLAUSE_END = re.compile(r"[,;:](?=\s)|\s[-–—](?=\s)")
_LINE_BREAKS = re.compile(r"\n+")
_SENTENCE_MARKS = frozenset(".!?…。！？")
_CLAUSE_MARKS = frozenset(",;:-–—、")


@dataclass(frozen=True)
class ChunkPolicy:
    """Tuned on the CPU engine (real-time factor ~0.35): a 2.5x bigger chunk is still ready
    before the previous chunk's audio has played."""

    first_min_chars: int = 10
    first_max_words: int = 5
    growth: float = 2.0
    later_min_chars: int = 30  # below this the model's fixed cost per call dominates
    min_tail_chars: int = 12  # never leave a stub like "plan." to be spoken on its own
    max_chars: int = 320  # well under the model's 510 phonemes


DEFAULT_POLICY = ChunkPolicy()


def plan_chunks(
    text: str, fast_start: bool = True, policy: ChunkPolicy = DEFAULT_POLICY
) -> list[str]:
    """The chunks to synthesize, in order; joined with spaces they are the text's words."""
    paragraphs = [part.strip() for part in _LINE_BREAKS.split(text) if part.strip()]
    if not fast_start:
        return paragraphs
    sentences = [
        sentence.strip()
        for paragraph in paragraphs
        for sentence in segment("en", paragraph)
        if sentence.strip()
    ]
    if not sentences:
        return []
    first, rest_of_first = _cut_first(sentences[0], policy)
    chunks = [first]
    pending = ([rest_of_first] if rest_of_first else []) + sentences[1:]
    current = ""
    for sentence in pending:
        budget = _budget(chunks[-1], policy)
        joined = f"{current} {sentence}" if current else sentence
        if len(joined) <= budget:
            current = joined
            continue
        if current:
            chunks.append(current)
            budget = _budget(current, policy)
        current = sentence
        while len(current) > budget + policy.min_tail_chars:
            head, current = _cut_within(current, budget, policy)
            chunks.append(head)
            budget = _budget(head, policy)
    if current:
        chunks.append(current)
    return chunks


def pause_after(chunk: str) -> float:
    """Seconds of silence to put after a chunk, as a speaker would pause at its last mark.

    The engine's own trailing silence is trimmed, so the pause is added back here: a sentence end
    gets a full pause, a clause a short one, a cut between words none.
    """
    last = chunk.rstrip("\"'”’)]*")[-1:]
    if last in _SENTENCE_MARKS:
        return 0.25
    if last in _CLAUSE_MARKS:
        return 0.1
    return 0.0


def _cut_first(sentence: str, policy: ChunkPolicy) -> tuple[str, str]:
    """Split the first sentence into its first clause (or first words) and the rest."""
    for mark in _CLAUSE_END.finditer(sentence):
        end = mark.end()
        if len(sentence) - end < policy.min_tail_chars:
            break
        if end >= policy.first_min_chars:
            head = sentence[:end].strip()
            if len(head.split()) <= policy.first_max_words:
                return head, sentence[end:].strip()
            break
    words = sentence.split()
    rest = " ".join(words[policy.first_max_words :])
    if len(words) <= policy.first_max_words or len(rest) < policy.min_tail_chars:
        return sentence, ""
    return " ".join(words[: policy.first_max_words]), rest


def _cut_within(sentence: str, budget: int, policy: ChunkPolicy) -> tuple[str, str]:
    """Cut a too-long sentence at its last clause mark within the budget, else between words."""
    window = sentence[: budget + 1]
    clause_ends = [
        mark.end()
        for mark in _CLAUSE_END.finditer(window)
        if mark.end() <= budget and len(sentence) - mark.end() >= policy.min_tail_chars
    ]
    if clause_ends:
        cut = clause_ends[-1]
    else:
        space = window.rfind(" ")
        cut = space if space > 0 else budget  # a single word longer than the budget
    return sentence[:cut].strip(), sentence[cut:].strip()


def _budget(previous: str, policy: ChunkPolicy) -> int:
    return min(policy.max_chars, max(policy.later_min_chars, int(len(previous) * policy.growth)))
