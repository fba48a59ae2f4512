"""The words for what the rules refuse, one source for both front doors
(functions/conversation/refusals.py)."""

from __future__ import annotations

import re

from functions.conversation import refusals
from voicewire.client_protocol import AskAction, SpeakAction
from voicewire.error_codes import ErrorCode


def test_both_front_doors_refuse_with_the_same_codes_and_name_their_conversation():
    ask = AskAction(action="ask", prompt="Hi", turn_id="t1")
    for scope, where in (("connection", "on this connection"), ("session", "in this session")):
        duplicate = refusals.duplicate_turn("t1", scope)
        assert duplicate.code == ErrorCode.INVALID_FIELD and duplicate.turn_id == "t1"
        assert duplicate.message == f"turn_id 't1' was already used {where}"
        over = refusals.too_many_turns(ask, 20, scope)
        assert over.code == ErrorCode.TOO_MANY_TURNS and over.turn_id == "t1"
        assert over.message.startswith(f"this {scope} started 20 turns this minute")
        unknown = refusals.unknown_turn(None, scope)
        assert unknown.code == ErrorCode.UNKNOWN_TURN and unknown.turn_id is None
        assert unknown.message == f"a turn is not running {where}"
    assert (
        refusals.unknown_turn("t9", "session").message == "turn 't9' is not running in this session"
    )


def test_a_turn_without_an_id_gets_a_new_valid_one_and_a_speak_is_its_own_mode():
    made = {refusals.turn_id_of(SpeakAction(action="speak", text="Hello.")) for _ in range(50)}
    assert len(made) == 50 and all(re.fullmatch(r"t-[0-9a-f]{12}", turn_id) for turn_id in made)
    assert refusals.turn_id_of(AskAction(action="ask", prompt="Hi", turn_id="mine")) == "mine"
    assert refusals.mode_of(SpeakAction(action="speak", text="Hello.")) == "speak"
    assert refusals.mode_of(AskAction(action="ask", prompt="Hi", mode="batch")) == "batch"
