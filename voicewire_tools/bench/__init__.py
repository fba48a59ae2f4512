"""``voicewire bench NAME``: the project's benchmarks, one command each.

Benchmarks are not tests: they print tables, write JSON (``--json``) and pictures (``--plot``),
and can take minutes. Each module here is one benchmark with ``add_arguments(parser)`` and
``run(args)``, and ``RUNS_TURNS = False`` when it runs no turns on a stack (``--url`` is then
refused); a short smoke run of each is in the test suite.
"""

from __future__ import annotations

BENCHMARKS = {
    "ttfa": "voicewire_tools.bench.ttfa",
    "floor": "voicewire_tools.bench.floor",
    "load": "voicewire_tools.bench.load",
    "soak": "voicewire_tools.bench.soak",
    "stalls": "voicewire_tools.bench.stalls",
    "transport": "voicewire_tools.bench.transport",
    "engine": "voicewire_tools.bench.engine",
    "capacity": "voicewire_tools.bench.capacity",
    "speech": "voicewire_tools.bench.speech",
    "session": "voicewire_tools.bench.session",
    "posts": "voicewire_tools.bench.posts",
    "chunker": "voicewire_tools.bench.chunker",
    "tools": "voicewire_tools.bench.tools",
    "words": "voicewire_tools.bench.words",
    "llm": "voicewire_tools.bench.local_llm",
    "recognizer": "voicewire_tools.bench.speech_in",
    "voice": "voicewire_tools.bench.voice",
    "bargein": "voicewire_tools.bench.bargein",
}
