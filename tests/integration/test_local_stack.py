"""``voicewire up``'s topology end to end, over real ports with real WebSocket clients."""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from polling import until
from required_tools import needs
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from voicewire.client_protocol import MAX_FRAME_BYTES, decode_audio_frame
from voicewire.turn_client import run_turn
from voicewire_tools.local_stack.stack import LocalStack, StackOptions

ROOT = Path(__file__).resolve().parents[2]


def check_turn(result, mode):
    kinds = [event.kind for event in result.events]
    assert kinds[0] == "turn_start" and kinds[-1] == "turn_end"
    assert result.events[0].data["mode"] == mode
    audio = [event.data for event in result.events if event.kind == "audio"]
    assert [frame["seq"] for frame in audio] == list(range(len(audio)))
    assert result.status == "complete"
    assert result.end["audio_bytes"] == len(result.audio) > 24_000
    return kinds


async def test_speak_returns_a_whole_turn(stack):
    result = await run_turn(
        stack.ws_url, {"action": "speak", "text": "Hello from the local stack."}
    )
    check_turn(result, "speak")


async def test_the_stack_speaks_through_a_front_door_as_strict_as_sagemaker(stack):
    """By default the worker's speech goes through the local SageMaker runtime, which answers a
    stream only once its first event has come, recomputes every signature with the key this
    stack issued and cuts the container's frames into PARTIAL parts at random: a turn is whole
    through all three, and a key the stack did not issue is refused as AWS refuses it."""
    from conftest import refusal

    from voicewire.speech_link import open_speech_session
    from voicewire_tools.local_stack.sigv4_verifier import AccessKey

    assert stack.options.sagemaker_initial_response == "after_first_event"
    counters = stack.runtime_counters
    opened, partial = counters.streams_opened, counters.partial_parts
    stack.keep_speech_sessions(False)  # a session per turn: this turn's stream is a new one
    try:
        result = await run_turn(
            stack.ws_url, {"action": "speak", "text": "Every part of this, cut and joined."}
        )
    finally:
        stack.keep_speech_sessions(True)
    check_turn(result, "speak")
    assert counters.streams_opened == opened + 1
    assert counters.partial_parts > partial  # its audio came back in cut parts

    stranger = boto3.Session(region_name="us-east-1", **AccessKey.issue().boto3_kwargs())
    session = open_speech_session(
        "kokoro-82m",
        region="us-east-1",
        endpoint_uri=stack.runtime_url,
        trusted_ca_file=stack.tls.ca_file,
        boto3_session=stranger,
    )
    refused = await refusal(session)
    assert refused.code == "connect_failed"
    assert "403 UnrecognizedClientException" in refused.message


async def test_ask_bidi_speaks_before_the_text_is_done(stack):
    """The LLM's stream is held after its first sentence until the first audio arrives: a
    pipeline that waited for more of the text would not speak at all. Held, the order does not
    depend on whether this machine synthesizes a sentence faster than the recording writes."""
    from held_llm import HeldReplay

    llm = HeldReplay()
    kinds: list[str] = []
    with stack.llm_replaced_by(llm):
        async with connect(stack.ws_url, max_size=None) as ws:
            message = {"action": "ask", "prompt": "Tell me a story", "mode": "bidi"}
            await ws.send(json.dumps(message))
            started: dict = {}
            async with asyncio.timeout(120):
                async for frame in ws:
                    if isinstance(frame, bytes):
                        turn, _, _ = decode_audio_frame(frame)
                        assert turn == started["turn"]
                        if "audio" not in kinds:
                            llm.release()
                        kinds.append("audio")
                        continue
                    data = json.loads(frame)
                    kind = data["type"]
                    if kind == "turn_start":
                        started = data
                    kinds.append(kind)
                    if "audio" in kinds and kind == "text_delta":
                        await ws.send(json.dumps({"action": "cancel"}))  # proven; save the time
                    if kind == "turn_end":
                        break
    assert llm.holding.is_set() and not llm.held_past_its_limit
    first_audio = kinds.index("audio")
    assert kinds[0] == "turn_start" and kinds[-1] == "turn_end"
    assert "text_delta" in kinds[first_audio:]  # the LLM was still writing


