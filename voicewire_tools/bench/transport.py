"""``voicewire bench transport``: what each way of carrying audio costs on the wire.

    uv run voicewire bench transport [--texts 24] [--json PATH] [--seed 7]

Speaks 24 texts of varied length with the CPU engine (in this process, through the speech
server's own synthesis and framing) and counts the bytes each delivery puts on the wire per
second of audio:

- ``binary``: the client link's binary frames (9-byte header + PCM, at most 32 KB each);
- ``base64 json``: the client link's ``?audio=base64`` text frames;
- ``base64 sse``: ``POST /invocations`` with ``Accept: text/event-stream`` (PCM);
- ``mp3``, ``opus``: the encoded sizes (raw bytes; over SSE they are base64'd like PCM).

Then the SSE alignment check the seed described: an MP3 answer's SSE stream cut into delivery
chunks of random sizes (256 B to 4 KB, seeded): how many cuts fall inside an event and inside an
MP3 frame, and whether the buffered decoder (``voicewire.sse``) recovers every byte.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import random
from typing import Any

from voicewire.client_protocol import (
    MAX_AUDIO_PAYLOAD,
    MAX_BASE64_AUDIO_PAYLOAD,
    encode_audio_frame,
    encode_base64_audio,
)
from voicewire.speech_protocol import SAMPLE_RATE, SAMPLE_WIDTH
from voicewire.sse import SseDecoder, encode_sse_event
from voicewire_tools.bench.machine import describe_machine, machine_line
from voicewire_tools.bench.report import write_json

TEXTS = [
    "Okay.",
    "Yes, that works.",
    "Your parcel arrives on Thursday.",
    "I can help with that right away.",
    "The meeting moved to three in the afternoon.",
    "We fixed the billing error, and the refund reaches your card tomorrow.",
    "Streaming lets a voice start while the answer is still being written.",
    "Please hold on for a moment while I check the order.",
    "The forecast says light rain in the morning and sun after lunch.",
    "Kokoro is a small text to speech model with eighty two million parameters.",
    "Thanks for waiting.",
    "Your account is active, and the next invoice is due on the first of the month.",
    "I did not find a booking under that name; could you spell it for me?",
    "Sure.",
    "The release moves to next week because the last tests found a timing problem in the "
    "speech link, which we are fixing today.",
    "Turn left at the second light, then keep right until you see the station.",
    "That model costs twenty nine dollars and ninety nine cents per month.",
    "Here is a summary of the three points we discussed.",
    "First, the cache moved to a faster store.",
    "Second, latency fell by half.",
    "Third, the voice now starts before the answer is complete.",
    "Let me know if you want the full report by email.",
    "Goodbye, and have a great day.",
    "A long answer keeps streaming sentence after sentence, so the listener never waits for "
    "the end of the text before hearing the beginning, and the last words arrive while the "
    "first ones are still playing.",
]
CUT_MIN, CUT_MAX = 256, 4096


RUNS_TURNS = False  # no stack: --url does not apply


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--texts", type=int, default=len(TEXTS), help="how many of the 24")
    parser.add_argument("--seed", type=int, default=7, help="the random delivery cuts' seed")


async def speak_all(texts: list[str]) -> list[list[bytes]]:
    """Each text's PCM frames, as the speech server frames them (0.2 s each)."""
    from speech_server.engines import load_engine
    from speech_server.settings import EngineSettings
    from speech_server.synthesis import Synthesizer

    synthesizer = Synthesizer(load_engine(EngineSettings.from_env()))
    try:
        answers = []
        voice = synthesizer.engine.default_voice
        for number, text in enumerate(texts, 1):
            frames = [frame.pcm async for frame in synthesizer.pcm_frames(text, voice, 1.0)]
            answers.append(frames)
            print(f"  [{number}/{len(texts)}] {len(text)} characters", flush=True)
        return answers
    finally:
        synthesizer.close()


def wire_bytes(frames: list[bytes]) -> dict[str, int]:
    """Bytes on the wire for one answer's PCM, per delivery."""
    pcm = b"".join(frames)
    binary = sum(
        len(encode_audio_frame(1, seq, chunk))
        for seq, chunk in enumerate(_split(pcm, MAX_AUDIO_PAYLOAD))
    )
    base64_json = sum(
        len(encode_base64_audio(1, seq, chunk))
        for seq, chunk in enumerate(_split(pcm, MAX_BASE64_AUDIO_PAYLOAD))
    )
    sse = sum(len(_sse_audio_event(seq, frame, "pcm16")) for seq, frame in enumerate(frames))
    return {
        "pcm": len(pcm),
        "binary": binary,
        "base64 json": base64_json,
        "base64 sse": sse,
        "mp3": len(_encoded(frames, "mp3")),
        "opus": len(_encoded(frames, "opus")),
    }


def _split(pcm: bytes, limit: int) -> list[bytes]:
    size = limit - limit % SAMPLE_WIDTH
    return [pcm[i : i + size] for i in range(0, len(pcm), size)]


def _sse_audio_event(seq: int, data: bytes, audio_format: str) -> bytes:
    """The event ``POST /invocations`` streams for each piece (speech_server.invocations)."""
    payload = {
        "type": "audio",
        "seq": seq,
        "format": audio_format,
        "data": base64.b64encode(data).decode("ascii"),
    }
    return encode_sse_event(payload)


