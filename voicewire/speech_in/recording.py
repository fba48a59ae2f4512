"""A recording as Transcribe streaming takes it: signed 16-bit little-endian mono samples at one
rate (``pcm``), decoded and resampled from any file FFmpeg reads (WAV, FLAC, MP3, Opus...)
through PyAV, which voicewire already depends on."""

from __future__ import annotations

from pathlib import Path

DEFAULT_RATE = 16_000  # wideband speech: Transcribe's usual rate, and the recognizers'


class RecordingError(ValueError):
    """The file cannot be read as audio; the message says why."""


def read_speech(path: Path, rate: int = DEFAULT_RATE) -> bytes:
    """``path``'s audio, mixed to mono, at ``rate`` Hz, as 16-bit little-endian samples."""
    import av

    try:
        container = av.open(str(path))
    except (OSError, av.error.FFmpegError) as error:
        raise RecordingError(f"{path}: cannot be read as audio ({error})") from None
    with container:
        if not container.streams.audio:
            raise RecordingError(f"{path} has no audio stream")
        resampler = av.AudioResampler(format="s16", layout="mono", rate=rate)
        pieces: list[bytes] = []
        for frame in container.decode(audio=0):
            pieces.extend(
                bytes(out.planes[0])[: out.samples * 2] for out in resampler.resample(frame)
            )
        pieces.extend(bytes(out.planes[0])[: out.samples * 2] for out in resampler.resample(None))
    pcm = b"".join(pieces)
    if not pcm:
        raise RecordingError(f"{path} holds no samples")
    return pcm


def _samples(frame: object) -> bytes:
    """A packed mono s16 frame's samples (its plane may be padded past them)."""
    return bytes(frame.planes[0])[: frame.samples * 2]  # type: ignore[attr-defined]
