"""Clients of the speech server: one ``SpeechSession`` over SageMaker or a direct WebSocket.

    async with open_speech_session("ws://127.0.0.1:8080/invocations-bidirectional-stream") as s:
        request_id = await s.send("Hello there.")
        async for event in s.events(request_id):
            ...  # SynthesisStarted, then AudioChunk..., then SynthesisCompleted

``open_speech_session`` takes a ``ws://``/``wss://`` URL (local stack, tests) or a SageMaker
endpoint name (``sagemaker:NAME`` or a bare name) and picks the transport.
"""

from voicewire.speech_link.errors import SpeechServerError, SpeechSessionError, SpeechStreamError
from voicewire.speech_link.session import (
    AudioChunk,
    SpeechEvent,
    SpeechSession,
    SynthesisCompleted,
    SynthesisStarted,
    open_speech_session,
)

__all__ = [
    "AudioChunk",
    "SpeechEvent",
    "SpeechServerError",
    "SpeechSession",
    "SpeechSessionError",
    "SpeechStreamError",
    "SynthesisCompleted",
    "SynthesisStarted",
    "open_speech_session",
]
