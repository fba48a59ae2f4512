"""``voicewire ask``: one turn from the terminal, its timeline printed as it arrives."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from websockets.exceptions import InvalidStatus

from voicewire.speech_in.recording import DEFAULT_RATE, RecordingError, read_speech
from voicewire.speech_in.spoken_question import ListenRefused, NothingHeard, SpokenQuestion
from voicewire.speech_in.transcribe_client import pace_of
from voicewire.speech_in.transcribe_events import TranscribeException
from voicewire.turn_client import TimedEvent, heard_ms_of, list_voices, run_turn


def timeline_line(event: TimedEvent) -> str:
    data = event.data
    match event.kind:
        case "turn_start":
            what = f"turn {data['turn']} ({data['mode']}), id {data['turn_id']}"
            delivery = (data.get("audio") or {}).get("delivery")
            if delivery:  # as the connection asked, else the API's default
                what += f", audio as {delivery} frames"
        case "text_delta":
            what = repr(data["text"])
        case "sentence":
            what = f"#{data['index']} {data['text']}"
        case "audio":
            what = f"frame {data['seq']}, {data['bytes']:,} bytes"
        case "words":  # each word and when it starts, in ms of the turn's audio
            what = " ".join(f"{w['text']}@{w['start_ms']:.0f}" for w in data["words"])
        case "tool_start":
            what = f"working: {data['name']} ({data['tool_use_id']})"
            if data.get("input") is not None:
                what += f" {data['input']}"
        case "tool_end":
            what = f"{data['name']} {data['status']} after {data['ms']:.0f} ms"
        case "turn_end":
            timings = ", ".join(
                f"{name.removesuffix('_ms')} {value:.0f} ms"
                for name, value in data["timings"].items()
                if value is not None
            )
            what = (
                f"{data['status']}: {timings}; {data['audio_frames']} audio frames, "
                f"{data['audio_bytes']:,} bytes"
            )
        case "error":
            what = f"{data.get('code')}: {data.get('message')}"
        # a spoken question (voicewire ask --audio)
        case "listen":
            what = f"Transcribe URL for {data.get('language_code')} at {data.get('sample_rate')} Hz"
        case "heard":
            what = f"{'final' if data['final'] else 'partial'}: {data['text']!r}"
        case "end_of_speech":
            what = f"the speaker stopped ({data['audio_s']:.2f} s into the recording)"
        # the seed's server-sent events (voicewire ask --sse)
        case "agent_start":
            what = f"{data.get('mode', '')}, id {data.get('turn_id', '?')}"
        case "audio_stream_start":
            what = f"{data['format']} at {data['sample_rate']} Hz"
        case "audio_chunk":
            what = f"{data['bytes']:,} bytes"
        case "audio_stream_end":
            what = ""
        case "agent_end":
            timings = ", ".join(
                f"{name.removesuffix('_ms')} {value:.0f} ms"
                for name, value in (data.get("timings") or {}).items()
                if value is not None
            )
            what = f"{data.get('status')}: {timings}; {data.get('audio_bytes', 0):,} bytes"
        case _:
            what = str(data)
    return f"{event.at_ms:9.1f} ms  {event.kind:<11} {what}"


def message_for(args: argparse.Namespace) -> dict[str, Any]:
    """The turn's message (with --audio, its prompt is the transcript, filled in later)."""
    options: dict[str, Any] = {}
    if args.voice:
        options["voice"] = args.voice
    if args.speed is not None:
        options["speed"] = args.speed
    if args.speak is not None:
        return {"action": "speak", "text": args.speak, **options}
    return {"action": "ask", "prompt": args.prompt, "mode": args.mode, **options}


def voices_table(frame: dict[str, Any]) -> str:
    """The ``voices`` frame as lines a person reads: name, language, gender; the default marked."""
    if frame.get("type") == "error":
        return f"error {frame['code']}: {frame['message']}"
    return "\n".join(
        f"{'*' if voice['name'] == frame['default_voice'] else ' '} {voice['name']:<14}"
        f"{voice['label']:<22}{voice.get('gender') or ''}"
        for voice in frame["voices"]
    )


