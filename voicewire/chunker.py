"""Cutting a live token stream into speakable chunks, each as early as its end is certain.

``IncrementalSentenceChunker`` keeps the seed's contract: ``feed(fragment)`` returns the chunks
this fragment completed and holds back the rest; ``flush()`` returns the remainder, even without
final punctuation, and resets for the next stream (``finish()`` returns it as chunks). It is
the seed's ``(?<=[.!?])\\s+`` made safe and fast::

    >>> chunker = IncrementalSentenceChunker()
    >>> chunker.feed("Dr. Smith paid $29.99 at 10:30")
    []
    >>> chunker.feed(". He left")          # the space after "." settles the boundary at once
    ['Dr. Smith paid $29.99 at 10:30.']
    >>> chunker.feed("!")                  # "!" could still be "!?" or '!"': wait one character
    []
    >>> chunker.feed("\\n")
    ['He left!']
    >>> chunker.flush() is None
    True

The text first goes through ``SpeechTextFilter`` (markdown markers out, words kept), then a scan
decides each boundary with the least lookahead that makes it certain:

=============================  ==============================================================
text around the mark           decision
=============================  ==============================================================
``end. Next``                  boundary, decided at the space
``3.5``, ``v1.2.3``,           no boundary: a period followed by a non-space is inside a
``report.pdf``, ``x.io/a``     number, version, file name, URL or e-mail address
``end. Next``                  boundary, decided at the next word's first letter (an LLM
                               token carries the space and the word together)
``approx. two``, ``incl. tax``  no boundary: a lowercase word after a period continues
``3.5``, ``v1.2.3``,           no boundary: a period followed by a non-space is inside a
``report.pdf``, ``x.io/a``     number, version, file name, URL or e-mail address
``Dr. Smith``, ``e.g. this``   no boundary: a title or Latin abbreviation never ends a sentence
``Albert I. Douglas``          no boundary: a single-letter initial
``1. First`` (line start)      no boundary: a list number
``pears, etc. Then``,          boundary only if the whole next word typically starts a
``the U.S. Army``              sentence (``Then``, ``The``, ``It``...): ``U.S. Army`` goes on
``Really?!`` ``Wait...``       the whole run of marks, then any closing quotes or brackets
``"Done." Next``               boundary after the closing quote, unless the next word is
``"Ready?" she asked``         lowercase: then the sentence goes on
``終わり。次``                 boundary after ``。！？．｡`` (and closers), no space needed
``वाक्य। अगला``, ``؟`` ``۔``     boundary after other scripts' sentence marks, at the space
a line break                   boundary (headings, list items and paragraphs end there)
=============================  ==============================================================

The word lists are per language (``voicewire.abbreviations``: English, German with ``z.B.``,
``bzw.`` and ordinal dates like ``3. Mai``, French with ``c.-à-d.``), chosen by ``language``,
which the pipeline takes from the voice. A chunk with nothing to say (only punctuation once
emoji are out) is never sent.

Latency options: the first chunk of a stream may end early, at its first clause mark (``,`` ``;``
``:`` a spaced hyphen, or a dash) once it has ``first_clause_min_chars`` characters, or after
``first_max_words`` words; any chunk that reaches ``max_chars`` without a boundary is cut at its
last space.

Why not a segmenter library: sentencex and pysbd segment whole texts and re-decide earlier
boundaries as text arrives, and need the next word to decide; a voice waiting on them loses the
time this project exists to save. Their decisions are the model for the rules above.
Guarantees (property-tested): the chunks are the same however the input is fragmented, and
joined with spaces they are the speech text's words in order, none lost or repeated.
"""

from __future__ import annotations

import re
from typing import Protocol

from voicewire.abbreviations import LanguageRules, rules_for
from voicewire.speech_text import SpeechTextFilter

# Sentence marks that a space follows: Latin, Devanagari (danda, double danda), Arabic (question
# mark), Urdu (full stop). CJK marks, full-width and half-width, need no space.
_TERMINATORS = frozenset(".!?…।॥؟۔")
_CJK_TERMINATORS = frozenset("。！？．｡")
_CLOSERS = frozenset("\"'”’)]}»」』）")
_OPENERS = "\"'“‘([{«「『（"
_CLAUSE_MARKS = frozenset(",;:")
_SPACES = frozenset(" \t")
_RUNS_OF_SPACES = re.compile(r"[ \t]{2,}")
_DASHES = frozenset("–—")


class Chunker(Protocol):
    """What a turn needs of a chunker: ``feed`` returns the chunks a fragment completed (and
    holds back the rest), ``finish`` the rest once the text is whole. This module's
    ``IncrementalSentenceChunker`` is the product's; the benchmarks' seed pipeline
    (``voicewire_tools.seed_pipeline``) and batch's whole-answer one (``functions.turn``) are the
    others."""

    def feed(self, fragment: str) -> list[str]: ...

    def finish(self) -> list[str]: ...