async def test_ask_batch_completes(stack):
    message = {"action": "ask", "prompt": "Hello, who are you?", "mode": "batch"}
    result = await run_turn(stack.ws_url, message)
    kinds = check_turn(result, "batch")
    assert kinds.index("audio") > max(i for i, k in enumerate(kinds) if k == "text_delta")


async def test_cancel_mid_turn_ends_it_and_no_audio_follows(stack):
    async with connect(stack.ws_url, max_size=None) as ws:
        await ws.send(json.dumps({"action": "ask", "prompt": "Tell me everything"}))
        frames = []
        cancelled = False
        async with asyncio.timeout(120):
            async for frame in ws:
                frames.append(frame)
                if isinstance(frame, bytes) and not cancelled:
                    await ws.send(json.dumps({"action": "cancel"}))
                    cancelled = True
                if isinstance(frame, str) and json.loads(frame)["type"] == "turn_end":
                    break
            end = json.loads(frames[-1])
            assert end["status"] == "cancelled"
            # Nothing of that turn arrives after its turn_end: once its worker has returned,
            # every post of the turn is delivered, so the next frame would be a late one of the
            # turn if there were any. It is the answer to a new message.
            await asyncio.to_thread(stack.functions.wait, 30)
            await ws.send(json.dumps({"action": "voices"}))
            after = await asyncio.wait_for(ws.recv(), 10)
    assert isinstance(after, str) and json.loads(after)["type"] == "voices"
    # The turn_end counts exactly the audio frames the client got before it.
    assert end["audio_frames"] == sum(isinstance(frame, bytes) for frame in frames) >= 1


async def speak_and_settle(stack, text: str):
    """One speak turn, then wait for the worker to finish (it hands its session back after
    posting turn_end)."""
    result = await run_turn(stack.ws_url, {"action": "speak", "text": text})
    await asyncio.to_thread(stack.functions.wait, 30)
    return result


async def test_the_worker_reuses_its_speech_session_between_turns(stack):
    assert stack.options.speech_link == "sagemaker"  # the deployed path, by default
    await speak_and_settle(stack, "The first turn opens a session.")
    opened = stack.runtime_counters.streams_opened
    second = await speak_and_settle(stack, "The second turn reuses it.")
    assert second.status == "complete"
    assert stack.runtime_counters.streams_opened == opened


async def test_a_cancelled_turn_does_not_hand_its_session_on(stack):
    await speak_and_settle(stack, "Warm up.")
    async with connect(stack.ws_url, max_size=None) as ws:
        await ws.send(json.dumps({"action": "speak", "text": "A long text. " * 20}))
        async with asyncio.timeout(60):
            async for frame in ws:
                if isinstance(frame, bytes):
                    await ws.send(json.dumps({"action": "cancel"}))
                elif json.loads(frame)["type"] == "turn_end":
                    assert json.loads(frame)["status"] == "cancelled"
                    break
    await asyncio.to_thread(stack.functions.wait, 30)
    opened = stack.runtime_counters.streams_opened
    after = await speak_and_settle(stack, "A fresh session.")
    assert after.status == "complete"
    assert stack.runtime_counters.streams_opened == opened + 1


async def test_the_direct_websocket_link_still_works(stack):
    opened = stack.runtime_counters.streams_opened
    await asyncio.to_thread(stack.use_speech_link, "websocket")
    try:
        result = await speak_and_settle(stack, "Straight to the speech server.")
    finally:
        await asyncio.to_thread(stack.use_speech_link, "sagemaker")
    check_turn(result, "speak")
    assert stack.runtime_counters.streams_opened == opened  # the runtime was not involved


