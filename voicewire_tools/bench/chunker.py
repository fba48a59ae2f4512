"""``voicewire bench chunker``: how fast the streaming chunker is, and what delay it adds.

    uv run voicewire bench chunker [--repeat 20] [--json PATH]

Feeds a markdown-heavy answer token by token (3-character fragments, as an LLM streams) through
``IncrementalSentenceChunker`` and prints:

- throughput in characters per second;
- the delay it adds per sentence: the time spent inside the ``feed`` call that completes a
  sentence (the boundary is already in the text; this is the chunker's own cost), median and p99,
  in microseconds. The target is microseconds, not milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from voicewire.chunker import IncrementalSentenceChunker
from voicewire_tools.bench.machine import describe_machine, machine_line
from voicewire_tools.bench.report import write_json

ANSWER = """## What changed

Dr. Smith's team shipped **v2.3.1** on Jan. 5 at 10:30 a.m., after e.g. three weeks of tests.
The build costs $29.99 per month, i.e. 12.5% less than before. Did it work? Yes!

- First, the *cache* was moved to `redis`.
- Second, latency fell from 329.3 ms to 156.7 ms.

See [the report](https://example.com/report.pdf) for details. Questions go to ops@example.com.
The rest follows in the appendix... which nobody reads. "That's fine," she said. Next steps:

1. Measure again.
2. Ship it.
"""


def measure(repeat: int) -> dict[str, Any]:
    text = ANSWER * 4
    fragments = [text[i : i + 3] for i in range(0, len(text), 3)]
    completing: list[float] = []
    total_seconds = 0.0
    sentences = 0
    for _ in range(repeat):
        chunker = IncrementalSentenceChunker()
        started = time.perf_counter()
        for fragment in fragments:
            before = time.perf_counter()
            chunks = chunker.feed(fragment)
            if chunks:
                completing.append(time.perf_counter() - before)
                sentences += len(chunks)
        if chunker.flush():
            sentences += 1
        total_seconds += time.perf_counter() - started
    characters = len(text) * repeat
    completing.sort()
    p99 = completing[int(len(completing) * 0.99)]
    print(f"text: {len(text)} characters in {len(fragments)} fragments, x{repeat}")
    print(f"sentences emitted: {sentences // repeat} per pass")
    print(f"throughput: {characters / total_seconds / 1e6:.2f} M characters/s")
    print(
        f"delay added per sentence (feed call that completes it): "
        f"median {statistics.median(completing) * 1e6:.1f} us, p99 {p99 * 1e6:.1f} us"
    )
    per_fragment = total_seconds / (len(fragments) * repeat)
    print(f"mean cost per fragment: {per_fragment * 1e6:.2f} us")
    return {
        "characters": len(text),
        "fragments": len(fragments),
        "sentences_per_pass": sentences // repeat,
        "characters_per_second": characters / total_seconds,
        "sentence_delay_median_us": statistics.median(completing) * 1e6,
        "sentence_delay_p99_us": p99 * 1e6,
        "fragment_cost_us": per_fragment * 1e6,
    }


RUNS_TURNS = False  # no stack: --url does not apply


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeat", type=int, default=20)


def run(args: argparse.Namespace) -> dict[str, Any]:
    machine = describe_machine()
    print(machine_line(machine))
    data = {"machine": machine, **measure(args.repeat)}
    write_json(data, args.json)
    return data
