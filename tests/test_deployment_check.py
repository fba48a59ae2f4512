"""``agent-infra check``: against the local stack (binary delivery works), and against stand-in
gateways for what AWS might do instead (raw audio bytes delivered in text frames; a refused
handshake). What AWS really does is what the command exists to find out."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from websockets.asyncio.server import ServerConnection, serve

from voicewire.client_protocol import encode_audio_frame
from voicewire_tools.commands.deployment_check import CheckFailed, check, render

ROOT = Path(__file__).resolve().parent.parent


def test_check_passes_against_the_local_stack(stack, tmp_path):
    report_file = tmp_path / "check.json"
    result = subprocess.run(
        [sys.executable, "-m", "voicewire_tools.commands.agent_infra", "check",
         "--url", stack.ws_url, "--prompt", "Hello there", "--json", str(report_file)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "binary frames" in result.stdout and "all checks passed" in result.stdout
    report = json.loads(report_file.read_text())
    assert report["binary_audio"] is True and report["base64_audio"] is None
    speak = report["speak"]
    assert speak["status"] == "complete" and speak["audio_delivery"] == "binary"
    # The turn's clock starts when the route accepts the action, after this client sent it; its
    # first sentence was cut before any of its audio existed, let alone reached this client.
    reported = speak["reported"]
    assert reported["first_sentence_ms"] < speak["first_audio_ms"]
    assert reported["first_sentence_ms"] <= reported["first_audio_ms"] < reported["total_ms"]
    assert report["bidi"]["status"] == report["batch"]["status"] == "complete"
    bidi, batch = (report[mode]["reported"] for mode in ("bidi", "batch"))
    # bidi speaks its first sentence as soon as it is written; batch waits for the whole answer.
    assert bidi["first_sentence_ms"] < batch["first_sentence_ms"]
    assert report["batch_over_bidi"] == pytest.approx(
        batch["first_audio_ms"] / bidi["first_audio_ms"]
    )
    assert report["batch_over_bidi"] > 1  # so streaming speaks sooner


class TextDeliveryGateway:
    """A gateway that posts raw audio bytes as *text* frames (invalid UTF-8), and base64 audio
    to connections opened with ``?audio=base64``, as API Gateway does for those."""

    def __init__(self) -> None:
        self.connections: list[str] = []

    async def handle(self, websocket: ServerConnection) -> None:
        path = websocket.request.path
        self.connections.append(path)
        base64_audio = "audio=base64" in path
        async for message in websocket:
            action = json.loads(message)
            mode = action.get("mode", "speak")
            await websocket.send(json.dumps({"type": "turn_start", "turn": 1, "mode": mode}))
            frame = encode_audio_frame(1, 0, b"\x00\xff" * 2400)
            if base64_audio:
                data = base64.b64encode(frame[9:]).decode()
                audio = {"type": "audio", "turn": 1, "seq": 0, "data": data}
                await websocket.send(json.dumps(audio))
            else:
                await websocket.send(frame, text=True)  # raw bytes in a text frame
            first_audio = 300.0 if mode == "bidi" else 900.0
            end = {
                "type": "turn_end",
                "status": "complete",
                "timings": {"first_audio_ms": first_audio, "total_ms": 1000.0},
            }
            await websocket.send(json.dumps(end))


async def test_audio_in_text_frames_is_reported_with_what_to_do():
    gateway = TextDeliveryGateway()
    async with serve(gateway.handle, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        report = await check(f"ws://127.0.0.1:{port}/prod", token="abc")
    assert report.binary_audio is False and report.base64_audio is True
    assert report.plain.close_code == 1007 and report.plain.audio_delivery == "text"
    assert report.speak.audio_delivery == "base64" and report.speak.close_code is None
    assert report.ok and report.batch_over_bidi == pytest.approx(3.0)
    assert gateway.connections[0] == "/prod?token=abc"
    assert all("audio=base64" in path for path in gateway.connections[1:])
    text = render(report)
    assert "NOT binary" in text and "?audio=base64" in text and "(checked: it works)" in text
    assert "closed the connection (1007" in text


async def test_a_refused_handshake_says_a_token_is_needed():
    def refuse(connection, request):
        return connection.respond(403, "Forbidden\n")

    async with serve(lambda ws: None, "127.0.0.1", 0, process_request=refuse) as server:
        port = server.sockets[0].getsockname()[1]
        with pytest.raises(CheckFailed) as failed:
            await check(f"ws://127.0.0.1:{port}/prod")
    assert "HTTP 403" in str(failed.value) and "--token" in str(failed.value)


async def test_nothing_listening_is_a_plain_error():
    from conftest import free_port

    with pytest.raises(CheckFailed) as failed:
        await check(f"ws://127.0.0.1:{free_port()}/prod")
    assert "cannot reach" in str(failed.value)
