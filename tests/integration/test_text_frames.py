"""Binary audio frames delivered as *text* frames (issue 24): whether API Gateway delivers
``@connections`` posts of raw bytes as binary frames is undocumented, and if it sends text, the
0xA1 of an audio frame is not UTF-8 and a standards-compliant client fails the connection (1007).
``voicewire ask`` (``run_turn``) and the page then fall back to base64 with one line and lose
nothing; ``agent-infra check`` says which delivery a deployment has.

First a stand-in gateway (fast, exact), then the local stack with ``post_frames="text"``.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import wave
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest
from required_tools import needs
from websockets.asyncio.server import ServerConnection, serve

from voicewire import turn_client
from voicewire.client_protocol import encode_audio_frame
from voicewire.turn_client import TEXT_FRAMES_NOTICE, run_turn
from voicewire_tools.commands.deployment_check import TEXT_VERDICT

ROOT = Path(__file__).resolve().parents[2]

PCM = b"\x01\x02" * 3000  # one frame's audio (3,000 samples)


class TextFramesGateway:
    """Posts binary audio as text frames (invalid UTF-8), as a gateway might; base64 audio as
    JSON text frames. The delivery is the connection's ``?audio=``, else binary."""

    def __init__(self) -> None:
        self.connections: list[str] = []

    async def handle(self, websocket: ServerConnection) -> None:
        path = websocket.request.path
        self.connections.append(path)
        delivery = dict(parse_qsl(urlsplit(path).query)).get("audio", "binary")
        async for message in websocket:
            action = json.loads(message)
            turn_id = action.get("turn_id", "t-1")
            start = {
                "type": "turn_start",
                "turn_id": turn_id,
                "turn": 1,
                "mode": "speak",
                "audio": {"delivery": delivery},
            }
            await websocket.send(json.dumps(start))
            text = {"type": "text_delta", "turn_id": turn_id, "seq": 0, "text": "Hi."}
            await websocket.send(json.dumps(text))
            for seq in range(2):
                if delivery == "base64":
                    data = base64.b64encode(PCM).decode()
                    await websocket.send(
                        json.dumps({"type": "audio", "turn": 1, "seq": seq, "data": data})
                    )
                else:  # raw bytes in a text frame: the client fails the connection here
                    await websocket.send(encode_audio_frame(1, seq, PCM), text=True)
            end = {
                "type": "turn_end",
                "turn_id": turn_id,
                "status": "complete",
                "timings": {"first_audio_ms": 10.0},
                "audio_bytes": 2 * len(PCM),
                "audio_frames": 2,
            }
            await websocket.send(json.dumps(end))


async def test_run_turn_falls_back_to_base64_once_and_loses_nothing(monkeypatch):
    monkeypatch.setattr(turn_client, "_TEXT_FRAME_APIS", set())
    gateway = TextFramesGateway()
    notices: list[str] = []
    events: list[str] = []
    async with serve(gateway.handle, "127.0.0.1", 0) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/prod?token=abc"
        result = await run_turn(
            url,
            {"action": "speak", "text": "Hi.", "turn_id": "t-7"},
            lambda event: events.append(event.kind),
            on_notice=notices.append,
        )
        assert notices == [TEXT_FRAMES_NOTICE]
        assert result.status == "complete" and result.fell_back_to_base64
        assert bytes(result.audio) == PCM * 2  # the whole answer, from the turn asked again
        # The cut attempt was seen (its turn_start and text), then the whole turn again.
        assert events[:2] == ["turn_start", "text_delta"]
        assert events[2:] == ["turn_start", "text_delta", "audio", "audio", "turn_end"]
        assert [event.kind for event in result.events] == events[2:]
        assert gateway.connections == ["/prod?token=abc", "/prod?token=abc&audio=base64"]

        # Remembered for the run: the next turn to this API asks for base64 at once.
        again = await run_turn(url, {"action": "speak", "text": "Hi."}, on_notice=notices.append)
        assert again.status == "complete" and not again.fell_back_to_base64
        assert bytes(again.audio) == PCM * 2 and len(notices) == 1
        assert gateway.connections[2] == "/prod?token=abc&audio=base64"


