"""Streaming audio encoders for ``POST /invocations``: PCM in, encoded bytes out as they exist.

``wav`` and ``pcm16`` need no codec. ``mp3`` (MPEG-2 layer III at 24 kHz) and ``opus`` (in Ogg)
go through PyAV's FFmpeg, muxed into an in-memory sink that is drained after every frame, so the
first bytes leave as soon as the codec has a packet rather than when the text is done.
"""

from __future__ import annotations

import struct
from fractions import Fraction
from typing import Literal, Protocol

import av
import numpy as np

from voicewire.speech_protocol import CHANNELS, SAMPLE_RATE, SAMPLE_WIDTH

AudioFormat = Literal["wav", "pcm16", "mp3", "opus"]
AUDIO_FORMATS: tuple[AudioFormat, ...] = ("wav", "pcm16", "mp3", "opus")

_UNKNOWN_LENGTH = 0xFFFFFFFF  # the RIFF convention for a stream whose length is not known yet


class StreamEncoder(Protocol):
    media_type: str

    def encode(self, pcm: bytes) -> bytes:
        """Bytes ready to send after this PCM (may be empty while the codec buffers)."""
        ...

    def finish(self) -> bytes:
        """Whatever the codec still holds, and the container's trailer."""
        ...


def encoder_for(audio_format: AudioFormat, sample_rate: int = SAMPLE_RATE) -> StreamEncoder:
    match audio_format:
        case "pcm16":
            return PcmEncoder(sample_rate)
        case "wav":
            return WavEncoder(sample_rate)
        case "mp3":
            return CodecEncoder("mp3", "libmp3lame", "audio/mpeg", sample_rate, 64_000)
        case "opus":
            return CodecEncoder(
                "ogg",
                "libopus",
                "audio/ogg; codecs=opus",
                sample_rate,
                32_000,
                # Ogg holds packets for a second per page by default; 20 ms pages stream.
                container_options={"page_duration": "20000"},
            )
    raise ValueError(f"unknown audio format {audio_format!r}")


class PcmEncoder:
    """Raw s16le: what the WebSocket route sends, over HTTP."""

    def __init__(self, sample_rate: int) -> None:
        self.media_type = f"audio/pcm; rate={sample_rate}; channels={CHANNELS}; format=s16le"

    def encode(self, pcm: bytes) -> bytes:
        return pcm

    def finish(self) -> bytes:
        return b""


class WavEncoder:
    """A RIFF/WAVE header whose sizes say "unknown", then the PCM as it comes.

    Players and decoders (FFmpeg, browsers, soundfile) read such a stream to its end.
    """

    media_type = "audio/wav"

    def __init__(self, sample_rate: int) -> None:
        self._header: bytes | None = wav_header(sample_rate)

    def encode(self, pcm: bytes) -> bytes:
        header, self._header = self._header, None
        return header + pcm if header else pcm

    def finish(self) -> bytes:
        header, self._header = self._header, None
        return header or b""


def wav_header(sample_rate: int, data_bytes: int = _UNKNOWN_LENGTH) -> bytes:
    riff_size = _UNKNOWN_LENGTH if data_bytes == _UNKNOWN_LENGTH else 36 + data_bytes
    byte_rate = sample_rate * CHANNELS * SAMPLE_WIDTH
    return (
        b"RIFF"
        + struct.pack("<I", riff_size)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, CHANNELS, sample_rate, byte_rate, CHANNELS * 2, 16)
        + b"data"
        + struct.pack("<I", data_bytes)
    )


class _Sink:
    """A write-only file for the muxer; ``drain`` hands over what it wrote since last time."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def write(self, data: bytes) -> int:
        self._parts.append(bytes(data))
        return len(data)

    def drain(self) -> bytes:
        data, self._parts = b"".join(self._parts), []
        return data


class CodecEncoder:
    def __init__(
        self,
        container_format: str,
        codec: str,
        media_type: str,
        sample_rate: int,
        bit_rate: int,
        container_options: dict[str, str] | None = None,
    ) -> None:
        self.media_type = media_type
        self._sample_rate = sample_rate
        self._sink = _Sink()
        self._container = av.open(
            self._sink, mode="w", format=container_format, options=container_options or {}
        )
        self._stream = self._container.add_stream(codec, rate=sample_rate, layout="mono")
        self._stream.bit_rate = bit_rate
        self._samples = 0

    def encode(self, pcm: bytes) -> bytes:
        samples = np.frombuffer(pcm, dtype="<i2").reshape(1, -1)
        frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        frame.sample_rate = self._sample_rate
        frame.pts = self._samples
        frame.time_base = Fraction(1, self._sample_rate)
        self._samples += samples.shape[1]
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        return self._sink.drain()

    def finish(self) -> bytes:
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        return self._sink.drain()
