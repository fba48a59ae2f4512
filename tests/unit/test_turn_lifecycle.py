"""The turn lifecycle's front door (functions.lifecycle.front_door), over a real in-memory
conversation: what a client's message does, refuses and tells, and what a door is asked to do.
Both front doors host it (the integration tests run it through each); here its own decisions."""

from __future__ import annotations

import asyncio
import json

from botocore.exceptions import ClientError as AwsClientError

from functions.conversation.state import MemoryConversation
from functions.failure_frames import WorkerUnavailable
from functions.lifecycle.front_door import AdmittedTurn, answer


class RecordingDoor:
    """A front door that keeps what the lifecycle told and asked of it."""

    scope = "session"
    voices = None
    max_turns_per_minute = 2

    def __init__(self, state=None, refuse_launch: Exception | None = None) -> None:
        self.state = state or MemoryConversation()
        self.refuse_launch = refuse_launch
        self.told: list[dict] = []
        self.launched: list[AdmittedTurn] = []
        self.stopped: list[str] = []

    async def offload(self, call, *args):
        return call(*args)

    async def tell(self, frame) -> None:
        self.told.append(json.loads(frame.model_dump_json(exclude_none=True)))

    async def launch(self, turn: AdmittedTurn) -> None:
        if self.refuse_launch is not None:
            raise self.refuse_launch
        self.launched.append(turn)

    async def stop(self, turn_id: str) -> None:
        self.stopped.append(turn_id)

    async def listen(self, action) -> None:
        self.told.append({"type": "listened"})


def say(door: RecordingDoor, **action) -> list[dict]:
    before = len(door.told)
    asyncio.run(answer(door, json.dumps(action), accepted_at=1_000.0))
    return door.told[before:]


def test_an_ask_is_admitted_numbered_and_launched_and_tells_nothing_itself():
    door = RecordingDoor()
    assert say(door, action="ask", prompt="hello", turn_id="a") == []
    (turn,) = door.launched
    assert (turn.turn_id, turn.turn, turn.mode, turn.replaced) == ("a", 1, "bidi", None)
    assert turn.accepted_at == 1_000.0 and door.state.active_turn_id == "a"


def test_a_new_turn_replaces_the_running_one_and_says_which():
    door = RecordingDoor()
    say(door, action="ask", prompt="one", turn_id="a")
    say(door, action="speak", text="two", turn_id="b", heard_ms=300)
    assert door.launched[1].replaced == "a" and door.state.heard_ms("a") == 300


def test_refusals_are_frames_with_their_codes_and_launch_nothing():
    door = RecordingDoor()
    (bad,) = say(door, action="shout")
    assert bad["code"] == "unknown_action"
    say(door, action="ask", prompt="one", turn_id="a")
    (again,) = say(door, action="ask", prompt="one", turn_id="a")
    assert again["code"] == "invalid_field" and "session" in again["message"]
    # The duplicate was counted in the minute's window (the window admits before the start):
    # the limit of 2 is reached.
    (limit,) = say(door, action="ask", prompt="three", turn_id="c")
    assert limit["code"] == "too_many_turns" and limit["turn_id"] == "c"
    assert [turn.turn_id for turn in door.launched] == ["a"]


def test_a_closed_conversation_over_its_limit_is_told_nothing():
    door = RecordingDoor()
    say(door, action="ask", prompt="one", turn_id="a")
    say(door, action="ask", prompt="two", turn_id="b")
    door.state.closed = True
    assert say(door, action="ask", prompt="three", turn_id="c") == []


def test_a_turn_nothing_can_run_ends_failed_for_the_client_and_the_state():
    door = RecordingDoor(refuse_launch=WorkerUnavailable("TooManyRequestsException"))
    frames = say(door, action="ask", prompt="hello", turn_id="a")
    assert [frame["type"] for frame in frames] == ["turn_start", "error", "turn_end"]
    assert frames[1]["code"] == "worker_unavailable" and frames[1]["turn_id"] == "a"
    assert frames[2]["status"] == "failed"
    assert door.state.active_turn_id is None  # the conversation can ask again at once
    door.refuse_launch = None
    assert say(door, action="ask", prompt="hello", turn_id="b") == [] and door.launched


class UnwritableState(MemoryConversation):
    def admit_turn(self, limit: int, now: float) -> bool:
        raise AwsClientError(
            {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "x"}},
            "UpdateItem",
        )


def test_a_state_that_cannot_be_written_starts_nothing_and_says_so():
    door = RecordingDoor(state=UnwritableState())
    (frame,) = say(door, action="ask", prompt="hello", turn_id="a")
    assert frame["code"] == "state_unavailable" and frame["turn_id"] == "a"
    assert door.launched == [] and door.state.turn_counter == 0


def test_a_cancel_stops_the_running_turn_through_the_door_or_names_an_unknown_one():
    door = RecordingDoor()
    (unknown,) = say(door, action="cancel")
    assert unknown["code"] == "unknown_turn"
    say(door, action="ask", prompt="hello", turn_id="a")
    assert say(door, action="cancel", turn_id="a", heard_ms=120) == []
    assert door.stopped == ["a"] and door.state.heard_ms("a") == 120


def test_voices_history_and_listen_are_answered():
    door = RecordingDoor()
    (voices,) = say(door, action="voices")
    assert voices["type"] == "voices" and voices["voices"]
    door.state.history = [
        {"role": "user", "content": [{"text": "hi"}]},
        {"role": "assistant", "content": [{"text": "hello"}]},
    ]
    (history,) = say(door, action="history")
    assert [message["text"] for message in history["messages"]] == ["hi", "hello"]
    assert say(door, action="listen") == [{"type": "listened"}]
