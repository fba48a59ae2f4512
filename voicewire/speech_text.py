"""Markdown in, speakable text out, one streamed fragment at a time.

LLMs answer in markdown. A speech model would read ``**`` or ``[docs](https://...)`` aloud, so
the text is cleaned before it is cut into sentences: markers go, words stay.

=====================================  ==========================================
model writes                           voice says
=====================================  ==========================================
``**Bold** and _em_ and `code`.``      ``Bold and em and code.``
``## Results``                         ``Results``
``- first item`` / ``* second``        ``first item`` / ``second``
``> quoted``                           ``quoted``
``See [the docs](https://x.io/a).``    ``See the docs.``
``![a chart](chart.png)``              ``a chart``
``| Name | Age |`` / ``|---|---|``     ``Name, Age`` / (nothing)
``---`` (a rule), fence lines          (nothing)
``~~struck~~ new``                     ``new`` (struck text is not spoken)
``Great job! 🎉``, ``👍🏽``              ``Great job!``, (nothing): emoji are not spoken
``snake_case``, ``2 * 3``, ``3.5``     unchanged
=====================================  ==========================================

Why not a markdown library: parsers (markdown-it, mistune) need the whole document and may
re-interpret earlier text when later text arrives; a streaming voice cannot wait. This filter is a
small state machine that decides each character with at most one line of lookahead and holds back
only what is still ambiguous (a trailing ``*``, a line start such as ``-`` that could begin a
bullet or a rule, a link's URL, struck text until its closing ``~~``: an unclosed ``~~`` was not
a strikethrough, and its text is spoken at the line's end). Its output never depends on how the
input was fragmented.

    >>> speech = SpeechTextFilter()
    >>> speech.feed("Try **bo"), speech.feed("ld** now"), speech.flush()
    ('Try bo', 'ld now', '')
"""

from __future__ import annotations

import re

# At a line start, these characters may begin a markdown construct; the line's kind is decided
# at the first character outside this set (or at the newline).
_LINE_PREFIX_CHARS = frozenset(" \t-*_#>+|`~0123456789.)")
_HEADING = re.compile(r"[ \t]*#{1,6}(?:[ \t]+|$)")
_BULLET = re.compile(r"[ \t]*[-*+][ \t]+")
_QUOTE = re.compile(r"[ \t]*>[ \t]?")
_RULE = re.compile(r"[ \t]*([-*_])(?:[ \t]*\1){2,}[ \t]*")
_FENCE = re.compile(r"[ \t]*(```|~~~)")
_TABLE = re.compile(r"[ \t]*\|")
_TABLE_SEPARATOR = re.compile(r"[ \t|:\-]*-[ \t|:\-]*")
_ESCAPABLE = frozenset("\\`*_{}[]()#+-.!|~>")
# Emoji, by code point: the pictograph blocks, and the invisible characters that build emoji
# sequences (variation selector 16, keycap, tags; the zero-width joiner only next to an emoji,
# since Indic scripts need it). Written here rather than taken from a library because the filter
# decides one character at a time; a few symbols a voice can say are kept: © ® ™ and arrows.
_EMOJI_RANGES = (
    (0x1F000, 0x1FAFF),  # mahjong .. symbols and pictographs extended-A (skin tones included)
    (0x2600, 0x27BF),  # miscellaneous symbols, dingbats
    (0x2B00, 0x2BFF),  # stars, squares, circles
    (0x231A, 0x231B),
    (0x23E9, 0x23FA),
    (0x25AA, 0x25FE),
    (0xFE0E, 0xFE0F),  # variation selectors 15/16
    (0x20E3, 0x20E3),  # combining keycap
    (0xE0020, 0xE007F),  # tags (subdivision flags)
)
_ZERO_WIDTH_JOINER = "\u200d"