class IncrementalSentenceChunker:
    """Turns fragments of an LLM's answer into speakable chunks as soon as each is certain."""

    def __init__(
        self,
        *,
        first_clause_min_chars: int | None = 12,
        first_max_words: int | None = None,
        max_chars: int = 250,
        language: str | None = None,
    ) -> None:
        """``first_clause_min_chars=None`` turns the early first clause off; ``first_max_words``
        also ends the first chunk after that many words (the pipeline uses 6: an LLM takes
        ~300 ms to write them, a long first sentence takes seconds), never between initials or
        after a title (``J. R. R. Tolkien``, ``Dr. Smith``); ``language`` (a BCP 47 tag, English
        by default) picks the abbreviation lists."""
        if max_chars < 20:
            raise ValueError("max_chars must be at least 20")
        if first_max_words is not None and first_max_words < 1:
            raise ValueError("first_max_words must be at least 1")
        self.first_clause_min_chars = first_clause_min_chars
        self.first_max_words = first_max_words
        self.max_chars = max_chars
        self.rules: LanguageRules = rules_for(language)
        self._reset()

    def _reset(self) -> None:
        self._speech = SpeechTextFilter()
        self._text = ""  # speech text of the current chunk onward, not yet emitted
        self._scanned = 0  # positions of _text before this are decided: no boundary there
        self._line_start = 0  # index in _text where the current line starts; -1: before it
        self._emitted = 0

    def feed(self, fragment: str) -> list[str]:
        self._text += self._speech.feed(fragment)
        return self._scan(final=False)

    def flush(self) -> str | None:
        """The rest of the stream as one string (``None`` if nothing is left); then reset.

        The seed's contract. The rest is usually one unfinished sentence, but text that could
        only be settled at the end (an open table row or list line) may hold several: ``finish``
        returns them as separate chunks.
        """
        return " ".join(self.finish()) or None

    def finish(self) -> list[str]:
        """The rest of the stream as chunks, cut by the same rules as ``feed``; then reset."""
        self._text += self._speech.flush()
        chunks = self._scan(final=True)
        self._emit(chunks, self._text)
        self._reset()
        return chunks

    # --- scanning -----------------------------------------------------------------------------

    def _scan(self, final: bool) -> list[str]:
        chunks: list[str] = []
        text, i = self._text, self._scanned
        while i < len(text):
            limit = self.max_chars + _leading_space(text)
            if i >= limit:
                text, i = self._cut_at_word(text, limit, chunks)
                continue
            end = self._boundary_at(text, i, final)
            if end is None:  # undecided: wait for more text
                break
            if end < 0:
                i += 1
                continue
            if end > limit:  # the marks after the boundary ("(ok.)") would overflow the chunk
                text, i = self._cut_at_word(text, limit, chunks)
                continue
            self._emit(chunks, text[:end])
            text, i = self._advance(text, end)
        self._text, self._scanned = text, i
        return chunks

    def _cut_at_word(self, text: str, limit: int, chunks: list[str]) -> tuple[str, int]:
        """Cut a chunk that reached ``max_chars`` at its last space (mid-word if it has none)."""
        cut = text.rfind(" ", 0, limit + 1)
        cut = cut if cut > _leading_space(text) else limit
        self._emit(chunks, text[:cut])
        return self._advance(text, cut)

    def _emit(self, chunks: list[str], chunk: str) -> None:
        # A boundary right after another one yields nothing; a chunk of punctuation alone (an
        # emoji's sentence once the emoji is out) has nothing to say.
        if (chunk := chunk.strip()) and any(char.isalnum() for char in chunk):
            chunks.append(_RUNS_OF_SPACES.sub(" ", chunk))  # where struck text or emoji were
            self._emitted += 1

    def _advance(self, text: str, end: int) -> tuple[str, int]:
        """Drop the emitted chunk from the buffer; keep the line-start bookkeeping right."""
        newline = text.rfind("\n", 0, end)
        if newline >= 0:
            self._line_start = newline + 1 - end
        else:
            self._line_start -= end
        if self._line_start < 0:
            self._line_start = -1
        return text[end:], 0

    def _boundary_at(self, text: str, i: int, final: bool) -> int | None:
        """Where the chunk ends if position ``i`` closes it; -1 if it does not; None: undecided."""
        char = text[i]
        if char == "\n":
            self._line_start = i + 1
            return i + 1
        if char in _CJK_TERMINATORS:
            end = _skip(text, i + 1, _CLOSERS)
            return end if end < len(text) or final else None
        if char in _TERMINATORS:
            return self._after_terminator(text, i, final)
        if char in _CLAUSE_MARKS or char in _DASHES or char == "-":
            return self._after_clause_mark(text, i, final)
        if char in " \t" and self._first_words_done(text, i):
            return i
        return -1

    def _first_words_done(self, text: str, i: int) -> bool:
        """The first chunk has its ``first_max_words`` words, and this space ends a word that
        does not bind to the next (an initial, a title)."""
        if self._emitted or self.first_max_words is None or not text[i - 1 : i].strip():
            return False
        words = text[:i].split()
        if len(words) < self.first_max_words:
            return False
        last = words[-1]
        if last.endswith("."):
            token = last[:-1].lstrip(_OPENERS)
            return not (_is_initial(token) or token.lower() in self.rules.never_final)
        return True

    def _after_terminator(self, text: str, i: int, final: bool) -> int | None:
        run_end = _skip(text, i, _TERMINATORS)
        end = _skip(text, run_end, _CLOSERS)
        if end == len(text):
            return end if final else None
        following = text[end]
        if not following.isspace():
            # "3.5", "v1.2", "x.io", "wait...what": inside a token. After "!" or "?", a CJK
            # character needs no space to start the next sentence.
            return end if _is_cjk(following) and "." not in text[i:run_end] else -1
        if text[i:run_end] != ".":
            if end == run_end:
                return end  # "?", "!", "?!", "...", "…": the space settles it
            return self._unless_lowercase_follows(text, end, final)  # '"Ready?" she asked'
        token = _token_before(text, i)
        word = token.lower()
        rules = self.rules
        if word in rules.never_final or _is_initial(token) or self._is_list_number(text, i, token):
            return -1
        if (
            word in rules.maybe_final
            or _is_dotted_abbreviation(word)
            or (rules.ordinal_numbers and token.isdigit())
        ):
            return self._if_next_word_starts_a_sentence(text, end, final)
        return self._unless_lowercase_follows(text, end, final)

    def _after_clause_mark(self, text: str, i: int, final: bool) -> int | None:
        if self._emitted or self.first_clause_min_chars is None:
            return -1
        if len(text[: i + 1].strip()) < self.first_clause_min_chars:
            return -1
        if text[i] == "-" and (i == 0 or not text[i - 1].isspace()):
            return -1  # "well-known", "-5": a hyphen, not a dash
        if i + 1 == len(text):
            return i + 1 if final else None
        return i + 1 if text[i + 1].isspace() else -1

    def _unless_lowercase_follows(self, text: str, end: int, final: bool) -> int | None:
        """A boundary at ``end`` unless the next word starts in lowercase ("approx. two",
        '"Ready?" she asked'): decided at that word's first character."""
        start = _skip(text, end, _SPACES)
        if start == len(text):
            return end if final else None
        return -1 if text[start].islower() else end

    def _if_next_word_starts_a_sentence(self, text: str, end: int, final: bool) -> int | None:
        """After an abbreviation that may end a sentence: a boundary at ``end`` only if the
        whole next word is one that starts sentences ("etc. Then") or a line break follows;
        "U.S. Army", "No. 5", "3. Mai", "Inc. in Ohio" go on."""
        start = _skip(text, end, _SPACES)
        if start == len(text):
            return end if final else None
        if text[start] == "\n":
            return end
        if not text[start].isupper():
            return -1
        word_end = start
        while word_end < len(text) and (text[word_end].isalpha() or text[word_end] in "'’"):
            word_end += 1
        if word_end == len(text) and not final:
            return None  # the word may go on
        word = text[start:word_end].lower().replace("’", "'")
        return end if word in self.rules.sentence_starters else -1

    def _is_list_number(self, text: str, i: int, token: str) -> bool:
        if not token.isdigit() or self._line_start < 0:
            return False
        return text[self._line_start : i - len(token)].strip() == ""


def _skip(text: str, i: int, chars: frozenset[str]) -> int:
    while i < len(text) and text[i] in chars:
        i += 1
    return i


def _leading_space(text: str) -> int:
    return len(text) - len(text.lstrip())


def _token_before(text: str, i: int) -> str:
    """The word that ends at the period at ``i``, without opening quotes or brackets."""
    start = i
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    return text[start:i].lstrip(_OPENERS)


def _is_initial(token: str) -> bool:
    return len(token) == 1 and token.isalpha()


def _is_dotted_abbreviation(word: str) -> bool:
    """ "u.s", "a.m", "ph.d": short letter groups joined by periods (not "x.io" or "v1.2")."""
    parts = word.split(".")
    return len(parts) > 1 and all(part.isalpha() and len(part) <= 2 for part in parts)


def _is_cjk(char: str) -> bool:
    return (
        "\u3040" <= char <= "\u30ff" or "\u3400" <= char <= "\u9fff" or "\uac00" <= char <= "\ud7af"
    )
