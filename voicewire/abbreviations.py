"""What a period after a word means, per language: the chunker's word lists.

``IncrementalSentenceChunker`` asks three questions of the word before a period, and of the word
after it, in the language of the voice that will speak (``voicewire.voice_catalog``):

- Does the word before never end a sentence (``Dr.``, ``e.g.``, ``z.B.``, ``c.-à-d.``)?
- Does it end one only sometimes (``Inc.``, ``U.S.``, ``etc.``, German ordinals like ``3.``)? Then
  the whole next word decides: a new sentence starts only with a word that typically starts one
  (``The``, ``It``, ``Then``...); ``U.S. Army`` and ``3. Mai`` go on.
- A lowercase next word always continues the sentence (``approx. two``, ``incl. tax``).

The lists are small on purpose: a missed boundary only merges two chunks (the next one comes at
the next sentence end, and ``max_chars`` caps the length), while a wrong one breaks the prosody.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LanguageRules:
    never_final: frozenset[str]  # lowercase, without the final period
    maybe_final: frozenset[str]
    sentence_starters: frozenset[str]  # lowercase
    months: frozenset[str] = frozenset()  # lowercase: "3. Mai" is a date, not an end
    ordinal_numbers: bool = False  # "3." is an ordinal (German): maybe final, not final


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_ENGLISH_NEVER = _words(
    """mr mrs ms dr prof st mt ft vs e.g i.e cf viz approx dept fig gen gov hon capt col lt sgt
    rev vol pp ca est jan feb mar apr jun jul aug sep sept oct nov dec incl excl min max avg
    misc govt assn bros univ ave blvd rd mgr dir pres sen rep"""
)
_ENGLISH_MAYBE = _words("etc inc ltd co corp jr sr no al a.m p.m u.s u.k u.n e.u ph.d llc plc")
_ENGLISH_STARTERS = _words(
    """the a an this that these those there here it its he she we they i you my our your his
    her their what when where why how who which whose if as at in on by for from to with after
    before during while since until but and or so then also however still yet now today
    tomorrow yesterday first second third next finally meanwhile instead otherwise besides
    thus therefore overall in fact for example please note let make take use try see check be
    do don't go get keep remember think consider yes no not all some many most each every both
    one two three some any once because although though unless whether why"""
)

_GERMAN_NEVER = _words(
    """bzw z.b d.h vgl ggf evtl inkl nr str hr fr ca bspw sog u.u o.ä z.t dr prof
    abs abb jh jhd mio mrd tel"""
)
_GERMAN_MAYBE = _words("usw etc u.a")
_GERMAN_STARTERS = _words(
    """der die das ein eine es er sie wir ich du ihr man dies diese dieser dieses dann danach
    aber und oder doch jedoch also so heute morgen gestern zuerst schließlich außerdem
    deshalb trotzdem wenn als weil obwohl da dort hier was wer wie wo warum wann bitte ja
    nein nicht im in am an auf mit für von zu nach bei"""
)
_GERMAN_MONTHS = _words(
    """januar jänner februar märz april mai juni juli august september oktober november
    dezember jan feb mär apr jun jul aug sep sept okt nov dez"""
)

_FRENCH_NEVER = _words("c.-à-d mme mlle mm m env ex av apr boul éd cf p.ex art chap vol")
_FRENCH_MAYBE = _words("etc cie")
_FRENCH_STARTERS = _words(
    """le la les un une des ce cet cette ces il elle ils elles on nous vous je tu c'est
    il y mais et ou donc puis ensuite alors enfin aujourd'hui demain hier si quand comme
    pour en dans sur avec après avant oui non"""
)

ENGLISH = LanguageRules(_ENGLISH_NEVER, _ENGLISH_MAYBE, _ENGLISH_STARTERS)
RULES = {
    "en": ENGLISH,
    "de": LanguageRules(
        _ENGLISH_NEVER | _GERMAN_NEVER,
        _GERMAN_MAYBE,
        _GERMAN_STARTERS,
        months=_GERMAN_MONTHS,
        ordinal_numbers=True,
    ),
    "fr": LanguageRules(_ENGLISH_NEVER | _FRENCH_NEVER, _FRENCH_MAYBE, _FRENCH_STARTERS),
}


def rules_for(language: str | None) -> LanguageRules:
    """The rules for a BCP 47 tag's language (``en-GB`` -> English); English when unknown, as
    the agent's answers are unless asked otherwise."""
    base = (language or "en").split("-")[0].lower()
    return RULES.get(base, ENGLISH)