async def test_without_a_listener_the_fallback_is_said_on_stderr(monkeypatch, capsys):
    """The benches call ``run_turn`` without ``on_notice``: the detour is in their figures, so
    it is said anyway."""
    monkeypatch.setattr(turn_client, "_TEXT_FRAME_APIS", set())
    async with serve(TextFramesGateway().handle, "127.0.0.1", 0) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/ws"
        result = await run_turn(url, {"action": "speak", "text": "Hi."})
    assert result.fell_back_to_base64 and bytes(result.audio) == PCM * 2
    assert capsys.readouterr().err == f"note: {TEXT_FRAMES_NOTICE}\n"


async def test_a_connection_that_asked_for_base64_is_not_retried(monkeypatch):
    """A 1007 on a connection that already asked for base64 is not about binary frames: it is
    raised, not asked again in a loop."""
    from websockets.exceptions import ConnectionClosedError

    monkeypatch.setattr(turn_client, "_TEXT_FRAME_APIS", set())

    async def broken(websocket: ServerConnection) -> None:
        await websocket.recv()
        await websocket.send(b"\xa1\xff", text=True)
        await websocket.wait_closed()

    async with serve(broken, "127.0.0.1", 0) as server:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}/ws?audio=base64"
        with pytest.raises(ConnectionClosedError):
            await run_turn(url, {"action": "speak", "text": "Hi."}, on_notice=print)


# --- the local stack, its gateway posting every @connections body as a text frame -------------


@pytest.fixture
def text_stack(stack):
    """The module's local stack with ``post_frames="text"`` (``voicewire up --post-frames
    text``): each post reaches the client as a text frame holding the posted bytes exactly, as
    API Gateway might do, so a binary audio frame is invalid UTF-8. The switch is the gateway's,
    read at every post; one stack per process, since the functions' adapters are global."""
    stack.gateway.post_frames = "text"
    yield stack
    stack.gateway.post_frames = "binary"


def test_voicewire_up_post_frames_becomes_the_stacks_option():
    from voicewire_tools.cli import build_parser
    from voicewire_tools.commands.up import stack_options

    args = build_parser().parse_args(["up", "--post-frames", "text"])
    options = stack_options(args, 0)
    assert options.post_frames == "text"
    assert build_parser().parse_args(["up"]).post_frames == "binary"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--post-frames", "base64"])


