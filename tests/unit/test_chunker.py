"""The streaming chunker: a corpus of hard cases, latency behaviour, and its invariants."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from voicewire.abbreviations import ENGLISH
from voicewire.chunker import IncrementalSentenceChunker
from voicewire.speech_text import to_speech_text

# (what the model streams, the chunks a voice should speak). Read each expectation as a
# specification: these are the cases a regex like the seed's (?<=[.!?])\s+ gets wrong.
CORPUS = [
    ("Hello there. How are you?", ["Hello there.", "How are you?"]),
    ("One sentence without an ending", ["One sentence without an ending"]),
    ("First. Second. Third.", ["First.", "Second.", "Third."]),
    ("It works!", ["It works!"]),
    ("Is it done? Yes.", ["Is it done?", "Yes."]),
    ("Dr. Smith arrived. He sat down.", ["Dr. Smith arrived.", "He sat down."]),
    ("Mr. and Mrs. Jones left early. We stayed.", ["Mr. and Mrs. Jones left early.", "We stayed."]),
    (
        "Ms. Lee met Prof. Adams on St. James Street. They talked.",
        ["Ms. Lee met Prof. Adams on St. James Street.", "They talked."],
    ),
    (
        "Apples vs. oranges is the question. Answer it.",
        ["Apples vs. oranges is the question.", "Answer it."],
    ),
    ("Bring fruit, e.g. apples. Or not.", ["Bring fruit,", "e.g. apples.", "Or not."]),
    ("Use a tool, i.e. a hammer. Then stop.", ["Use a tool, i.e. a hammer.", "Then stop."]),
    ("We sell apples, pears, etc. and more.", ["We sell apples,", "pears, etc. and more."]),
    (
        "We sell apples, pears, etc. Then we close.",
        ["We sell apples,", "pears, etc.", "Then we close."],
    ),
    ("Acme Inc. makes anvils. Buy one.", ["Acme Inc. makes anvils.", "Buy one."]),
    ("She works for Acme Inc. in Ohio.", ["She works for Acme Inc. in Ohio."]),
    ("It starts at 9 a.m. every day.", ["It starts at 9 a.m. every day."]),
    ("It starts at 9 a.m. Be early.", ["It starts at 9 a.m.", "Be early."]),
    ("She has a Ph.D. in physics. Impressive.", ["She has a Ph.D. in physics.", "Impressive."]),
    ("See Fig. 3 for details. It is clear.", ["See Fig. 3 for details.", "It is clear."]),
    ("Born in Jan. 1990, she moved.", ["Born in Jan. 1990,", "she moved."]),
    ("Ask for No. 5 at the desk. Thanks.", ["Ask for No. 5 at the desk.", "Thanks."]),
    ("Was it approved? No. It was not.", ["Was it approved?", "No.", "It was not."]),
    ("Albert I. Douglas wrote it. Fine.", ["Albert I. Douglas wrote it.", "Fine."]),
    (
        "J. R. R. Tolkien wrote books. Many of them.",
        ["J. R. R. Tolkien wrote books.", "Many of them."],
    ),
    ("George W. Bush spoke. People listened.", ["George W. Bush spoke.", "People listened."]),
    ("It costs $29.99 today. Tomorrow more.", ["It costs $29.99 today.", "Tomorrow more."]),
    ("Pi is about 3.14159. Remember it.", ["Pi is about 3.14159.", "Remember it."]),
    ("Upgrade to v1.2.3 now. It is safer.", ["Upgrade to v1.2.3 now.", "It is safer."]),
    ("Meet at 10:30 tomorrow. Do not be late.", ["Meet at 10:30 tomorrow.", "Do not be late."]),
    ("The total was 1,234.56 dollars. Paid.", ["The total was 1,234.56 dollars.", "Paid."]),
    ("It grew 5.5% in 2024. Then it fell.", ["It grew 5.5% in 2024.", "Then it fell."]),
    ("We counted to 10. Then we stopped.", ["We counted to 10.", "Then we stopped."]),
    ("Version 2.0.1-beta is out. Try it.", ["Version 2.0.1-beta is out.", "Try it."]),
    ("1. First item\n2. Second item", ["1. First item", "2. Second item"]),
    (
        "Steps:\n1. Open the box.\n2. Take it out.",
        ["Steps:", "1. Open the box.", "2. Take it out."],
    ),
    ("10. Tenth item here", ["10. Tenth item here"]),
    (
        "Visit https://example.com/a.b?x=1. It helps.",
        ["Visit https://example.com/a.b?x=1.", "It helps."],
    ),
    ("Go to example.com. Or call us.", ["Go to example.com.", "Or call us."]),
    ("Mail bob@example.org. He answers fast.", ["Mail bob@example.org.", "He answers fast."]),
    ("Open report.pdf now. Then read it.", ["Open report.pdf now.", "Then read it."]),
    ("Wait... what happened? Nothing.", ["Wait...", "what happened?", "Nothing."]),
    ("Hmm… let me think. Okay.", ["Hmm…", "let me think.", "Okay."]),
    ("Really?! That is wild. Wow!!", ["Really?!", "That is wild.", "Wow!!"]),
    ('He said "Done." Then he left.', ['He said "Done."', "Then he left."]),
    ("She asked “Why?” Nobody knew.", ["She asked “Why?”", "Nobody knew."]),
    ("It was fine (mostly.) Then rain.", ["It was fine (mostly.)", "Then rain."]),
    ("They yelled 'Stop!' and ran.", ["They yelled 'Stop!' and ran."]),
    (
        "First paragraph here\n\nSecond paragraph here",
        ["First paragraph here", "Second paragraph here"],
    ),
    ("Line one\nLine two\nLine three", ["Line one", "Line two", "Line three"]),
    ("Ends with newline.\n", ["Ends with newline."]),
    ("終わりました。次に行きます！本当？", ["終わりました。", "次に行きます！", "本当？"]),
    ("「はい。」と言った。", ["「はい。」", "と言った。"]),
    ("你好。我很好！", ["你好。", "我很好！"]),
    ("完了!次へ", ["完了!", "次へ"]),
    ("**Bold** and _em_ and `code` here.", ["Bold and em and code here."]),
    ("## Results\nThe results are good.", ["Results", "The results are good."]),
    ("- first item\n- second item", ["first item", "second item"]),
    ("* one\n* two", ["one", "two"]),
    ("> A quote here. And more.", ["A quote here.", "And more."]),
    ("See [the docs](https://x.io/a). They help.", ["See the docs.", "They help."]),
    ("![a chart](chart.png) shows growth.", ["a chart shows growth."]),
    ("| Name | Age |\n|---|---|\n| Bob | 42 |", ["Name, Age", "Bob, 42"]),
    ("Above\n\n---\n\nBelow", ["Above", "Below"]),
    ("```python\nx = 1\n```\nDone.", ["x = 1", "Done."]),
    ("Use snake_case names. And 2 * 3 is 6.", ["Use snake_case names.", "And 2 * 3 is 6."]),
    ("~~Old~~ new price. Buy now.", ["new price.", "Buy now."]),
    (
        "Sure, here is what I found about the weather today.",
        ["Sure, here is what I found about the weather today."],
    ),
    ("Hi, yes. Okay.", ["Hi, yes.", "Okay."]),
    (
        "Well - it depends on the day. Usually fine.",
        ["Well - it depends on the day.", "Usually fine."],
    ),
    (
        "The answer is simple: use a cache. It works.",
        ["The answer is simple:", "use a cache.", "It works."],
    ),
    (
        "Note; this is important, really. Listen.",
        ["Note; this is important,", "really.", "Listen."],
    ),
    ("And then there was nothing", ["And then there was nothing"]),
    ("Trailing abbreviation Dr.", ["Trailing abbreviation Dr."]),
    ("Ends with a number 3.", ["Ends with a number 3."]),
    # A maybe-final abbreviation: the whole next word decides.
    ("He joined the U.S. Army in May. It paid.", ["He joined the U.S. Army in May.", "It paid."]),
    ("She lived in the U.S. The move was hard.", ["She lived in the U.S.", "The move was hard."]),
    ("The U.K. Government agreed. We cheered.", ["The U.K. Government agreed.", "We cheered."]),
    (
        "Apple Inc. CEO Tim Cook spoke. We listened.",
        ["Apple Inc. CEO Tim Cook spoke.", "We listened."],
    ),
    ("Globex Corp. Headquarters moved. Fine.", ["Globex Corp. Headquarters moved.", "Fine."]),
    ("Try No. Seven today. Done.", ["Try No. Seven today.", "Done."]),
    # A quoted question or exclamation the sentence continues after.
    ('"Really?" and she laughed. Then left.', ['"Really?" and she laughed.', "Then left."]),
    ("'Ready?' she asked. He nodded.", ["'Ready?' she asked.", "He nodded."]),
    ('"Done." he said. Fine.', ['"Done." he said.', "Fine."]),
    ("He shouted “Stop!” Nobody moved.", ["He shouted “Stop!”", "Nobody moved."]),
    # Unknown abbreviations before a lowercase word.
    ("It costs approx. two dollars. Cheap.", ["It costs approx. two dollars.", "Cheap."]),
    ("Prices incl. tax are shown. Good.", ["Prices incl. tax are shown.", "Good."]),
    ("Use the std. library here. Done.", ["Use the std. library here.", "Done."]),
    ("Cats vs. dogs again. Fine.", ["Cats vs. dogs again.", "Fine."]),
    # Other scripts' sentence marks.
    ("यह पहला वाक्य है। यह दूसरा है।", ["यह पहला वाक्य है।", "यह दूसरा है।"]),
    ("श्लोक एक॥ श्लोक दो॥", ["श्लोक एक॥", "श्लोक दो॥"]),
    ("هل أنت بخير؟ نعم.", ["هل أنت بخير؟", "نعم."]),
    ("یہ پہلا ہے۔ یہ دوسرا ہے۔", ["یہ پہلا ہے۔", "یہ دوسرا ہے۔"]),
    ("終わり．次です｡最後", ["終わり．", "次です｡", "最後"]),
    # Emoji are not spoken, and never make a chunk of their own; struck text is not spoken.
    ("Great job! 🎉 Let's go.", ["Great job!", "Let's go."]),
    ("🚀 Launch is today. Be ready.", ["Launch is today.", "Be ready."]),
    ("All done ✅\nNext step.", ["All done", "Next step."]),
    ("Yes! 🎉! Fine.", ["Yes!", "Fine."]),
    ("Family 👨‍👩‍👧 time. Good.", ["Family time.", "Good."]),
    ("The price is ~~$20~~ $15 now. Buy.", ["The price is $15 now.", "Buy."]),
    ("A ~~wrong~~ line\nand ~~open", ["A line", "and open"]),
]

# The same rules with the voice's language: German and French abbreviations and dates.
LANGUAGE_CORPUS = [
    (
        "de",
        "Das gilt z.B. Hunde und Katzen. Dann mehr.",
        ["Das gilt z.B. Hunde und Katzen.", "Dann mehr."],
    ),
    ("de", "Am 3. Mai kommt er. Dann gehen wir.", ["Am 3. Mai kommt er.", "Dann gehen wir."]),
    ("de", "Er oder bzw. Sie hat Recht. Gut.", ["Er oder bzw. Sie hat Recht.", "Gut."]),
    ("de", "Wir kamen 2020. Danach blieb es ruhig.", ["Wir kamen 2020.", "Danach blieb es ruhig."]),
    (
        "de",
        "Der 2. Platz ging an Anna. Sie jubelte.",
        ["Der 2. Platz ging an Anna.", "Sie jubelte."],
    ),
    (
        "fr",
        "Trois villes c.-à-d. Paris et Lyon. Voilà.",
        ["Trois villes c.-à-d. Paris et Lyon.", "Voilà."],
    ),
    ("fr", "M. Dupont est là. Il attend.", ["M. Dupont est là.", "Il attend."]),
    ("en-GB", "Am 3. Mai kommt er.", ["Am 3.", "Mai kommt er."]),  # English rules: a number ends
]


def chunk_all(text: str, cuts: list[int] | None = None, **options: object) -> list[str]:
    """Feed ``text`` in pieces cut at ``cuts`` (or whole), then flush."""
    chunker = IncrementalSentenceChunker(**options)  # type: ignore[arg-type]
    chunks: list[str] = []
    previous = 0
    for cut in [*sorted(set(cuts or [])), len(text)]:
        chunks += chunker.feed(text[previous:cut])
        previous = cut
    return chunks + chunker.finish()


@pytest.mark.parametrize(("text", "expected"), CORPUS, ids=[text[:40] for text, _ in CORPUS])
def test_corpus(text, expected):
    assert chunk_all(text) == expected


@pytest.mark.parametrize(("text", "expected"), CORPUS, ids=[text[:40] for text, _ in CORPUS])
def test_corpus_fed_one_character_at_a_time(text, expected):
    assert chunk_all(text, list(range(1, len(text)))) == expected


def test_the_corpus_is_big_enough():
    assert len(CORPUS) >= 60


@pytest.mark.parametrize(
    ("language", "text", "expected"),
    LANGUAGE_CORPUS,
    ids=[f"{language}:{text[:30]}" for language, text, _ in LANGUAGE_CORPUS],
)
def test_language_corpus(language, text, expected):
    assert chunk_all(text, language=language, first_clause_min_chars=None) == expected
    cuts = list(range(len(text)))
    assert chunk_all(text, cuts, language=language, first_clause_min_chars=None) == expected


def test_a_sentence_is_emitted_at_the_first_letter_after_its_end():
    chunker = IncrementalSentenceChunker()
    assert chunker.feed("Hello there.") == []  # could still be "..." or a closing quote
    assert chunker.feed(" ") == []  # "approx. two" goes on: the next letter decides
    assert chunker.feed("N") == ["Hello there."]  # an LLM token carries " N..." whole
    assert chunker.feed("ext one") == []
    assert chunker.flush() == "Next one"


def test_a_quoted_question_waits_for_the_next_letter_a_bare_one_does_not():
    chunker = IncrementalSentenceChunker()
    assert chunker.feed('"Ready?" ') == []
    assert chunker.feed("s") == []  # she asked: the sentence goes on
    assert chunker.feed("he asked. Is it? ") == ['"Ready?" she asked.', "Is it?"]


def test_cjk_needs_no_space_and_question_runs_stay_whole():
    chunker = IncrementalSentenceChunker()
    assert chunker.feed("\u7d42\u308f\u308a\u3002") == []
    assert chunker.feed("\u6b21") == ["\u7d42\u308f\u308a\u3002"]
    assert chunker.feed("?") == []
    assert chunker.feed("!") == []
    assert chunker.feed(" ") == ["\u6b21?!"]


def test_an_ambiguous_abbreviation_waits_for_the_whole_next_word():
    chunker = IncrementalSentenceChunker()
    assert chunker.feed("Apples and pears etc. ") == []
    assert chunker.feed("Th") == []  # "Thai pears" or "Then"?
    assert chunker.feed("en ") == ["Apples and pears etc."]


def test_the_word_limit_never_cuts_inside_initials_or_after_a_title():
    text = "Books by the writer J. R. R. Tolkien sell well."
    assert chunk_all(text, first_max_words=6) == [
        "Books by the writer J. R. R. Tolkien",
        "sell well.",
    ]
    text = "We met with the famous Dr. Smith yesterday."
    assert chunk_all(text, first_max_words=6) == ["We met with the famous Dr. Smith", "yesterday."]


def test_first_clause_is_emitted_early_once_long_enough():
    chunker = IncrementalSentenceChunker(first_clause_min_chars=10)
    assert chunker.feed("Hi, ") == []  # too short to be worth a chunk of its own
    assert chunker.feed("sure thing, ") == ["Hi, sure thing,"]
    assert chunker.feed("and then, later, more.") == []  # only the first chunk is cut early
    assert chunker.flush() == "and then, later, more."


def test_first_chunk_can_end_after_a_word_limit():
    chunker = IncrementalSentenceChunker(first_max_words=4)
    assert chunker.feed("Voice agents feel slow") == []
    assert chunker.feed(" when") == ["Voice agents feel slow"]  # the space ends word four
    assert chunker.feed(" they wait for the whole answer. Then") == [
        "when they wait for the whole answer."
    ]  # only the first chunk is cut by words


def test_first_clause_cut_can_be_turned_off():
    text = "The answer is simple: use a cache. It works."
    assert chunk_all(text, first_clause_min_chars=None) == [
        "The answer is simple: use a cache.",
        "It works.",
    ]


def test_a_long_run_without_a_boundary_is_cut_at_a_word():
    text = " ".join(["word"] * 100) + "."
    chunks = chunk_all(text, max_chars=60)
    assert all(len(chunk) <= 60 for chunk in chunks)
    assert " ".join(chunks).split() == text.split()
    assert len(chunks) > 5


def test_flush_returns_none_when_nothing_is_left_and_resets():
    chunker = IncrementalSentenceChunker()
    assert chunker.feed("Done. Yes") == ["Done."]
    assert chunker.flush() == "Yes"
    assert chunker.flush() is None
    # A new stream: its first clause may be cut early again.
    assert chunker.feed("Right, so this is new, ") == ["Right, so this is new,"]


def test_finish_cuts_what_only_the_end_could_settle():
    # A table row is settled only at its line's end; at the end of the stream it still gets cut.
    chunker = IncrementalSentenceChunker(max_chars=20)
    assert chunker.feed("| a | b | Hello Hello Hello") == []
    assert chunker.finish() == ["a, b, Hello Hello", "Hello"]


def test_max_chars_has_a_floor():
    with pytest.raises(ValueError, match="max_chars"):
        IncrementalSentenceChunker(max_chars=5)


# --- invariants, property-tested -------------------------------------------------------------

TOKENS = st.sampled_from(
    [
        "Hello",
        "world.",
        "Dr.",
        "Smith",
        "$29.99",
        "3.5",
        "v1.2.3",
        "10:30",
        "a.m.",
        "etc.",
        "U.S.",
        "e.g.",
        "I.",
        "Then",
        "yes!",
        "why?!",
        "wait...",
        "\u2026",
        '"Done."',
        "(ok.)",
        "report.pdf",
        "x.io/a?b=1.",
        "bob@x.org.",
        "**bold**",
        "_em_",
        "`code`",
        "[link](http://x.io)",
        "\n",
        "\n\n",
        "\n# ",
        "\n- ",
        "\n1. ",
        "\n| a | b |",
        "\n---\n",
        "\u3002",
        "\u6b21",
        "\uff01",
        ",",
        ";",
        ":",
        " - ",
        "\u2014",
        "snake_case",
        "2 * 3",
        "No.",
        "5",
        "U.S.",
        "Army",
        "approx.",
        "two",
        "'Ready?'",
        "she",
        "\u0964",
        "\u061f",
        "\uff0e",
        "\U0001f389",
        "\U0001f44d\U0001f3fd",
        "~~old~~",
        "~~",
        "J.",
        "R.",
        "Tolkien",
        "Inc.",
    ]
)
TEXTS = st.lists(TOKENS, min_size=1, max_size=40).map(" ".join)
CORPUS_TEXTS = st.sampled_from([text for text, _ in CORPUS])


@settings(max_examples=300)
@given(st.one_of(TEXTS, CORPUS_TEXTS), st.data())
def test_chunks_do_not_depend_on_fragmentation(text, data):
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    assert chunk_all(text, cuts) == chunk_all(text)


@settings(max_examples=300)
@given(st.one_of(TEXTS, CORPUS_TEXTS), st.data())
def test_joined_chunks_are_the_speech_text_word_for_word(text, data):
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    chunks, speech = chunk_all(text, cuts), to_speech_text(text)
    # Every character that says something, in order (CJK sentences have no space between them;
    # a chunk of punctuation alone is not sent)...
    assert _said(" ".join(chunks)) == _said(speech)
    # ...and every word kept whole where words are spaced.
    if text.isascii():
        assert _words(" ".join(chunks)) == _words(speech)
    assert all(chunk and chunk == chunk.strip() for chunk in chunks)
    assert all(any(char.isalnum() for char in chunk) for chunk in chunks)


def _said(text: str) -> str:
    """The characters of every space-separated piece that holds a letter or a digit."""
    return "".join(_words(text))


def _words(text: str) -> list[str]:
    return [word for word in text.split() if any(char.isalnum() for char in word)]


@given(TEXTS, st.integers(20, 80))
def test_no_chunk_exceeds_max_chars(text, max_chars):
    assert all(len(chunk) <= max_chars for chunk in chunk_all(text, max_chars=max_chars))


@settings(max_examples=200)
@given(st.one_of(TEXTS, CORPUS_TEXTS), st.integers(1, 8), st.data())
def test_the_word_limit_keeps_the_invariants(text, words, data):
    cuts = data.draw(st.lists(st.integers(0, len(text)), max_size=30))
    chunks = chunk_all(text, cuts, first_max_words=words)
    assert chunks == chunk_all(text, first_max_words=words)
    assert _said(" ".join(chunks)) == _said(to_speech_text(text))
    if chunks and "\n" not in text:
        first = chunks[0].split()
        # Past the limit only over words that bind to the next: initials and titles.
        binding = all(_binds(word) for word in first[words - 1 : -1])
        assert len(first) <= words or binding or chunks[0] == " ".join(chunks)


def _binds(word: str) -> bool:
    token = word.removesuffix(".").lstrip("\"'“‘([{«「『（")
    return word.endswith(".") and (len(token) == 1 or token.lower() in ENGLISH.never_final)
