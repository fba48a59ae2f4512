"""Clients of the speech server: one ``SpeechSession`` over SageMaker or a direct WebSocket.

    async with open_speech_session("ws://127.0.0.1:8080/invocations-bidirectional-stream") as s:
        request_id = await s.send("Hello there.")
        async for event in s.events(request_id):
            ...  # SynthesisStart, then AudioChunk..., then SynthesisComplete
            # (with send(..., word_timings=True), a WordsFrame before the audio it times)

``open_speech_session`` takes a ``ws://``/``wss://`` URL (a speech server reached directly) or a
SageMaker endpoint name (``sagemaker:NAME`` or a bare name) and picks the transport. Over
SageMaker the client is built as production needs it (``sagemaker_client``: the SDK's CRT
transport, boto3 credentials); ``endpoint_uri`` and ``trusted_ca_file`` point that same client
at the local SageMaker runtime.
"""

from voicewire.speech_link.errors import (
    SpeechRequestError,
    SpeechServerError,
    SpeechSessionError,
    SpeechStreamError,
)
from voicewire.speech_link.session import (
    AudioChunk,
    SpeechEvent,
    SpeechSession,
    open_speech_session,
)
from voicewire.speech_protocol import SynthesisComplete, SynthesisStart, TimedWord, WordsFrame

__all__ = [
    "AudioChunk",
    "SpeechEvent",
    "SpeechRequestError",
    "SpeechServerError",
    "SpeechSession",
    "SpeechSessionError",
    "SpeechStreamError",
    "SynthesisComplete",
    "SynthesisStart",
    "TimedWord",
    "WordsFrame",
    "open_speech_session",
]