class SpeechTextFilter:
    """Streaming markdown stripper: ``feed(fragment) -> str``, ``flush() -> str``."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._pending = ""
        self._at_line_start = True
        self._in_fence = False
        self._url_depth = 0  # > 0 while skipping a link's "(url)"
        self._previous = "\n"  # the last raw character consumed
        self._struck: list[str] | None = None  # text after an opening "~~", held until it closes

    def feed(self, fragment: str) -> str:
        self._pending += fragment
        return self._drain(final=False)

    def flush(self) -> str:
        """Everything still held, decided as if the text ended here; then reset."""
        out = self._drain(final=True)
        if self._struck is not None:  # "~~" never closed: it was not a strikethrough
            out += "".join(self._struck)
        self._reset()
        return out

    # --- the state machine --------------------------------------------------------------------

    def _drain(self, final: bool) -> str:
        out: list[str] = []
        text = self._pending
        i = 0
        while i < len(text):
            # Struck text is held until its "~~" closes (then dropped) or its line ends.
            target = out if self._struck is None else self._struck
            if self._at_line_start:
                step = self._line_start(text, i, final, target, out)
            elif self._in_fence:
                step = self._fenced(text, i)
                target.append(text[i : i + step])
            elif self._url_depth:
                step = self._skip_url(text[i])
            else:
                step = self._inline(text, i, final, target, out)
            if step == 0:  # needs more text to decide
                break
            self._previous = text[i + step - 1]
            i += step
        self._pending = text[i:]
        return "".join(out)

    def _line_start(self, text: str, i: int, final: bool, out: list[str], spoken: list[str]) -> int:
        """Decide what kind of line starts at ``i``; returns how many characters it consumed."""
        end = text.find("\n", i)
        line = text[i:] if end < 0 else text[i:end]
        complete = end >= 0 or final
        undecided = all(char in _LINE_PREFIX_CHARS for char in line)
        if undecided and not complete:
            return 0
        whole_line = len(line) + (1 if end >= 0 else 0)
        if _FENCE.match(line):
            if not complete:
                return 0
            self._in_fence = not self._in_fence
            return whole_line or 1  # the fence line is not spoken
        if self._in_fence:
            self._at_line_start = False
            out.append(text[i])
            return self._fenced(text, i)
        if _RULE.fullmatch(line):
            return whole_line  # a horizontal rule: nothing to say, and no boundary either
        if _TABLE.match(line):
            if not complete:
                return 0
            out.append(_table_row(line) + ("\n" if end >= 0 else ""))
            return whole_line
        self._at_line_start = False
        for construct in (_HEADING, _BULLET, _QUOTE):
            if (match := construct.match(line)) and match.end():
                return match.end()  # the marker is not spoken; the rest of the line is inline
        return self._inline(text, i, final, out, spoken)

    def _fenced(self, text: str, i: int) -> int:
        """Inside a code fence lines are spoken as written, up to the next line start."""
        if text[i] == "\n":
            self._at_line_start = True
        return 1

    def _skip_url(self, char: str) -> int:
        if char == "(":
            self._url_depth += 1
        elif char == ")":
            self._url_depth -= 1
        elif char == "\n":  # a link never spans lines: it was not a URL after all
            self._url_depth = 0
            self._at_line_start = True
        return 1

    def _inline(self, text: str, i: int, final: bool, out: list[str], spoken: list[str]) -> int:
        """One inline construct at ``i`` into ``out``; ``spoken`` is where text goes that is
        certainly spoken (struck text released at a line's end)."""
        char = text[i]
        following = text[i + 1] if i + 1 < len(text) else None
        if char == "\n":
            if self._struck is not None:  # a strikethrough never spans lines: it was not one
                held, self._struck = self._struck, None
                spoken.extend(held)
                out = spoken
            out.append("\n")
            self._at_line_start = True
            return 1
        if char >= _ZERO_WIDTH_JOINER and (
            _is_emoji(char) or (char == _ZERO_WIDTH_JOINER and _is_emoji(self._previous))
        ):
            return 1
        if char == "`" or char == "[":
            return 1
        if char == "\\":
            if following is None:
                if final:
                    out.append(char)
                    return 1
                return 0
            out.append(following if following in _ESCAPABLE else char + following)
            return 2
        if char in "!]":
            if following is None and not final:
                return 0
            if char == "!" and following == "[":
                return 1  # an image: its alt text is spoken
            if char == "]":
                if following == "(":
                    self._url_depth = 1
                    return 2
                return 1
            out.append(char)
            return 1
        if char in "*_~":
            run = len(text) - i - len(text[i:].lstrip(char))
            after = text[i + run] if i + run < len(text) else None
            if after is None and not final:
                return 0
            before = self._previous
            if char == "*" and before.isspace() and (after is None or after.isspace()):
                out.append(text[i : i + run])  # "2 * 3": arithmetic, not emphasis
            elif char == "_" and before.isalnum() and after is not None and after.isalnum():
                out.append(text[i : i + run])  # snake_case
            elif char == "~" and run == 1:
                out.append(char)  # "~5 minutes"
            elif char == "~":
                # "~~" opens a strikethrough (its text is held) or closes one (dropped).
                self._struck = [] if self._struck is None else None
            return run
        out.append(char)
        return 1


def _is_emoji(char: str) -> bool:
    point = ord(char)
    return any(low <= point <= high for low, high in _EMOJI_RANGES)


def _table_row(line: str) -> str:
    """``| Name | Age |`` -> ``Name, Age``; a ``|---|:---:|`` separator row -> nothing."""
    if _TABLE_SEPARATOR.fullmatch(line):
        return ""
    cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
    inline = SpeechTextFilter()
    inline._at_line_start = False
    return inline.feed(", ".join(cell for cell in cells if cell)) + inline.flush()


def to_speech_text(markdown: str) -> str:
    """The whole-text form: what the filter produces for ``markdown`` fed in one piece."""
    speech = SpeechTextFilter()
    return speech.feed(markdown) + speech.flush()
