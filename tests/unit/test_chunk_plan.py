"""The speech server's chunk plan: a short first chunk, then growing ones, no word lost."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from speech_server.chunk_plan import DEFAULT_POLICY, pause_after, plan_chunks

SEED_TEXT = (
    "Kokoro is an open-weight text-to-speech model with 82 million parameters. "
    "Despite its lightweight architecture, it delivers comparable quality to larger models. "
    "It is significantly faster and more cost-efficient than they are. "
    "With Apache-licensed weights, it can be deployed anywhere."
)


def test_first_chunk_ends_at_the_first_clause_after_the_minimum():
    assert plan_chunks("Hello there, this is voicewire speaking to you.")[0] == "Hello there,"
    # "Hi," is shorter than the minimum: the cut waits for the next clause mark.
    assert (
        plan_chunks("Hi, well, my friend; we should talk about it soon.")[0]
        == "Hi, well, my friend;"
    )


def test_a_short_first_sentence_is_the_first_chunk():
    assert plan_chunks("Sure! Here is the plan for today.") == [
        "Sure!",
        "Here is the plan for today.",
    ]


def test_first_chunk_is_cut_at_the_word_limit_without_a_clause_mark():
    first = plan_chunks(SEED_TEXT)[0]
    assert len(first.split()) == DEFAULT_POLICY.first_max_words
    assert SEED_TEXT.startswith(first)


def test_dashes_and_colons_are_clause_marks():
    assert plan_chunks("One more thing - the deadline moved to Friday afternoon.")[0] == (
        "One more thing -"
    )
    assert plan_chunks("Here is the answer: it depends on the weather.")[0] == (
        "Here is the answer:"
    )


def test_abbreviations_and_numbers_do_not_end_the_first_sentence():
    chunks = plan_chunks("Dr. Smith paid $29.99. Then he left.")
    assert chunks[0] == "Dr. Smith paid $29.99."


def test_no_stub_is_left_to_be_spoken_alone():
    # Cutting "Hello there," would leave "he said." (8 characters): it stays with its clause.
    assert plan_chunks("Hello there, he said.") == ["Hello there, he said."]


def test_later_chunks_grow_within_the_budget():
    chunks = plan_chunks(SEED_TEXT * 3)
    assert len(chunks[0]) < 50
    for previous, chunk in itertools.pairwise(chunks):
        budget = max(DEFAULT_POLICY.later_min_chars, int(len(previous) * DEFAULT_POLICY.growth))
        assert len(chunk) <= budget + DEFAULT_POLICY.min_tail_chars
    assert max(len(chunk) for chunk in chunks) <= DEFAULT_POLICY.max_chars
    assert len(chunks[-1]) > len(chunks[0])


def test_without_fast_start_the_text_is_cut_only_at_line_breaks():
    assert plan_chunks(SEED_TEXT, fast_start=False) == [SEED_TEXT]
    assert plan_chunks("One paragraph.\n\nAnother one.", fast_start=False) == [
        "One paragraph.",
        "Another one.",
    ]


def test_whitespace_only_text_has_no_chunks():
    assert plan_chunks(" \n\t ") == []


def test_pause_follows_the_last_mark():
    assert pause_after("Done.") == 0.25
    assert pause_after('He said "done."') == 0.25
    assert pause_after("First,") == 0.1
    assert pause_after("cut between") == 0.0


WORDS = st.sampled_from(
    ["Hello", "there,", "world.", "Dr.", "3.5", "$29.99", "yes!", "no?", "-", "and", "so:", "wait;"]
)


@given(st.lists(WORDS, min_size=1, max_size=80), st.booleans())
def test_every_word_is_spoken_once_in_order(words, fast_start):
    text = " ".join(words)
    chunks = plan_chunks(text, fast_start=fast_start)
    assert " ".join(chunks).split() == text.split()
    assert all(chunk.strip() == chunk and chunk for chunk in chunks)
