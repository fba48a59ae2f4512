"""What a Kokoro-82M voice name says: its language, accent, gender and espeak-ng language.

Kokoro names every voice ``<language letter><gender letter>_<name>`` (``af_heart``: American
English, female). The speech server describes its voices with this, clients show them with it,
and the engines pick the phonemizer's language from it, so one table serves all three.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class VoiceLanguage:
    language: str  # a BCP 47 tag a browser understands
    label: str  # what a person picking a voice reads
    espeak: str  # espeak-ng's language for the phonemizer


# Kokoro v1.0's language letters (hexgrad's VOICES.md).
LANGUAGES: dict[str, VoiceLanguage] = {
    "a": VoiceLanguage("en-US", "American English", "en-us"),
    "b": VoiceLanguage("en-GB", "British English", "en-gb"),
    "e": VoiceLanguage("es", "Spanish", "es"),
    "f": VoiceLanguage("fr-FR", "French", "fr-fr"),
    "h": VoiceLanguage("hi", "Hindi", "hi"),
    "i": VoiceLanguage("it", "Italian", "it"),
    "j": VoiceLanguage("ja", "Japanese", "ja"),
    "p": VoiceLanguage("pt-BR", "Brazilian Portuguese", "pt-br"),
    "z": VoiceLanguage("zh", "Mandarin Chinese", "cmn"),
}
GENDERS = {"f": "female", "m": "male"}

# Kokoro's best English voice (hexgrad's grades); the default wherever the set has it.
PREFERRED_VOICE = "af_heart"

# Kokoro v1.0's official voices: what both engines load (the speech server's
# official_voices pins each one's sha256) and what a deployment's functions offer clients.
OFFICIAL_VOICES: tuple[str, ...] = (
    "af_alloy",
    "af_aoede",
    "af_bella",
    "af_heart",
    "af_jessica",
    "af_kore",
    "af_nicole",
    "af_nova",
    "af_river",
    "af_sarah",
    "af_sky",
    "am_adam",
    "am_echo",
    "am_eric",
    "am_fenrir",
    "am_liam",
    "am_michael",
    "am_onyx",
    "am_puck",
    "am_santa",
    "bf_alice",
    "bf_emma",
    "bf_isabella",
    "bf_lily",
    "bm_daniel",
    "bm_fable",
    "bm_george",
    "bm_lewis",
    "ef_dora",
    "em_alex",
    "em_santa",
    "ff_siwis",
    "hf_alpha",
    "hf_beta",
    "hm_omega",
    "hm_psi",
    "if_sara",
    "im_nicola",
    "jf_alpha",
    "jf_gongitsune",
    "jf_nezumi",
    "jf_tebukuro",
    "jm_kumo",
    "pf_dora",
    "pm_alex",
    "pm_santa",
    "zf_xiaobei",
    "zf_xiaoni",
    "zf_xiaoxiao",
    "zf_xiaoyi",
    "zm_yunjian",
    "zm_yunxi",
    "zm_yunxia",
    "zm_yunyang",
)


@dataclass(frozen=True)
class VoiceDescription:
    name: str
    language: str
    label: str
    gender: str | None
    espeak: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def default_voice(voices: frozenset[str] | tuple[str, ...]) -> str | None:
    """The voice a request without one gets where ``voices`` are offered."""
    if PREFERRED_VOICE in voices:
        return PREFERRED_VOICE
    return min(voices) if voices else None


def describe_voice(name: str) -> VoiceDescription:
    """The voice's language and gender from its name; a name outside Kokoro's scheme (a user's
    own voice pack) is described as American English, the model's first language."""
    prefix, _, rest = name.partition("_")
    known = len(prefix) == 2 and rest and prefix[0] in LANGUAGES
    language = LANGUAGES[prefix[0]] if known else LANGUAGES["a"]
    gender = GENDERS.get(prefix[1]) if known else None
    return VoiceDescription(name, language.language, language.label, gender, language.espeak)


def describe_voices(names: frozenset[str] | list[str]) -> list[VoiceDescription]:
    """Every voice, English first (the model's strongest), then by name."""
    return sorted(
        (describe_voice(name) for name in names),
        key=lambda voice: (not voice.language.startswith("en"), voice.name),
    )
