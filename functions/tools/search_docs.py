"""``search_docs``: a keyword search over a folder of markdown documents, by section.

The folder ships with the deployment; by default it is voicewire's own ``docs/`` (and README),
so the agent can answer questions about itself. Each document is cut at its headings; sections
are ranked by BM25 over their words (the heading counts twice), and the best few are returned
with their file, heading and opening text: enough for a spoken answer, small enough for a
prompt.

Why our own ranking rather than a search library: the corpus is a few hundred sections read once
per Lambda environment; BM25 over them is ~40 lines of Python and takes milliseconds, where the
libraries that do it (rank-bm25, bm25s) would add numpy or scipy to every function's bundle.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from pydantic import BaseModel, Field

from functions.tools.registry import Tool

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DOCS = (ROOT / "docs", ROOT / "README.md")
MATCHES = 3
EXCERPT_CHARACTERS = 600
MIN_EXCERPT_WORDS = 12  # a section with less prose (a table, a command) has nothing to say aloud
# BM25's usual constants: term-frequency saturation and length normalization.
K1, B = 1.2, 0.75
_WORD = re.compile(r"[a-z0-9][a-z0-9_\-]*")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
# Words that say nothing about which section is meant (and the corpus's own name).
_STOPWORDS = frozenset(
    re.findall(
        r"\S+",
        "a an and are as at be by can do does for from how i in is it of on or the this to "
        "what when where which who why with voicewire docs doc documentation say says tell me "
        "about",
    )
)


class SearchDocsInput(BaseModel):
    query: str = Field(
        min_length=1,
        max_length=300,
        description="Keywords to look for in voicewire's documentation, e.g. 'barge-in cancel'.",
    )


@dataclass(frozen=True)
class Section:
    file: str
    heading: str
    text: str

    @cached_property
    def terms(self) -> Counter[str]:
        return Counter(words(self.heading) * 3 + words(self.text))


def words(text: str) -> list[str]:
    return [word for word in _WORD.findall(text.lower()) if word not in _STOPWORDS]


def sections_of(path: Path, root: Path) -> list[Section]:
    """A markdown file cut at its headings (text before the first heading: the file's name)."""
    name = path.relative_to(root).as_posix() if path.is_relative_to(root) else path.name
    found: list[Section] = []
    heading, lines = path.stem, []
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        match = None if in_code else _HEADING.match(line)
        if match:
            if "".join(lines).strip():
                found.append(Section(name, heading, "\n".join(lines).strip()))
            heading, lines = match.group(2), []
        else:
            lines.append(line)
    if "".join(lines).strip():
        found.append(Section(name, heading, "\n".join(lines).strip()))
    return found


class DocsIndex:
    """The sections of every markdown file under the given folders and files."""

    def __init__(self, sources: tuple[Path, ...] = DEFAULT_DOCS) -> None:
        self.sections: list[Section] = []
        for source in sources:
            files = sorted(source.rglob("*.md")) if source.is_dir() else [source]
            root = source if source.is_dir() else source.parent
            for path in files:
                if path.is_file():
                    self.sections.extend(sections_of(path, root))
        lengths = [sum(section.terms.values()) for section in self.sections]
        self.average_length = sum(lengths) / len(lengths) if lengths else 0.0
        self.document_frequency: Counter[str] = Counter()
        for section in self.sections:
            self.document_frequency.update(section.terms.keys())

    def search(self, query: str, limit: int = MATCHES) -> list[tuple[float, Section]]:
        """The best sections for ``query``'s words, best first (none when no word occurs)."""
        terms = set(words(query))
        count = len(self.sections)
        scored = []
        for section in self.sections:
            length = sum(section.terms.values())
            score = 0.0
            for term in terms:
                frequency = section.terms.get(term, 0)
                if not frequency:
                    continue
                rarity = math.log(
                    1
                    + (count - self.document_frequency[term] + 0.5)
                    / (self.document_frequency[term] + 0.5)
                )
                norm = K1 * (1 - B + B * length / (self.average_length or 1))
                score += rarity * frequency * (K1 + 1) / (frequency + norm)
            if score > 0 and len(excerpt(section.text).split()) >= MIN_EXCERPT_WORDS:
                scored.append((score, section))
        scored.sort(key=lambda item: -item[0])
        return scored[:limit]


def excerpt(text: str, limit: int = EXCERPT_CHARACTERS) -> str:
    """The section's prose, as a voice can say it: code blocks, tables, inline code and markup
    dropped (a command read aloud helps nobody), links as their text, cut at a word."""
    prose = re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.M | re.S)
    prose = re.sub(r"^\s*\|.*$", "", prose, flags=re.M)
    # Inline code: a plain word stays (`fast_start`), a path or command goes.
    prose = re.sub(r"`([^`]*)`", lambda m: "" if re.search(r"[\s/=]|--", m[1]) else m[1], prose)
    prose = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", prose)
    plain = re.sub(r"\*\*|__|^\s*(?:[-*]|\d+\.)\s+", "", prose, flags=re.M)
    plain = re.sub(r"\(\s*[,;:]?\s*", "(", plain)  # what dropped code leaves behind
    plain = re.sub(r"\s*\(\s*\)|\s+(?=[,;:.)])|(?<=[,;:])\s*[,;:]+", "", plain)
    plain = " ".join(plain.split())
    if len(plain) <= limit:
        return plain
    return plain[:limit].rsplit(" ", 1)[0] + " ..."


def spoken_heading(heading: str) -> str:
    """A heading without its code asides: ``Chunker (`voicewire/chunker.py`)`` is ``Chunker``."""
    return re.sub(r"\s*\([^)]*`[^)]*\)", "", heading).replace("`", "").strip()


def first_sentence(text: str) -> str:
    """The excerpt's first sentence (a spoken answer's worth)."""
    match = re.search(r"(?<=[.!?])\s+(?=[A-Z])", text)
    return text[: match.start()] if match else text


def search_docs_tool(
    sources: tuple[Path, ...] = DEFAULT_DOCS, latency_seconds: float = 0.0
) -> Tool:
    """The tool over ``sources`` (read once, at the first call)."""
    index: list[DocsIndex] = []

    async def search_docs(given: SearchDocsInput) -> dict[str, object]:
        if latency_seconds:
            await asyncio.sleep(latency_seconds)
        if not index:
            index.append(await asyncio.to_thread(DocsIndex, sources))
        found = index[0].search(given.query)
        matches = []
        for score, section in found:
            opening = excerpt(section.text)
            heading = spoken_heading(section.heading)
            matches.append(
                {
                    "file": section.file,
                    "heading": heading,
                    "excerpt": opening,
                    "summary": first_sentence(opening),
                    "score": round(score, 2),
                }
            )
        return {"query": given.query, "matches": matches}

    return Tool(
        "search_docs",
        "Search voicewire's own documentation (its design, protocol, deployment, results). "
        "Use it to answer questions about voicewire.",
        SearchDocsInput,
        search_docs,
    )
