"""Word timings (issue 28): when each written word is spoken, from the model's own duration
predictor, checked against the audio itself.

The unit tests pin the arithmetic (runs, the plan of written words over them, batches); the real
engine's tests hold the timings against the PCM: the words are the text's words, a sentence's
silence lies where the timings say, the last word ends where the audio does, and the streamed
vocoder, ``speed`` and the server's trims, pauses and chunks move no word. The torch engine's
path runs with its stand-in (tests/torch_standin.py): real KPipeline results carry the phonemes
and ``pred_dur`` the stand-in gives.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.sync.client import connect

from speech_server.synthesis import (
    FRAME_SECONDS,
    AudioPiece,
    StreamedTrim,
    Synthesizer,
    WordsAhead,
)
from speech_server.word_timings import (
    SAMPLES_PER_DURATION,
    PhonemeRun,
    SpokenWord,
    WordTimer,
    fed_phonemes,
    phoneme_runs,
    runs_of,
    words_over_runs,
    written_words,
)
from voicewire.speech_protocol import SAMPLE_RATE

SENTENCES = "Hello there, my friend. The price is $29.99 today. Call Dr. Smith at noon."
QUIET = 0.01  # the synthesis layer's silence threshold
BOUNDARY_TOLERANCE = int(0.1 * SAMPLE_RATE)  # 100 ms, the bound


# --- the arithmetic ----------------------------------------------------------------------------


def test_runs_take_their_samples_from_the_durations_after_the_leading_pad():
    # "hi, yo": runs "hi" and "yo"; the comma and the space are boundaries; pads 3 and 4 units.
    durations = [3, 2, 2, 1, 1, 2, 2, 4]
    runs = phoneme_runs("hi, yo", durations, offset=100)
    unit = SAMPLES_PER_DURATION
    assert runs == [
        PhonemeRun("hi", 100 + 3 * unit, 100 + 7 * unit),
        PhonemeRun("yo", 100 + 9 * unit, 100 + 13 * unit),
    ]
    with pytest.raises(ValueError, match="durations for 6 phoneme tokens"):
        phoneme_runs("hi, yo", durations[:-1])


def test_a_word_spoken_as_several_runs_takes_them_all():
    # "$5" alone is said "five dollars": two runs; "now" one.
    phonemes = {"$5": "faɪv dɑlɚz", "now": "naʊ"}
    plan = words_over_runs(["$5", "now"], ["faɪv", "dɑlɚz", "naʊ"], phonemes.__getitem__)
    assert [(w.text, w.first, w.stop) for w in plan] == [("$5", 0, 2), ("now", 2, 3)]


def test_a_word_said_otherwise_in_context_is_aligned_by_its_phonemes():
    # Alone "the" counts two runs (a made-up phonemizer's quirk); in context it was one: the
    # counts do not add up, and the words take the runs their phonemes match.
    alone = {"the": "ðə ðə", "cat": "kæt", "sat": "sæt"}
    plan = words_over_runs(["the", "cat", "sat"], ["ðə", "kæt", "sæt"], alone.__getitem__)
    assert [(w.text, w.first, w.stop) for w in plan] == [
        ("the", 0, 1),
        ("cat", 1, 2),
        ("sat", 2, 3),
    ]


def test_the_timer_gives_each_word_once_its_last_run_is_timed():
    plan = words_over_runs(["a", "b c"], ["a", "b", "c"], lambda word: word)
    timer = WordTimer(plan)
    assert timer.add([PhonemeRun("a", 0, 10), PhonemeRun("b", 12, 20)]) == [SpokenWord("a", 0, 10)]
    assert timer.add([PhonemeRun("c", 25, 30)]) == [SpokenWord("b c", 12, 30)]
    assert timer.add([]) == []


def test_only_the_phonemes_the_model_was_fed_are_counted():
    assert fed_phonemes("hə\u0303lo", set("həlo")) == "həlo"
    assert runs_of("a b,c") == ["a", "b", "c"]
    assert written_words("  Dr. Smith,\nhi ") == ["Dr.", "Smith,", "hi"]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 20000), min_size=1, max_size=8),
    st.integers(0, 3000),
)
def test_the_trim_says_where_the_kept_audio_began(cuts, onset):
    # A tone after ``onset`` quiet samples, pushed in arbitrary pieces: ``cut`` is the sample of
    # the original where the kept audio starts, as the whole trim cuts it.
    audio = np.zeros(onset + 4800, np.float32)
    audio[onset:] = 0.5
    trim = StreamedTrim(SAMPLE_RATE)
    kept, at = [], 0
    for size in [*cuts, len(audio)]:
        kept.append(trim.push(audio[at : at + size]))
        at += size
        if at >= len(audio):
            break
    assert trim.speaking
    assert trim.cut == max(0, onset - trim.pad)
    assert len(np.concatenate(kept)) == len(audio) - trim.cut


# --- the real engine ---------------------------------------------------------------------------


def _timed(onnx_engine, text: str, *, speed: float = 1.0, fast_start: bool = True):
    synthesizer = Synthesizer(onnx_engine)

    async def collect():
        audio, words = bytearray(), []
        frames = synthesizer.pcm_frames(
            text, onnx_engine.default_voice, speed, fast_start=fast_start, word_timings=True
        )
        async for item in frames:
            match item:
                case WordsAhead(words=ahead):
                    # Sent no later than their audio: no word lies wholly in audio already sent.
                    assert all(word.end >= len(audio) // 2 for word in ahead)
                    words += ahead
                case AudioPiece(pcm=pcm):
                    audio += pcm
        return np.frombuffer(bytes(audio), "<i2").astype(np.float32) / 32767, words

    try:
        return asyncio.run(collect())
    finally:
        synthesizer.close()


def _quiet_spans(audio: np.ndarray, at_least: float = 0.12) -> list[tuple[int, int]]:
    """Spans of at least ``at_least`` seconds where no sample is louder than the trim's
    threshold, measured on the PCM."""
    loud = np.abs(audio) > QUIET
    spans, start = [], None
    for index, is_loud in enumerate(np.append(loud, True)):
        if not is_loud and start is None:
            start = index
        elif is_loud and start is not None:
            if index - start >= at_least * SAMPLE_RATE:
                spans.append((start, index))
            start = None
    return spans


@pytest.mark.parametrize(("speed", "fast_start"), [(1.0, True), (1.0, False), (1.4, True)])
def test_the_timings_fit_the_audio_the_server_sends(onnx_engine, speed, fast_start):
    audio, words = _timed(onnx_engine, SENTENCES, speed=speed, fast_start=fast_start)
    # The written words, each once, in order ("$29.99" and "Dr." as written, not as spoken).
    assert [word.text for word in words] == SENTENCES.split()
    assert all(w.start < w.end for w in words)
    assert all(a.end <= b.start for a, b in itertools.pairwise(words))
    # The last word ends where the audio does (the pause after a sentence aside).
    speech_end = int(np.flatnonzero(np.abs(audio) > QUIET)[-1])
    assert abs(words[-1].end - speech_end) <= BOUNDARY_TOLERANCE
    # At each sentence boundary the audio's own silence is where the timings put it.
    silences = _quiet_spans(audio)
    for before, after in itertools.pairwise(words):
        if before.text not in ("friend.", "today."):  # the sentences' ends ("Dr." is none)
            continue
        gap = next((s for s in silences if s[0] - BOUNDARY_TOLERANCE <= before.end <= s[1]), None)
        assert gap is not None, f"no silence after {before.text!r} at {before.end}: {silences}"
        assert abs(before.end - gap[0]) <= BOUNDARY_TOLERANCE, (before, gap)
        assert abs(after.start - gap[1]) <= BOUNDARY_TOLERANCE, (after, gap)


def test_streamed_and_whole_decodes_time_the_same_words_at_the_same_samples(planned_engine):
    """With a plan of the test's own: where the seam falls follows the plan, and a seam in a
    word's fading tail moves its measured end (a plan from a busy machine's record gave 160+)."""
    chunk = "The price is $29.99 today, and it ships on Monday."
    voice = planned_engine.default_voice
    streamed = list(planned_engine.synthesize_timed(chunk, voice, 1.0, streamed=True))
    whole = list(planned_engine.synthesize_timed(chunk, voice, 1.0, streamed=False))

    def words(pieces):
        return [word for piece in pieces if isinstance(piece, list) for word in piece]

    def audio(pieces):
        return np.concatenate([piece for piece in pieces if not isinstance(piece, list)])

    # The same words at the same starts; an end taken from the audio may move by the seam's
    # crossfade (a few samples around the threshold).
    assert [(w.text, w.start) for w in words(streamed)] == [(w.text, w.start) for w in words(whole)]
    assert all(
        abs(a.end - b.end) <= 240 for a, b in zip(words(streamed), words(whole), strict=True)
    )
    assert len(audio(streamed)) == len(audio(whole))
    assert words(whole)[-1].end <= len(audio(whole))
    assert isinstance(streamed[0], list)  # the words before the first window


def test_a_chunk_over_one_batch_times_every_word(onnx_engine):
    # Over 510 phonemes: two batches, their audio laid end to end; the second batch's words
    # come before its own audio, counted from the chunk's start.
    text = " ".join(["Streaming speech keeps the listener waiting less than ever before."] * 9)
    pieces = list(
        onnx_engine.synthesize_timed(text, onnx_engine.default_voice, 1.0, streamed=False)
    )
    lists = [index for index, piece in enumerate(pieces) if isinstance(piece, list)]
    assert len(lists) >= 2 and all(isinstance(pieces[i + 1], np.ndarray) for i in lists)
    words = [word for i in lists for word in pieces[i]]
    assert [word.text for word in words] == text.split()
    first_batch_samples = len(pieces[lists[0] + 1])
    second = pieces[lists[1]]
    assert second[0].start >= first_batch_samples
    total = sum(len(p) for p in pieces if isinstance(p, np.ndarray))
    assert words[-1].end <= total


def test_the_recognizer_hears_each_word_inside_its_own_span(onnx_engine):
    # PocketSphinx (the project's recognizer) segments the audio by itself; each word it gets
    # right should lie mostly inside the span our timings give that word, far more often than
    # inside the span of the word the timings put just before or after it.
    from voicewire_tools.bench.word_timing_check import recognizer_agreement

    text = "Bring the green bottle to the kitchen. Then open the window and wait for me."
    audio, words = _timed(onnx_engine, text)
    agreement = recognizer_agreement(audio, words)
    assert agreement.heard >= 6, agreement
    assert agreement.inside >= 0.8 * agreement.heard, agreement
    assert agreement.shifted <= 0.3 * agreement.heard, agreement


# --- the speech link ---------------------------------------------------------------------------


def _session_frames(ws_url: str, request: dict) -> list:
    frames = []
    with connect(ws_url, max_size=None) as ws:
        ws.send(json.dumps(request))
        while True:
            frame = ws.recv(timeout=60)
            frames.append(frame if isinstance(frame, bytes) else json.loads(frame))
            if isinstance(frames[-1], dict) and frames[-1]["type"] == "synthesis_complete":
                return frames


def test_the_bidi_link_sends_words_before_the_audio_they_time(speech_server):
    text = "Hello there. The plan ships on Monday."
    frames = _session_frames(
        speech_server.ws_url, {"text": text, "request_id": "r1", "word_timings": True}
    )
    assert frames[0]["type"] == "synthesis_start"
    sent = 0  # samples of audio before each frame
    timed = []
    for frame in frames[1:-1]:
        if isinstance(frame, bytes):
            sent += len(frame) // 2
            continue
        assert frame["type"] == "words" and frame["request_id"] == "r1"
        for word in frame["words"]:
            assert word["end"] > sent  # not all of it already sent
        timed += frame["words"]
    assert [word["text"] for word in timed] == text.split()
    assert timed[-1]["end"] <= sent + BOUNDARY_TOLERANCE
    # Without asking, no words frame (a client that does not know the frame never sees one).
    plain = _session_frames(speech_server.ws_url, {"text": text, "request_id": "r2"})
    assert not [f for f in plain if isinstance(f, dict) and f["type"] == "words"]
    assert sum(len(f) for f in plain if isinstance(f, bytes)) // 2 == sent


def test_words_frames_leave_in_order_with_the_frames_of_their_request(speech_server):
    # Words come before the first frame whose samples they describe, frame by frame.
    frames = _session_frames(
        speech_server.ws_url,
        {"text": SENTENCES, "request_id": "r3", "word_timings": True, "fast_start": False},
    )
    frame_samples = int(FRAME_SECONDS * SAMPLE_RATE)
    sent = 0
    for frame in frames[1:-1]:
        if isinstance(frame, bytes):
            assert len(frame) // 2 <= frame_samples
            sent += len(frame) // 2
        else:
            assert min(word["start"] for word in frame["words"]) >= sent - frame_samples


# --- the torch engine, with its stand-in ---------------------------------------------------------


def test_the_torch_engine_times_words_from_pred_dur(tmp_path, monkeypatch):
    from torch_standin import Calls, fake_modules, write_standin_checkpoint

    torch, kokoro = fake_modules(Calls(), no_g2p=set())
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "kokoro", kokoro)
    from speech_server.engines.torch_engine import KokoroTorchEngine

    (tmp_path / "config.json").write_text("{}")
    write_standin_checkpoint(tmp_path / "kokoro-v1_0.pth")
    np.savez(tmp_path / "voices.npz", af_heart=np.zeros((510, 1, 256)))
    engine = KokoroTorchEngine.load(tmp_path, device="cpu")
    text = "Hello there, friend. It is 12 noon."
    pieces = list(engine.synthesize_timed(text, "af_heart", 1.25, streamed=True))
    assert isinstance(pieces[0], list)  # the words first, then the chunk's audio
    words, audio = pieces[0], np.concatenate(pieces[1:])
    # "12" has no phoneme the stand-in's model is fed: it is not spoken, so not timed.
    assert [word.text for word in words] == ["Hello", "there,", "friend.", "It", "is", "noon."]
    assert all(a.end <= b.start for a, b in itertools.pairwise(words))
    # The stand-in's KPipeline yields two segments (and an empty one): the second's words are
    # counted from the end of the first's audio, after its leading pad.
    first, _, second = engine.pipelines["a"].last_results
    first_samples = len(first.audio.numpy())
    assert len(audio) == first_samples + len(second.audio.numpy())
    assert words[3].start == first_samples + int(second.pred_dur.numpy()[0]) * 600
    assert words[2].end == first_samples - int(first.pred_dur.numpy()[-1]) * 600 - 2 * 600


def test_the_bench_check_measures_silences_between_words_not_inside_one():
    from speech_server.word_timings import SpokenWord as Word
    from voicewire_tools.bench.word_timing_check import boundary_errors

    # Loud, a 0.2 s silence inside "$5" (espeak's own pause), loud, a 0.3 s silence, loud.
    rate = SAMPLE_RATE
    audio = np.concatenate(
        [
            np.full(rate // 2, 0.3),
            np.zeros(rate // 5),
            np.full(rate // 2, 0.3),
            np.zeros(3 * rate // 10),
            np.full(rate // 2, 0.3),
        ]
    )
    gap = int(1.2 * rate)
    words = [
        Word("$5", 0, gap + 2400),
        Word("Then", gap + int(0.3 * rate) - 1200, len(audio) - 100),
    ]
    errors = boundary_errors(audio, words)
    assert errors.ends == [2400] and errors.end_words == [0]  # 100 ms late; the inner pause skipped
    assert errors.starts == [-1200]
    assert errors.last_end == -99


def test_a_words_end_comes_from_its_audio_once_its_pause_has_begun():
    from speech_server.word_timings import END_PAD_SAMPLES, QUIET_TAIL_SAMPLES, ended_by_audio

    # "noon." spoken over 4,800 samples, then the pause Kokoro folds into it (to 12,000).
    audio = np.concatenate([np.full(4800, 0.2, np.float32), np.zeros(7200, np.float32)])
    word = SpokenWord("noon.", 0, 12_000)
    assert ended_by_audio([word], audio) == [SpokenWord("noon.", 0, 4800 + END_PAD_SAMPLES)]
    # Only part of it known (a window and its preview): moved once the known part ends quiet
    # for QUIET_TAIL_SAMPLES, else the predicted end stands (a stop's closure is shorter).
    begun = audio[: 4800 + QUIET_TAIL_SAMPLES]
    assert ended_by_audio([word], begun)[0].end == 4800 + END_PAD_SAMPLES
    closure = audio[: 4800 + QUIET_TAIL_SAMPLES - 1]
    assert ended_by_audio([word], closure)[0].end == 12_000
    # Counted from ``offset``: the same audio later in the chunk.
    later = SpokenWord("noon.", 1000, 13_000)
    assert ended_by_audio([later], audio, offset=1000)[0].end == 5800 + END_PAD_SAMPLES


def test_a_pause_inside_a_word_of_several_runs_is_not_its_end():
    from speech_server.word_timings import QUIET_TAIL_SAMPLES, ended_by_audio

    # "$29.99": "twenty-nine dollars" (to 9,600), a pause, "and ninety-nine" (from 14,400),
    # then its last run "cents" from 24,000 to 30,000. The known part (a window and its
    # preview) ends in the pause after "dollars": the word is not over.
    loud, quiet = np.full(9600, 0.2, np.float32), np.zeros(4800, np.float32)
    known = np.concatenate([loud, quiet])
    assert len(quiet) >= QUIET_TAIL_SAMPLES
    price = SpokenWord("$29.99", 0, 30_000, last_run_start=24_000)
    assert ended_by_audio([price], known)[0].end == 30_000
    # Once the known audio has gone quiet inside "cents", its pause has begun.
    cents = np.concatenate([known, np.full(24_000 - len(known) + 3000, 0.2, np.float32)])
    heard = np.concatenate([cents, np.zeros(QUIET_TAIL_SAMPLES, np.float32)])
    assert ended_by_audio([price], heard)[0].end < 30_000
    # Where the word's runs are not known, as before: the quiet is taken as its pause.
    assert ended_by_audio([SpokenWord("$29.99", 0, 30_000)], known)[0].end < 30_000
