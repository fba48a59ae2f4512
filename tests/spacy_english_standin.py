"""A stand-in for spaCy's ``en_core_web_sm``, which misaki's English G2P (and so hexgrad's
KPipeline) loads: the model is published only as a GitHub release (the GPU image installs it at
build time), which nothing here reaches. spaCy itself is real: its English tokenizer, and a rule
tagger giving the Penn Treebank tags misaki reads (punctuation, numbers, closed-class words,
suffixes). What differs from the trained tagger: homographs (read, live, lead) may take the other
reading, so phonemes, not timings or the engine's code path, can differ.

``installed(monkeypatch)`` makes ``spacy.load("en_core_web_sm")`` give this pipeline in a test;
``install_in_process()`` does it for a whole process (a server started as the GPU image starts
it, from a ``sitecustomize.py``: ``sitecustomize_source()``)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import spacy
from spacy.language import Language
from spacy.tokens import Doc

if TYPE_CHECKING:
    import pytest

MODEL_NAME = "en_core_web_sm"

_CLOSED = {
    "DT": "a an the this that these those each every some any no another all both either",
    "PRP": "i you he she it we they me him her us them myself yourself itself themselves",
    "PRP$": "my your his its our their",
    "IN": "of in on at by for with from into onto about over under after before between through "
    "during without within against among since until upon than because while although though "
    "if whether as like per via near",
    "CC": "and or but nor yet so &",
    "MD": "can could will would shall should may might must",
    "WDT": "which what whatever",
    "WP": "who whom whoever",
    "WRB": "when where why how",
    "EX": "there",
    "RB": "not never also very too just only then now here still even again soon already often "
    "always n't",
    "VBZ": "is has does 's",
    "VBP": "are am have do 're 've 'm",
    "VBD": "was were had did",
    "VB": "be",
    "VBN": "been",
    "TO": "to",
    "UH": "yes oh hello hi hey please",
}
_TAG_OF = {word: tag for tag, words in _CLOSED.items() for word in words.split()}
_PUNCTUATION = {
    **dict.fromkeys(".!?", "."),
    ",": ",",
    **dict.fromkeys(";:—–…", ":"),
    "-": "HYPH",
    **dict.fromkeys("([{", "-LRB-"),
    **dict.fromkeys(")]}", "-RRB-"),
    **dict.fromkeys("“‘", "``"),
    **dict.fromkeys("”’\"'", "''"),
    **dict.fromkeys("$£€#", "$"),
    "%": "NN",
}
_NUMBER = re.compile(r"^[+-]?(?:\d+(?:[.,:/]\d+)*|\d*\.\d+)(?:st|nd|rd|th|s)?$")


def _tag_of(text: str, previous: str, first: bool) -> str:
    lower = text.lower()
    if text in _PUNCTUATION:
        return _PUNCTUATION[text]
    if _NUMBER.match(text):
        return "CD"
    if lower in _TAG_OF:
        return _TAG_OF[lower]
    if (len(text) > 1 and text.isupper()) or (text[:1].isupper() and not first):
        return "NNP"
    if lower.endswith("ing"):
        return "VBG"
    if lower.endswith("ed"):
        return "VBD" if previous in ("PRP", "NN", "NNS", "NNP") else "VBN"
    if lower.endswith("ly"):
        return "RB"
    if lower.endswith("s") and not lower.endswith("ss") and len(lower) > 3:
        return "VBZ" if previous in ("PRP", "NNP", "NN") else "NNS"
    return "VB" if previous in ("TO", "MD") else "NN"


@Language.component("voicewire_rule_tagger")
def rule_tagger(doc: Doc) -> Doc:
    previous, first = "", True
    for token in doc:
        token.tag_ = _tag_of(token.text, previous, first)
        previous, first = token.tag_, token.tag_ in (".", "``", ":")
    return doc


def english_pipeline() -> Language:
    """spaCy's own English tokenizer, tagged by rule."""
    nlp = spacy.blank("en")
    nlp.add_pipe("voicewire_rule_tagger")
    return nlp


def _answering_for_the_model() -> tuple[Any, Any]:
    """``spacy.util.is_package`` and ``spacy.load`` that answer for ``en_core_web_sm`` with
    the pipeline above (other names as spaCy would)."""
    real_is_package, real_load = spacy.util.is_package, spacy.load

    def is_package(name: str) -> bool:
        return name == MODEL_NAME or real_is_package(name)

    def load(name: object, *args: object, **kwargs: object) -> Language:
        if name == MODEL_NAME:
            return english_pipeline()
        return real_load(name, *args, **kwargs)

    return is_package, load


def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    is_package, load = _answering_for_the_model()
    monkeypatch.setattr(spacy.util, "is_package", is_package)
    monkeypatch.setattr(spacy, "load", load)


def install_in_process() -> None:
    spacy.util.is_package, spacy.load = _answering_for_the_model()


def sitecustomize_source() -> str:
    """A ``sitecustomize.py`` that installs the stand-in in the process that imports it."""
    return (
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import spacy_english_standin\n"
        "spacy_english_standin.install_in_process()\n"
    )