async def test_management_api_answers_and_says_gone_after_disconnect(stack):
    management = boto3.client(
        "apigatewaymanagementapi",
        endpoint_url=stack.base_url,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    before = set(stack.gateway.connections)
    async with connect(stack.ws_url) as ws:
        # Registered just after the handshake completes.
        await until(lambda: set(stack.gateway.connections) - before, "the connection is known")
        (connection_id,) = set(stack.gateway.connections) - before
        info = await asyncio.to_thread(management.get_connection, ConnectionId=connection_id)
        assert info["Identity"]["SourceIp"] == "127.0.0.1"
        await asyncio.to_thread(
            management.post_to_connection, ConnectionId=connection_id, Data=b'{"hello": 1}'
        )
        assert json.loads(await ws.recv()) == {"hello": 1}  # UTF-8 text -> a text frame
        await asyncio.to_thread(
            management.post_to_connection, ConnectionId=connection_id, Data=b"\xa1\x00\x01"
        )
        assert await ws.recv() == b"\xa1\x00\x01"  # not UTF-8 -> a binary frame
    connection = stack.gateway.connections[connection_id]
    await until(lambda: not connection.open, "the gateway sees the client gone")
    with pytest.raises(ClientError) as gone:
        await asyncio.to_thread(
            management.post_to_connection, ConnectionId=connection_id, Data=b"x"
        )
    assert gone.value.response["Error"]["Code"] == "GoneException"
    assert gone.value.response["ResponseMetadata"]["HTTPStatusCode"] == 410


def frame_of(size: int) -> str:
    """A ``voices`` action of exactly ``size`` bytes (unknown fields are ignored)."""
    envelope = len(json.dumps({"action": "voices", "pad": ""}))
    frame = json.dumps({"action": "voices", "pad": "x" * (size - envelope)})
    assert len(frame.encode()) == size
    return frame


async def test_a_frame_over_32_kb_is_refused_like_api_gateway(stack):
    async with connect(stack.ws_url, max_size=None) as ws:
        await ws.send(frame_of(MAX_FRAME_BYTES))  # at the limit: handled
        answer = json.loads(await asyncio.wait_for(ws.recv(), 10))
        await ws.send(frame_of(MAX_FRAME_BYTES + 1))
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
    assert answer["type"] == "voices"
    assert ws.close_code == 1009


async def test_a_binary_client_frame_closes_with_1003(stack):
    async with connect(stack.ws_url) as ws:
        await ws.send(b'{"action": "speak", "text": "Hi."}')
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), 10)
    assert ws.close_code == 1003


async def test_invalid_messages_get_error_frames_and_the_connection_stays(stack):
    async with connect(stack.ws_url, max_size=None) as ws:
        await ws.send("not json")
        error = json.loads(await asyncio.wait_for(ws.recv(), 10))
        await ws.send(json.dumps({"action": "ask", "prompt": "Hi", "mode": "fast"}))
        mode_error = json.loads(await asyncio.wait_for(ws.recv(), 10))
        await ws.send(json.dumps({"action": "speak", "text": "Still here."}))
        start = json.loads(await asyncio.wait_for(ws.recv(), 30))
    assert (error["type"], error["code"]) == ("error", "invalid_json")
    assert mode_error["code"] == "invalid_mode"
    assert start["type"] == "turn_start"


def test_the_page_is_served(stack):
    import httpx

    from voicewire_tools.page_headers import CONTENT_SECURITY_POLICY

    page = httpx.get(f"{stack.base_url}/")
    assert page.status_code == 200 and "0xA1" in page.text
    # Its files, under the policy a deployment's CloudFront sends; nothing else of the disk.
    script = httpx.get(f"{stack.base_url}/app.js")
    assert script.status_code == 200 and "import" in script.text
    for response in (page, script):
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert response.headers["referrer-policy"] == "no-referrer"
    for outside in ("/pyproject.toml", "/..%2Fpyproject.toml", "/.env"):
        assert httpx.get(f"{stack.base_url}{outside}").status_code == 404
    # config.json is the stack's answer (tests/integration/test_gateway.py), not a repository file.
    assert httpx.get(f"{stack.base_url}/config.json").json()["url"] == stack.ws_url