def _encoded_pieces(frames: list[bytes], audio_format: str) -> list[bytes]:
    from speech_server.audio_encoding import encoder_for

    encoder = encoder_for(audio_format)  # type: ignore[arg-type]
    pieces = [encoder.encode(frame) for frame in frames]
    return [piece for piece in [*pieces, encoder.finish()] if piece]


def _encoded(frames: list[bytes], audio_format: str) -> bytes:
    return b"".join(_encoded_pieces(frames, audio_format))


def mp3_frame_starts(mp3: bytes) -> set[int]:
    """Byte offsets where the MP3 stream's frames start (PyAV's demuxer)."""
    import av

    with av.open(io.BytesIO(mp3), format="mp3") as container:
        return {packet.pos for packet in container.demux() if packet.pos is not None}


def alignment(frames: list[bytes], rng: random.Random) -> dict[str, Any]:
    """Cut an MP3 answer's SSE stream at random sizes; where the cuts fall; what is recovered."""
    pieces = _encoded_pieces(frames, "mp3")
    events = [_sse_audio_event(seq, piece, "mp3") for seq, piece in enumerate(pieces)]
    stream = b"".join(events)
    event_ends, offset = set(), 0
    for event in events:
        offset += len(event)
        event_ends.add(offset)
    mp3 = b"".join(pieces)
    starts = mp3_frame_starts(mp3)
    decoder, recovered, cuts = SseDecoder(), bytearray(), []
    position = 0
    while position < len(stream):
        size = rng.randint(CUT_MIN, CUT_MAX)
        chunk = stream[position : position + size]
        position += len(chunk)
        if position < len(stream):
            cuts.append(position)
        for event in decoder.feed(chunk):
            recovered += base64.b64decode(event["data"])
    # Which MP3 byte a cut inside an event's data would split, if a client acted on it.
    mid_event = [cut for cut in cuts if cut not in event_ends]
    mid_frame = sum(1 for cut in mid_event if _mp3_offset(cut, events) not in starts)
    return {
        "events": len(events),
        "delivery_chunks": len(cuts) + 1,
        "cuts_mid_event": len(mid_event),
        "cuts_mid_mp3_frame": mid_frame,
        "recovered_every_byte": bytes(recovered) == mp3 and decoder.pending_bytes == 0,
    }


def _mp3_offset(cut: int, events: list[bytes]) -> int | None:
    """The MP3 byte a stream position falls before, if it falls inside an event's base64 data
    (positions in the JSON envelope map to the event's first byte)."""
    start = mp3_start = 0
    for event in events:
        end = start + len(event)
        if start <= cut < end:
            head = event.index(b'"data":"') + len(b'"data":"')
            inside = max(0, cut - start - head)
            return mp3_start + min(inside * 3 // 4, len(base64.b64decode(_data(event))))
        mp3_start += len(base64.b64decode(_data(event)))
        start = end
    return None


def _data(event: bytes) -> str:
    return str(json.loads(event[len(b"data: ") :].strip())["data"])


def report(answers: list[list[bytes]], rng: random.Random, machine: dict[str, Any]) -> dict:
    totals: dict[str, int] = {}
    for frames in answers:
        for delivery, size in wire_bytes(frames).items():
            totals[delivery] = totals.get(delivery, 0) + size
    seconds = totals["pcm"] / SAMPLE_WIDTH / SAMPLE_RATE
    per_second = {delivery: round(size / seconds) for delivery, size in totals.items()}
    overhead = {d: round(100 * (size / totals["pcm"] - 1), 1) for d, size in totals.items()}
    checks = [alignment(frames, rng) for frames in answers]
    return {
        "machine": machine,
        "texts": len(answers),
        "audio_seconds": round(seconds, 1),
        "bytes_per_audio_second": per_second,
        "percent_of_pcm": {d: round(100 + value, 1) for d, value in overhead.items()},
        "sse_alignment": {
            key: sum(check[key] for check in checks)
            for key in ("events", "delivery_chunks", "cuts_mid_event", "cuts_mid_mp3_frame")
        }
        | {"recovered_every_byte": all(check["recovered_every_byte"] for check in checks)},
    }


def print_report(data: dict[str, Any]) -> None:
    print("\n" + machine_line(data["machine"]))
    print(f"\n{data['texts']} texts, {data['audio_seconds']} s of audio at 24 kHz")
    print(f"  {'delivery':<14}{'bytes per audio second':>24}{'against raw PCM':>18}")
    for delivery, rate in data["bytes_per_audio_second"].items():
        print(f"  {delivery:<14}{rate:>24,}{data['percent_of_pcm'][delivery]:>17.1f}%")
    check = data["sse_alignment"]
    print(
        f"\nSSE alignment, MP3 over base64 SSE cut at random {CUT_MIN}-{CUT_MAX} B: "
        f"{check['events']} events in {check['delivery_chunks']} delivery chunks; "
        f"{check['cuts_mid_event']} cuts inside an event, {check['cuts_mid_mp3_frame']} inside "
        f"an MP3 frame; every byte recovered by the buffered decoder: "
        f"{'yes' if check['recovered_every_byte'] else 'NO'}"
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    texts = TEXTS[: args.texts]
    machine = describe_machine()
    print(machine_line(machine), flush=True)
    print(f"speaking {len(texts)} texts with the CPU engine...", flush=True)
    answers = asyncio.run(speak_all(texts))
    data = report(answers, random.Random(args.seed), machine)
    print_report(data)
    write_json(data, args.json)
    return data
