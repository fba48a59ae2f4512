"""The end-of-turn rule a client applies to final results (``voicewire.speech_in.end_of_turn``)."""

from __future__ import annotations

import pytest

from voicewire.speech_in.end_of_turn import EndOfTurn, sounds_complete


@pytest.mark.parametrize(
    "text",
    [
        "What time is it in Tokyo?",
        "Turn off the lights in the living room.",
        "Set a timer for 10 minutes!",
        'He said "hello."',
    ],
)
def test_a_closed_sentence_reads_as_done(text):
    assert sounds_complete(text)
    assert EndOfTurn().wait_ms(text) == 250


@pytest.mark.parametrize(
    "text",
    [
        "Turn on the lights",  # no closing mark: the recognizer heard a pause, not an end
        "Book a table for two and.",  # a trailing word that announces more
        "What is the capital of the.",
        "I'd like to, um.",
        "",
        "...",
    ],
)
def test_an_open_sentence_waits_longer(text):
    assert not sounds_complete(text)
    assert EndOfTurn().wait_ms(text) == 1500


def test_the_waits_are_settings():
    rule = EndOfTurn(complete_ms=100, incomplete_ms=900)
    assert (rule.wait_ms("Done."), rule.wait_ms("And then")) == (100, 900)