def test_replay_runs_every_sample_event():
    samples = sorted(str(path) for path in (ROOT / "events" / "apigw").glob("*.json"))
    connect_first = [s for s in samples if s.endswith("/connect.json")] + samples
    result = subprocess.run(
        [sys.executable, "-m", "voicewire_tools.cli", "replay", *connect_first],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.count("== ") == len(connect_first)
    for code in (
        "missing_prompt",
        "invalid_mode",
        "speed_out_of_range",
        "text_too_long",
        "unknown_action",
        "invalid_json",
    ):
        assert f'"code":"{code}"' in out
    assert '"Effect": "Allow"' in out and out.count('"Effect": "Deny"') == 4
    assert "invoked voicewire-worker (Event)" in out


def recorded_text_ms(prompt: str, pace: float) -> tuple[float, float]:
    """When the replay LLM's answer to ``prompt`` has its first chunk (as the pipeline's chunker
    cuts it) and when its whole text, in ms after the call: a bidi turn's audio cannot come
    sooner than the first, a batch turn's sooner than the second."""
    from functions.adapters.replay_llm import ReplayBedrockClient
    from voicewire_tools.bench.capacity import recorded_deltas, turn_requests

    name = ReplayBedrockClient().choose(prompt).name
    return turn_requests(name)[0][0] * 1000 * pace, recorded_deltas(name)[-1][0] * 1000 * pace


# A four-sentence answer, whose whole text comes 1.4 s after its first chunk (recorded pace): the
# margin by which streaming speaks sooner outlasts a test running beside this one (pytest-xdist),
# where "Hello there"'s 0.3 s did not.
DEMO_PROMPT = "Explain how streaming speech works"


def test_demo_reports_both_modes(stack, tmp_path):
    """Against a running API, as ``agent-infra demo`` runs ``voicewire demo --url`` against a
    deployment (a URL with its token); comparing links needs its own stack (see below)."""
    # A warm stack (the engine has run, a speech session is kept), as a deployment in use is:
    # the demo's first trial, a bidi one, would otherwise pay for the cold start alone.
    assert asyncio.run(speak_and_settle(stack, "Warm up.")).status == "complete"
    figures = tmp_path / "demo.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "voicewire_tools.commands.agent_infra",
            "demo",
            "--url",
            stack.ws_url + "?token=unchecked-locally",
            "--trials",
            "1",
            "--prompt",
            DEMO_PROMPT,
            "--json",
            str(figures),
            "--out-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    report = json.loads(figures.read_text())
    for mode in ("bidi", "batch"):
        first_audio = report["modes"][mode]["first_audio_ms"]
        assert first_audio["min"] <= first_audio["median"] <= first_audio["max"]
        assert (tmp_path / f"{mode}.wav").stat().st_size > 44
    bidi, batch = (report["modes"][mode]["first_audio_ms"]["median"] for mode in ("bidi", "batch"))
    first_chunk_ms, whole_text_ms = recorded_text_ms(DEMO_PROMPT, stack.options.llm_pace)
    assert bidi >= first_chunk_ms and batch >= whole_text_ms  # no audio before its text exists
    assert report["bidi_sooner_than"] == {"batch": pytest.approx(batch / bidi)}
    assert report["bidi_sooner_than"]["batch"] > 1  # streaming speaks sooner
    # What it will do comes first, the comparison last.
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("voicewire demo: voicewire's bidi against voicewire's batch")
    assert "1 trial x 2 modes = 2 turns" in lines[1]
    assert lines[-1] == (
        f"voicewire's bidi spoke after {bidi:.0f} ms: {batch / bidi:.2f}x sooner than "
        f"voicewire's batch ({batch:.0f} ms)"
    )


def test_the_seeds_pipeline_needs_the_demos_own_stack(capsys):
    from voicewire_tools.cli import main

    with pytest.raises(SystemExit, match="seed_bidi switch the demo's own stack"):
        main(["demo", "--url", "ws://127.0.0.1:9/ws", "--modes", "bidi,seed_bidi"])
    with pytest.raises(SystemExit, match="must include bidi"):
        main(["demo", "--modes", "seed_bidi,seed_batch"])
    with pytest.raises(SystemExit):
        main(["demo", "--modes", "bidi,seed_stream"])
    assert "unknown modes ['seed_stream']" in capsys.readouterr().err


def test_demo_compares_with_the_seeds_pipeline_over_both_speech_links(tmp_path):
    """The demo's default: voicewire's bidi against the seed's bidi and batch, on its own stack
    (here over both speech links at once, which it also compares)."""
    figures = tmp_path / "demo.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "voicewire_tools.cli",
            "demo",
            "--trials",
            "1",
            "--speech-link",
            "sagemaker,websocket",
            "--prompt",
            "Hello there",
            "--json",
            str(figures),
            "--out-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr + result.stdout
    report = json.loads(figures.read_text())
    assert set(report["links"]) == {"sagemaker", "websocket"}
    first_chunk_ms, whole_text_ms = recorded_text_ms("Hello there", StackOptions().llm_pace)
    costs = report["link_cost"]
    for link in ("sagemaker", "websocket"):
        figures_of_link = report["links"][link]
        bidi, seed_bidi, seed_batch = (
            figures_of_link["modes"][mode]["first_audio_ms"]["median"]
            for mode in ("bidi", "seed_bidi", "seed_batch")
        )
        # No audio before the text it speaks exists: the seed's bidi waits for a whole sentence,
        # its batch for the whole text. (Not seed_bidi > bidi: one trial on a cold stack, and
        # its first turn, a bidi one, also pays for the engine's first run.)
        assert bidi >= first_chunk_ms and seed_batch >= whole_text_ms
        assert figures_of_link["bidi_sooner_than"] == {
            "seed_bidi": pytest.approx(seed_bidi / bidi),
            "seed_batch": pytest.approx(seed_batch / bidi),
        }
        cost = costs[link]
        assert len(cost["open_ms"]["values"]) == 5
        # A ping needs no engine; a one-clause text's first audio is the engine's time on top.
        assert cost["round_trip_ms"]["median"] < cost["first_audio_ms"]["median"]
    # Over SageMaker a session is the direct WebSocket plus the front door's TLS and HTTP/2.
    assert costs["sagemaker"]["open_ms"]["median"] > costs["websocket"]["open_ms"]["median"]
    assert report["speech_link"] == "sagemaker"  # the first link's figures at the top
    assert "per session and per chunk" in result.stdout
    assert "1 trial x 3 modes x 2 speech links = 6 turns" in result.stdout
    last = result.stdout.strip().splitlines()[-2:]
    assert [line.split(":")[0] for line in last] == ["sagemaker", "websocket"]
    assert all("sooner than the seed's bidi" in line for line in last)
    assert all("sooner than the seed's batch" in line for line in last)
    assert all((tmp_path / f"{mode}.wav").stat().st_size > 44 for mode in report["modes"])


def test_ask_cli_prints_the_timeline_and_writes_audio(stack, tmp_path):
    out = tmp_path / "answer.wav"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "voicewire_tools.cli",
            "ask",
            "--speak",
            "Short and sweet.",
            "--url",
            stack.ws_url,
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "turn_start" in lines[0] and any("turn_end    complete" in line for line in lines)
    import wave

    with wave.open(str(out)) as audio:
        assert audio.getframerate() == 24_000 and audio.getnframes() > 12_000


def test_ask_cli_lists_the_stacks_voices_with_the_default_marked(stack):
    result = subprocess.run(
        [sys.executable, "-m", "voicewire_tools.cli", "ask", "--voices", "--url", stack.ws_url],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 54 and lines[0].split()[0] == "af_alloy"  # English first, by name
    assert [line.split()[1] for line in lines if line.startswith("*")] == ["af_heart"]
    assert any("bf_emma" in line and "British English" in line for line in lines)


@needs("npx", "script")
def test_wscat_as_an_outside_client(stack):
    """npm's wscat sends a speak action and prints the turn. wscat prints what it receives only
    on a terminal, so it runs under ``script``, which gives it one."""
    message = json.dumps({"action": "speak", "text": "Hello wscat."})
    command = shlex.join(["npx", "-y", "wscat", "-c", stack.ws_url, "-x", message, "-w", "15"])
    result = subprocess.run(
        ["script", "-qc", command, "/dev/null"], capture_output=True, timeout=240
    )
    out = result.stdout.decode("utf-8", "replace")
    assert '"type":"turn_start"' in out, out[-2000:]
    assert '"type":"turn_end"' in out and '"status":"complete"' in out


async def test_tokens_turn_the_authorizer_on():
    from websockets.exceptions import InvalidStatus

    with LocalStack(
        StackOptions(port=0, speech_port=0, runtime_port=0, tokens=True), lambda line: None
    ) as local:
        with pytest.raises(InvalidStatus) as refused:
            async with connect(local.ws_url):
                pass
        assert refused.value.response.status_code == 403
        with pytest.raises(InvalidStatus):
            async with connect(local.ws_url + "?token=not.a.jwt"):
                pass
        result = await run_turn(
            f"{local.ws_url}?token={local.token('alice')}", {"action": "speak", "text": "Hi."}
        )
        assert result.status == "complete"
        from functions.wiring import current_adapters

        (connection_id,) = local.gateway.connections  # only the authorized one got this far
        principal = current_adapters().connections.get(connection_id).principal
        assert principal == "alice"  # the authorizer's context reached $connect


def test_voicewire_up_prints_its_urls_and_stops_on_ctrl_c(tmp_path):
    import signal
    import time

    from conftest import free_port

    from speech_server.tuning_record import TUNING_FILE
    from voicewire.cache_dir import cache_dir

    # A first run: the model is assembled in this empty cache and `up` shows its progress. The
    # engine's tuning record is carried over (when this machine has one), so the graphs are not
    # measured a second time in the suite: test_cli's first run and .ci/run measure them.
    if (record := cache_dir() / TUNING_FILE).is_file():
        shutil.copy(record, tmp_path / TUNING_FILE)
    port, speech_port, runtime_port = free_port(), free_port(), free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "voicewire_tools.cli",
            "up",
            "--port",
            str(port),
            "--speech-port",
            str(speech_port),
            "--runtime-port",
            str(runtime_port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
        env={**__import__("os").environ, "VOICEWIRE_CACHE_DIR": str(tmp_path)},
    )
    lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        lines.append(line)
        if "Ctrl-C stops everything" in line:
            break
    output = "".join(lines)
    assert f"ws://127.0.0.1:{port}/ws" in output and f"http://127.0.0.1:{port}/" in output
    assert "assembling Kokoro-82M int8 ONNX" in output  # first run: the long step says so
    busy = subprocess.run(
        [sys.executable, "-m", "voicewire_tools.cli", "up", "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert busy.returncode != 0
    assert busy.stderr.strip().splitlines() == [
        f"voicewire up: port {port} on 127.0.0.1 is already in use"
    ]
    process.send_signal(signal.SIGINT)
    rest, _ = process.communicate(timeout=60)
    assert process.returncode == 0, rest
    assert "Traceback" not in rest


async def test_an_outside_dynamodb_endpoint_is_used():
    from moto.server import ThreadedMotoServer

    outside = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    outside.start()
    try:
        host, port = outside.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        options = StackOptions(port=0, speech_port=0, runtime_port=0, dynamodb_endpoint=endpoint)
        with LocalStack(options, lambda line: None) as local:
            assert local._moto is None  # no embedded DynamoDB was started
            audio_bytes = 0
            async with connect(local.ws_url, max_size=None) as ws:
                await ws.send(json.dumps({"action": "speak", "text": "Stored."}))
                async with asyncio.timeout(60):
                    async for frame in ws:
                        if isinstance(frame, bytes):
                            audio_bytes += len(decode_audio_frame(frame)[2])
                        elif (data := json.loads(frame))["type"] == "turn_start":
                            turn_id = data["turn_id"]
                        elif data["type"] == "turn_end":
                            assert data["status"] == "complete"
                            break
                # Stay connected until the worker has recorded the turn: a client that leaves
                # right after turn_end can still see its turn recorded as cancelled (the
                # $disconnect route cancels a turn the worker has not yet marked complete).
                await asyncio.to_thread(local.functions.wait, 30)
        table = boto3.resource(
            "dynamodb",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
        ).Table("voicewire-sessions")
        # moto servers in one process share their state, so look for this turn by its id.
        (turn,) = [item for item in table.scan()["Items"] if item["sk"] == f"turn#{turn_id}"]
        assert turn["status"] == "complete" and turn["audio_bytes"] == audio_bytes > 0
    finally:
        outside.stop()


# --- as unkind as AWS: concurrent messages, duplicate and retried invocations, slow posts ------


async def _frames_until(ws, turn_ends: int, limit: float = 120) -> list:
    """Frames (dicts, or (turn, seq) for audio) until ``turn_ends`` turn_end frames arrived."""
    frames: list = []
    async with asyncio.timeout(limit):
        async for frame in ws:
            if isinstance(frame, bytes):
                frames.append(decode_audio_frame(frame)[:2])
                continue
            frames.append(json.loads(frame))
            if sum(1 for f in frames if isinstance(f, dict) and f["type"] == "turn_end") == (
                turn_ends
            ):
                return frames


def _turns_left_running(stack) -> list:
    from functions.wiring import current_adapters

    table = current_adapters().session_items  # every turn of every connection: a scan
    items = table.client.scan(TableName=table.table_name)["Items"]
    return [item["sk"]["S"] for item in items if item.get("status", {}).get("S") == "running"]


async def test_asks_and_a_cancel_sent_at_once_leave_no_turn_behind(stack):
    """API Gateway handles a connection's messages concurrently: a barge-in and a cancel race
    the turn they stop. Whatever order they land in, every turn ends exactly once, no audio of a
    turn follows its turn_end, and no turn stays running."""
    assert stack.gateway.ordered_messages is False
    async with connect(stack.ws_url, max_size=None) as ws:
        for message in (
            # Short answers: where the race lets one of them complete, it speaks 4 s, not the
            # story's 30 (a minute of this test, 2026-12-07); none completes in the milliseconds
            # between the three messages.
            {"action": "ask", "prompt": "Hi there", "turn_id": "a"},
            {"action": "ask", "prompt": "Hello, who are you?", "turn_id": "b"},
            {"action": "cancel"},
        ):
            await ws.send(json.dumps(message))
        frames = await _frames_until(ws, turn_ends=2)
    control = [f for f in frames if isinstance(f, dict)]
    ends = {f["turn_id"]: f["status"] for f in control if f["type"] == "turn_end"}
    assert set(ends) == {"a", "b"}
    assert sorted(ends.values()).count("complete") <= 1
    numbers = {f["turn_id"]: f["turn"] for f in control if f["type"] == "turn_start"}
    for turn_id, number in numbers.items():
        end = next(
            i
            for i, f in enumerate(frames)
            if isinstance(f, dict) and f["type"] == "turn_end" and f["turn_id"] == turn_id
        )
        assert all(f[0] != number for f in frames[end:] if isinstance(f, tuple))
    await asyncio.to_thread(stack.functions.wait, 30)
    assert _turns_left_running(stack) == []


async def test_a_job_delivered_twice_is_spoken_once(stack):
    stack.functions.behaviour.duplicate_next = 1
    before = len(stack.functions.invocations)
    async with connect(stack.ws_url, max_size=None) as ws:
        await ws.send(json.dumps({"action": "speak", "text": "Once.", "turn_id": "once"}))
        frames = await _frames_until(ws, turn_ends=1)
        await asyncio.to_thread(stack.functions.wait, 30)
    kinds = [f["type"] for f in frames if isinstance(f, dict)]
    assert kinds.count("turn_start") == 1 and frames[-1]["status"] == "complete"
    runs = [r for r in stack.functions.invocations[before:] if r.name == "worker"]
    assert sorted(r.result["status"] for r in runs) == ["complete", "dropped"]
    assert [r.duplicate for r in runs].count(True) == 1


class WorkerKilled(BaseException):
    """The runtime died under the worker (out of memory, a timeout): nothing of it runs on."""


async def test_lambda_retries_a_dead_worker_which_ends_the_turn_without_speaking_again(
    stack, monkeypatch
):
    from functions.conversation.turn_frames import turn_start
    from functions.worker import run as worker_run
    from functions.worker.endings import relay_for

    async def start_then_die(job, adapters, invocation, policy, head):
        monkeypatch.setattr(worker_run, "run_claimed", real)  # only the first attempt dies
        await head.discard(adapters.speech_sessions)
        await relay_for(job, adapters).control(turn_start(job))
        raise WorkerKilled

    real = worker_run.run_claimed
    monkeypatch.setattr(worker_run, "run_claimed", start_then_die)
    before = len(stack.functions.invocations)
    async with connect(stack.ws_url, max_size=None) as ws:
        await ws.send(json.dumps({"action": "speak", "text": "Never twice.", "turn_id": "die"}))
        frames = await _frames_until(ws, turn_ends=1)
        await asyncio.to_thread(stack.functions.wait, 30)
    kinds = [f["type"] if isinstance(f, dict) else "audio" for f in frames]
    assert kinds == ["turn_start", "error", "turn_end"]  # one turn_start, no audio
    assert frames[1]["code"] == "internal_error" and frames[2]["status"] == "failed"
    runs = [r for r in stack.functions.invocations[before:] if r.name == "worker"]
    assert [r.attempt for r in runs] == [0, 1]  # Lambda's retry, with the same request id
    assert runs[0].request_id == runs[1].request_id and "WorkerKilled" in runs[0].error
    assert runs[1].result == {"status": "failed"}


async def test_slow_posts_cost_few_text_frames_and_the_text_arrives_whole(stack):
    """Each @connections post takes 30 ms, as a signed HTTPS round trip does on AWS: the ~250
    deltas of the default recording arrive as a few dozen coalesced text_delta frames. The turn
    is cancelled once its text is whole: what is asserted is the text's frames, and speaking the
    whole story (~30 s of audio) takes minutes on a slow machine."""
    from functions.adapters.replay_llm import ReplayBedrockClient

    recording = ReplayBedrockClient().default
    stack.gateway.post_faults.latency_seconds = 0.03
    frames: list = []
    try:
        async with connect(stack.ws_url, max_size=None) as ws:
            await ws.send(json.dumps({"action": "ask", "prompt": "Tell me a story"}))
            text, cancelled = "", False
            async with asyncio.timeout(120):
                async for frame in ws:
                    if isinstance(frame, bytes):
                        continue
                    frames.append(data := json.loads(frame))
                    if data["type"] == "text_delta":
                        text += data["text"]
                    if text == recording.text and not cancelled:
                        await ws.send(json.dumps({"action": "cancel"}))
                        cancelled = True
                    if data["type"] == "turn_end":
                        break
    finally:
        stack.gateway.post_faults.latency_seconds = 0.0
    deltas = [f for f in frames if f["type"] == "text_delta"]
    assert "".join(d["text"] for d in deltas) == recording.text
    assert [d["seq"] for d in deltas] == list(range(len(deltas)))
    seconds = recording.events[-1][0]
    assert len(deltas) <= seconds / 0.1 + 3 < len(recording.events) / 4
    # Cancelled while speaking, or complete where the speech was already over.
    assert frames[-1]["status"] in ("cancelled", "complete")
    assert [f for f in frames if f["type"] == "error"] == []


async def test_throttled_posts_are_retried_by_the_relay_alone(stack):
    faults = stack.gateway.post_faults
    posts_before = faults.posts
    faults.throttle_next = 2
    result = await run_turn(stack.ws_url, {"action": "speak", "text": "Throttled, then fine."})
    check_turn(result, "speak")
    received = len(result.events)  # every frame the client got
    # Two throttled answers, each retried once by the relay; the boto3 client never retries.
    assert faults.posts - posts_before == received + 2


@pytest.mark.parametrize("link", ["sagemaker", "websocket"])
async def test_words_heard_ms_and_the_history_over_both_speech_links(stack, link):
    # Real speech (Kokoro on the CPU) through the worker and either speech link: every words
    # frame comes before the audio it times, a cancel with heard_ms cuts the turn there, and
    # the history action answers with only the words heard, marked interrupted.
    await asyncio.to_thread(stack.use_speech_link, link)
    try:
        async with connect(stack.ws_url, max_size=None) as ws:
            await ws.send(json.dumps({"action": "speak", "text": "Warm up."}))
            async with asyncio.timeout(60):
                async for frame in ws:
                    if isinstance(frame, str) and json.loads(frame)["type"] == "turn_end":
                        break
            await ws.send(json.dumps({"action": "ask", "prompt": "Tell me everything"}))
            audio_ms, words, cancelled, heard = 0.0, [], False, None
            async with asyncio.timeout(120):
                async for frame in ws:
                    if isinstance(frame, bytes):
                        audio_ms += len(decode_audio_frame(frame)[2]) / 48  # 48 bytes a ms
                        if len(words) >= 6 and not cancelled:
                            heard = round((words[2]["end_ms"] + words[3]["end_ms"]) / 2, 1)
                            await ws.send(json.dumps({"action": "cancel", "heard_ms": heard}))
                            cancelled = True
                        continue
                    control = json.loads(frame)
                    if control["type"] == "words":
                        # No audio of these words has come before them.
                        assert min(w["start_ms"] for w in control["words"]) >= audio_ms
                        words += control["words"]
                    elif control["type"] == "turn_end":
                        assert control["status"] == "cancelled"
                        break
            assert cancelled, "no six words timed before the answer ended"
            ends = [w["end_ms"] for w in words]
            assert ends == sorted(ends) and all(w["start_ms"] < w["end_ms"] for w in words)
            await asyncio.to_thread(stack.functions.wait, 30)
            await ws.send(json.dumps({"action": "history"}))
            async with asyncio.timeout(10):
                history = json.loads(await ws.recv())
    finally:
        await asyncio.to_thread(stack.use_speech_link, "sagemaker")
    assert history["type"] == "history"
    last = history["messages"][-1]
    assert last["role"] == "assistant" and last["interrupted"] is True
    assert last["text"] == " ".join(w["text"] for w in words[:3])
    assert history["messages"][-2] == {
        "role": "user",
        "text": "Tell me everything",
        "interrupted": False,
    }
