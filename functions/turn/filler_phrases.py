"""What the voice says while a slow tool runs and nothing was said before it: a short filler in
the voice's language (Kokoro's languages), so the silence reads as work, not as a dead line."""

from __future__ import annotations

# By the primary language subtag of the voice's BCP 47 tag.
FILLERS = {
    "en": "One moment.",
    "es": "Un momento.",
    "fr": "Un instant.",
    "hi": "एक क्षण।",
    "it": "Un attimo.",
    "ja": "少々お待ちください。",
    "pt": "Só um momento.",
    "zh": "请稍等。",
}


def filler_for(language: str | None) -> str:
    """The filler for ``language`` (``en-GB``, ``fr-FR``, ...); English when it has none."""
    primary = (language or "en").split("-")[0].lower()
    return FILLERS.get(primary, FILLERS["en"])
