"""``RecognizerInBackground``: a recognizer loading on its own thread. A stream waits for the
load (or is told why it failed); a stack stopping waits for a load under way to end, since a
process that exits inside CTranslate2's model constructor aborts instead of exiting 0."""

from __future__ import annotations

import threading

import pytest

from tests.recognizer_double import FixedWordsRecognizer
from voicewire_tools.local_stack.speech_recognizer import (
    RecognizerInBackground,
    RecognizerProtocolError,
)

LANGUAGES = frozenset({"en-US"})


def test_a_stream_waits_for_the_load_and_gets_the_loaded_recognizer():
    release = threading.Event()
    recognizer = FixedWordsRecognizer()

    def load() -> FixedWordsRecognizer:
        release.wait(10)
        return recognizer

    background = RecognizerInBackground(load, LANGUAGES)
    with pytest.raises(TimeoutError):
        background.wait(0.05)
    release.set()
    assert background.wait(10) is recognizer


def test_a_failed_load_fails_every_stream_with_its_error():
    def load() -> FixedWordsRecognizer:
        raise OSError("model.bin is truncated")

    background = RecognizerInBackground(load, LANGUAGES)
    for _ in range(2):
        with pytest.raises(RecognizerProtocolError, match=r"model\.bin is truncated"):
            background.open(language_code="en-US", sample_rate=16_000)


def test_settle_waits_for_a_load_under_way_and_says_whether_it_ended():
    release = threading.Event()
    ended = threading.Event()

    def load() -> FixedWordsRecognizer:
        release.wait(10)
        ended.set()
        return FixedWordsRecognizer()

    background = RecognizerInBackground(load, LANGUAGES)
    assert background.settle(0.05) is False
    assert not ended.is_set()
    threading.Timer(0.2, release.set).start()
    assert background.settle(10) is True
    assert ended.is_set()
    assert background.settle(0) is True  # long done: at once
