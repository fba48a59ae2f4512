"""The local Transcribe endpoint's logic without a socket: hypotheses into Transcribe's
results, the request's parameters into AWS's validation errors, a pcm chunk's checks, and the
recognizer test double's faithfulness to the protocol."""

from __future__ import annotations

import struct
from itertools import count

import pytest

from tests.recognizer_double import FixedWordsRecognizer
from voicewire_tools.local_stack.sigv4_verifier import AccessKey
from voicewire_tools.local_stack.speech_recognizer import (
    Hypothesis,
    RecognizerProtocolError,
    TranscriptResults,
    Word,
)
from voicewire_tools.local_stack.transcribe_streaming import (
    IDLE_TIMEOUT,
    LocalTranscribeStreaming,
    StreamFailure,
    check_pcm_chunk,
    parse_request,
)

LANGUAGES = ("en-US", "en-GB")


def words(*spoken: tuple[str, float, float]) -> tuple[Word, ...]:
    return tuple(Word(text, start, end) for text, start, end in spoken)


def numbered_ids() -> TranscriptResults:
    ids = count(1)
    return TranscriptResults(new_result_id=lambda: f"result-{next(ids)}")


# --- results --------------------------------------------------------------------------------


def test_partial_results_repeat_and_grow_under_one_id_until_the_final_one():
    results = numbered_ids()
    first = results.result(Hypothesis(0, words(("What", 0.1, 0.3)), final=False))
    second = results.result(
        Hypothesis(0, words(("What", 0.1, 0.3), ("time", 0.35, 0.6)), final=False)
    )
    final = results.result(
        Hypothesis(0, words(("What", 0.1, 0.3), ("time", 0.35, 0.6), ("now?", 0.7, 0.95)), True)
    )
    assert [r.result_id for r in (first, second, final)] == ["result-1"] * 3
    assert [r.is_partial for r in (first, second, final)] == [True, True, False]
    assert [r.alternatives[0].transcript for r in (first, second, final)] == [
        "What",
        "What time",
        "What time now?",
    ]
    assert (final.start_time, final.end_time) == (0.1, 0.95)
    items = final.alternatives[0].items
    assert [(i.type, i.content, i.start_time, i.end_time) for i in items] == [
        ("pronunciation", "What", 0.1, 0.3),
        ("pronunciation", "time", 0.35, 0.6),
        ("pronunciation", "now", 0.7, 0.95),
        ("punctuation", "?", 0.95, 0.95),
    ]
    assert all(item.stable is None for item in items)  # no stabilization asked for
    following = results.result(Hypothesis(1, words(("Thanks.", 1.5, 1.9)), final=True))
    assert following.result_id == "result-2"


def test_times_are_seconds_to_the_millisecond_and_punctuation_is_split_off():
    result = numbered_ids().result(
        Hypothesis(
            0,
            (Word("Dr.", 0.12345, 0.45678, confidence=0.9), Word("...", 0.5, 0.5)),
            final=True,
        )
    )
    items = result.alternatives[0].items
    assert [(i.type, i.content, i.start_time, i.end_time) for i in items] == [
        ("pronunciation", "Dr", 0.123, 0.457),
        ("punctuation", ".", 0.457, 0.457),
        ("punctuation", ".", 0.5, 0.5),
        ("punctuation", ".", 0.5, 0.5),
        ("punctuation", ".", 0.5, 0.5),
    ]
    assert items[0].confidence == 0.9
    assert result.alternatives[0].transcript == "Dr. ..."


def test_stabilization_marks_the_words_the_recognizer_promised():
    results = TranscriptResults(stabilize=True)
    partial = results.result(
        Hypothesis(0, words(("It", 0, 0.2), ("is", 0.2, 0.4), ("ten", 0.4, 0.6)), False, 2)
    )
    assert [item.stable for item in partial.alternatives[0].items] == [True, True, False]
    final = results.result(
        Hypothesis(0, words(("It", 0, 0.2), ("is", 0.2, 0.4), ("ten.", 0.4, 0.6)), True, 2)
    )
    assert all(item.stable for item in final.alternatives[0].items)


def test_a_segment_without_words_says_nothing_and_an_empty_final_ends_its_result():
    results = numbered_ids()
    assert results.result(Hypothesis(0, (), final=False)) is None
    assert results.result(Hypothesis(0, (), final=True)) is None
    results.result(Hypothesis(1, words(("Hm", 0.1, 0.2)), final=False))
    ended = results.result(Hypothesis(1, (), final=True))
    assert (ended.result_id, ended.is_partial, ended.alternatives[0].transcript) == (
        "result-1",
        False,
        "",
    )


@pytest.mark.parametrize(
    ("hypotheses", "says"),
    [
        (
            [Hypothesis(0, words(("a", 0, 1)), True), Hypothesis(0, words(("a", 0, 1)), True)],
            "already final",
        ),
        (
            [
                Hypothesis(0, words(("a", 0, 1), ("b", 1, 2)), False, stable_words=1),
                Hypothesis(0, words(("x", 0, 1), ("b", 1, 2)), False),
            ],
            "changed words it had said were stable",
        ),
        ([Hypothesis(0, words(("a", 1, 2), ("b", 0.5, 3)), False)], "order spoken"),
        ([Hypothesis(0, words(("a", 2, 1)), False)], "0 <= start <= end"),
        ([Hypothesis(0, words(("a b", 0, 1)), False)], "one non-empty token"),
        ([Hypothesis(0, words(("a", 0, 1)), False, stable_words=2)], "stable_words is 2"),
    ],
)
def test_a_recognizer_breaking_the_protocol_is_caught(hypotheses, says):
    results = TranscriptResults(stabilize=True)
    with pytest.raises(RecognizerProtocolError, match=says):
        for hypothesis in hypotheses:
            results.result(hypothesis)