def ask_cli(url: str, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "voicewire_tools.cli",
            "ask",
            "Hello, who are you?",
            "--url",
            url,
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


def test_ask_falls_back_to_base64_and_writes_the_whole_answer(text_stack, tmp_path):
    cut = ask_cli(text_stack.ws_url, tmp_path / "text.wav")
    assert cut.returncode == 0, cut.stdout + cut.stderr
    lines = cut.stdout.splitlines()
    assert [line for line in lines if line.startswith("note:")] == [f"note: {TEXT_FRAMES_NOTICE}"]
    starts = [line for line in lines if "turn_start" in line]
    assert len(starts) == 2  # the cut attempt, then the turn asked again
    assert "audio as binary frames" in starts[0] and "audio as base64 frames" in starts[1]
    assert any("turn_end    complete" in line for line in lines)

    text_stack.gateway.post_frames = "binary"
    plain = ask_cli(text_stack.ws_url, tmp_path / "binary.wav")  # the same answer, binary frames
    assert plain.returncode == 0 and "note:" not in plain.stdout
    with (
        wave.open(str(tmp_path / "text.wav")) as text,
        wave.open(str(tmp_path / "binary.wav")) as binary,
    ):
        fallen_back, straight = text.getnframes(), binary.getnframes()
    assert straight > 24_000  # a second or more of speech
    assert abs(fallen_back - straight) <= straight * 0.05  # the whole answer, nothing lost


def agent_infra_check(url: str, report_file: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "voicewire_tools.commands.agent_infra",
            "check",
            "--url",
            url,
            "--prompt",
            "Hello there",
            "--json",
            str(report_file),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    return result, json.loads(report_file.read_text())


def test_agent_infra_check_says_binary_posts_arrive_as_text(text_stack, tmp_path):
    result, report = agent_infra_check(text_stack.ws_url, tmp_path / "check.json")
    assert f"audio delivery   {TEXT_VERDICT}." in result.stdout
    assert "closed the connection (1007" in result.stdout and "(checked: it works)" in result.stdout
    assert report["binary_as_text"] is True and report["binary_audio"] is False
    assert report["binary"]["audio_delivery"] == "text" and report["binary"]["close_code"] == 1007
    assert report["base64_audio"] is True and report["speak"]["audio_delivery"] == "base64"
    assert report["bidi"]["status"] == report["batch"]["status"] == "complete"
    # The local stack sends binary by default: where binary posts arrive as text, that is wrong.
    assert result.returncode == 1
    assert "problem: this API sends binary audio by default" in result.stdout


def test_agent_infra_check_says_binary_posts_arrive_as_binary(stack, tmp_path):
    result, report = agent_infra_check(stack.ws_url, tmp_path / "check.json")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "binary frames: PostToConnection's bytes arrive as binary" in result.stdout
    assert TEXT_VERDICT not in result.stdout
    assert report["binary_audio"] is True and report["binary_as_text"] is False


@needs("chromium")
async def test_the_page_falls_back_to_base64_and_the_turn_is_heard(text_stack):
    from chromium_pages import STATS, chromium_page, connect, until, wait_open, wait_turn

    errors: list[str] = []
    console: list[str] = []
    async with chromium_page(errors) as page:
        page.on("console", lambda message: console.append(message.text))
        await page.goto(f"{text_stack.base_url}/")
        await connect(page)
        await wait_open(page)
        await page.fill("#prompt", "Hello, who are you?")
        await page.press("#prompt", "Enter")
        await wait_turn(page, 1)
        # Chromium failed the binary connection on the first audio frame: what it says about it.
        assert any("Could not decode a text frame as UTF-8" in line for line in console)
        notice = await page.inner_text("#notice")
        assert notice.startswith("Binary audio frames arrive from this API as text frames")
        assert "switched to base64 audio, and the question is asked again." in notice
        stats = await page.evaluate(STATS)
        assert stats["framesDecoded"] > 0 and stats["secondsScheduled"] > 2.0  # heard
        assert "base64 audio frames" in await page.inner_text("#turn-summary")
        transcript = " ".join((await page.inner_text("#transcript")).split())
        assert transcript == "Hello! I'm voicewire, the voice of your agent. Ask me anything."
        rows = await page.eval_on_selector_all(
            "#history tbody tr", "r => r.map(e => e.dataset.status)"
        )
        assert rows == ["complete"]  # one turn, asked twice: not a lost one and a new one
        assert await page.is_checked("#base64") and "audio=base64" in page.url

        # Learned: the next turn goes straight to base64, and the line is not said again.
        await page.click("#ask")
        await wait_turn(page, 2)
        assert await page.inner_text("#notice") == notice
        failures = [line for line in console if "Could not decode a text frame" in line]
        assert len(failures) == 1
        # And a fresh visit of the page connects by itself (the stack's config.json says no
        # ticket is needed), and to this API with base64 at once: nothing to fail first.
        await page.goto(f"{text_stack.base_url}/")
        await wait_open(page)
        assert await page.is_checked("#base64") and "audio=base64" in page.url
        await until(page, "document.getElementById('notice').textContent === ''")
    assert errors == []