def run(args: argparse.Namespace) -> None:
    url = args.url + (
        ("&" if "?" in args.url else "?") + f"token={args.token}" if args.token else ""
    )
    if args.voices:
        try:
            print(voices_table(asyncio.run(list_voices(url))))
        except (OSError, TimeoutError) as error:
            sys.exit(f"voicewire ask: cannot reach {args.url}: {error}")
        return
    spoken = _spoken_question(args) if args.audio is not None else None
    if args.prompt is None and args.speak is None and spoken is None:
        sys.exit("voicewire ask: give a PROMPT, --audio FILE, --speak TEXT or --voices")
    if args.sse:
        _ask_over_sse(args)
        return
    notices: list[str] = []
    received = [0]  # bytes of audio so far, for what Ctrl-C tells the server

    def show(event: TimedEvent) -> None:
        if event.kind == "audio":
            received[0] += event.data["bytes"]
        print(timeline_line(event), flush=True)

    def notice(line: str) -> None:  # the fallback to base64 (run_turn says why), once
        notices.append(line)
        print(f"note: {line}", flush=True)

    try:
        result = asyncio.run(
            run_turn(url, message_for(args), show, on_notice=notice, prepare=spoken)
        )
    except KeyboardInterrupt:
        # run_turn cancelled the turn, with heard_ms: the audio received, since this command
        # does not play it. The agent remembers no more of the answer than that.
        heard = heard_ms_of(received[0])
        sys.exit(f"voicewire ask: interrupted; the turn was cancelled with heard_ms={heard:g}")
    except (OSError, TimeoutError) as error:
        sys.exit(f"voicewire ask: cannot reach {args.url}: {error}")
    except (ListenRefused, NothingHeard, TranscribeException) as error:
        sys.exit(f"voicewire ask: {error}")
    except Exception as error:  # e.g. a refused handshake (bad token): one line, not a traceback
        if notices and isinstance(error, InvalidStatus):
            # The second connection of a ticketed API: its ticket opened the first one.
            sys.exit(
                f"voicewire ask: asking again with ?audio=base64 was refused ({error}); a "
                "connect ticket opens one connection: run again with a fresh --token and "
                "--url ending in ?audio=base64"
            )
        sys.exit(f"voicewire ask: {type(error).__name__}: {error}")
    stopped, first_audio = result.first("end_of_speech"), result.first("audio")
    if stopped is not None and first_audio is not None:
        print(f"voice to voice: {first_audio - stopped:.0f} ms (end of speech -> first audio)")
    if result.audio:
        out = Path(args.out)
        result.write_wav(out)
        print(f"audio: {len(result.audio) / 48_000:.2f} s written to {out}")
    sys.exit(0 if result.status == "complete" else 1)


def _spoken_question(args: argparse.Namespace) -> SpokenQuestion:
    if args.prompt is not None or args.speak is not None or args.sse:
        sys.exit(
            "voicewire ask: --audio asks the question in the recording; no PROMPT, --speak or --sse"
        )
    try:
        pace_of(args.pace)
    except ValueError as error:
        sys.exit(f"voicewire ask: --{error}")
    try:
        pcm = read_speech(Path(args.audio))
    except RecordingError as error:
        sys.exit(f"voicewire ask: {error}")
    return SpokenQuestion(pcm, DEFAULT_RATE, pace=args.pace)


def seed_payload(args: argparse.Namespace) -> dict[str, Any]:
    """The seed's ``/invocations`` payload: ``{prompt, mode, voice, speed}`` (or ``text``)."""
    payload: dict[str, Any] = {"prompt": args.prompt, "mode": args.mode}
    if args.speak is not None:
        payload = {"text": args.speak}
    if args.voice:
        payload["voice"] = args.voice
    if args.speed is not None:
        payload["speed"] = args.speed
    return payload


def _ask_over_sse(args: argparse.Namespace) -> None:
    from voicewire.sse_turn import invocations_url, run_sse_turn

    url = invocations_url(args.url)

    def show(event: TimedEvent) -> None:
        print(timeline_line(event), flush=True)

    try:
        result = asyncio.run(
            run_sse_turn(url, seed_payload(args), show, session_id=args.session_id)
        )
    except KeyboardInterrupt:  # the request closes: the runtime stops the turn
        sys.exit("voicewire ask: interrupted; the turn stopped with the request")
    except (OSError, TimeoutError) as error:
        sys.exit(f"voicewire ask: cannot reach {url}: {error}")
    except Exception as error:
        sys.exit(f"voicewire ask: {type(error).__name__}: {error}")
    if result.audio:
        out = Path(args.out)
        result.write_wav(out)
        seconds = len(result.audio) / 48_000
        per_second = result.bytes_received / max(seconds, 1e-9)
        print(
            f"audio: {seconds:.2f} s written to {out}; {result.bytes_received:,} bytes of "
            f"events, {per_second:,.0f} per second of audio"
        )
    sys.exit(0 if result.status == "complete" else 1)