# --- the request's parameters ---------------------------------------------------------------


def failure(parameters: dict[str, str]) -> StreamFailure:
    with pytest.raises(StreamFailure) as failed:
        parse_request(parameters, LANGUAGES)
    assert failed.value.exception_type == "BadRequestException"
    return failed.value


GOOD = {"language-code": "en-US", "media-encoding": "pcm", "sample-rate": "16000"}


def test_a_good_request_parses_and_gets_a_session_id():
    request = parse_request(GOOD, LANGUAGES)
    assert (request.language_code, request.sample_rate, request.stabilize) == (
        "en-US",
        16000,
        False,
    )
    assert len(request.session_id) == 36
    stable = parse_request(GOOD | {"enable-partial-results-stabilization": "true"}, LANGUAGES)
    assert (stable.stabilize, stable.stability) == (True, "high")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"language-code": "fr-FR"},
            "1 validation error detected: Value 'fr-FR' at 'languageCode' failed to satisfy "
            "constraint: Member must satisfy enum value set: [en-GB, en-US]",
        ),
        (
            {"sample-rate": "7000"},
            "1 validation error detected: Value '7000' at 'mediaSampleRateHertz' failed to "
            "satisfy constraint: Member must have value greater than or equal to 8000",
        ),
        (
            {"sample-rate": "96000"},
            "1 validation error detected: Value '96000' at 'mediaSampleRateHertz' failed to "
            "satisfy constraint: Member must have value less than or equal to 48000",
        ),
        (
            {"media-encoding": "mp3"},
            "1 validation error detected: Value 'mp3' at 'mediaEncoding' failed to satisfy "
            "constraint: Member must satisfy enum value set: [pcm, ogg-opus, flac]",
        ),
        (
            {"session-id": "abc"},
            "1 validation error detected: Value 'abc' at 'sessionId' failed to satisfy "
            "constraint: Member must satisfy regular expression pattern: ",
        ),
    ],
)
def test_invalid_parameters_get_aws_validation_messages(changes, message):
    assert failure(GOOD | changes).message.startswith(message)


def test_missing_parameters_are_counted_and_named():
    assert failure({"media-encoding": "pcm"}).message == (
        "2 validation errors detected: Value null at 'languageCode' failed to satisfy "
        "constraint: Member must not be null; Value null at 'mediaSampleRateHertz' failed to "
        "satisfy constraint: Member must not be null"
    )
    assert "must be an integer" in failure(GOOD | {"sample-rate": "16k"}).message


def test_what_aws_accepts_but_the_local_endpoint_does_not_do_is_refused_by_name():
    assert "decodes pcm only" in failure(GOOD | {"media-encoding": "ogg-opus"}).message
    assert "'vocabulary-name'" in failure(GOOD | {"vocabulary-name": "mine"}).message
    assert "'identify-language'" in failure(GOOD | {"identify-language": "true"}).message
    assert parse_request(GOOD | {"show-speaker-label": "false"}, LANGUAGES)


# --- a pcm chunk --------------------------------------------------------------------------


def wav_header(rate: int) -> bytes:
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return b"RIFF" + struct.pack("<I", 36) + b"WAVE" + b"fmt " + struct.pack("<I", 16) + fmt


def test_a_pcm_chunk_must_be_what_the_url_announced():
    check_pcm_chunk(b"\x00\x00" * 1600, 16_000)  # 100 ms
    check_pcm_chunk(b"\x00\x00" * 16_000, 16_000)  # 1 s: the most one event may carry
    with pytest.raises(StreamFailure, match="WAV header at 48000 Hz, but the stream's sample-rate"):
        check_pcm_chunk(wav_header(48_000) + b"\x00\x00" * 100, 16_000)
    with pytest.raises(StreamFailure, match=r"WAV header: media-encoding pcm is raw"):
        check_pcm_chunk(wav_header(16_000) + b"\x00\x00" * 100, 16_000)
    with pytest.raises(StreamFailure, match="not whole 16-bit samples"):
        check_pcm_chunk(b"\x00" * 3, 16_000)
    with pytest.raises(StreamFailure, match=r"1\.00 s of audio at 8000 Hz.*check the sample-rate"):
        check_pcm_chunk(b"\x00\x00" * 8_001, 8_000)


def test_the_default_idle_timeout_is_transcribes_15_seconds():
    endpoint = LocalTranscribeStreaming.accepting(FixedWordsRecognizer(), [AccessKey.issue()])
    assert endpoint.idle_timeout == IDLE_TIMEOUT == 15.0
    assert endpoint.verifier.max_expires == 300
    assert endpoint.verifier.verifier.service == "transcribe"


# --- the recognizer test double -------------------------------------------------------------


def test_the_recognizer_double_hears_its_words_as_the_audio_reaches_them():
    session = FixedWordsRecognizer(words=("a", "b", "c"), seconds_per_word=0.5).open(
        language_code="en-US", sample_rate=8_000
    )
    second = b"\x00\x00" * 8_000
    assert session.feed(second[:4_000]) == []  # 0.25 s: nothing heard yet
    (first,) = session.feed(second[4_000:])  # 1 s: two words
    assert ([w.text for w in first.words], first.final, first.stable_words) == (
        ["a", "b"],
        False,
        1,
    )
    assert first.words[1].end == 1.0
    (last,) = session.feed(second)
    assert ([w.text for w in last.words], last.final) == (["a", "b", "c"], True)
    assert session.finish() == []
    session.close()
    assert session.closed
