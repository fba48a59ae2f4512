"""What the local stack's ``listen`` offers without the offline recognizer installed: a sentence
saying how to install it, which ``listen`` answers as ``listen_unavailable`` (typing works)."""

from __future__ import annotations

import pytest

from voicewire.client_protocol import ListenAction
from voicewire.error_codes import ErrorCode, ProtocolError
from voicewire.speech_in.listen_offer import ListenSettings, listen_offer
from voicewire_tools.commands import speech_in_setup
from voicewire_tools.local_stack.stack import LocalStack, StackOptions


def test_without_the_extra_listen_says_how_to_install_it(monkeypatch):
    monkeypatch.setattr(speech_in_setup, "speech_in_installed", lambda: False)
    reason = LocalStack(StackOptions(listen=True), progress=lambda line: None)._offline_recognizer()
    assert isinstance(reason, str)
    assert "uv sync --inexact --extra speech-in" in reason and "typing works" in reason
    with pytest.raises(ProtocolError) as refused:
        listen_offer(
            ListenAction(action="listen"),
            None,
            ListenSettings(region="us-east-1", unavailable=reason),
        )
    assert refused.value.code == ErrorCode.LISTEN_UNAVAILABLE
    assert refused.value.message == reason
