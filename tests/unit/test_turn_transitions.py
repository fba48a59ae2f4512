"""The table of a turn's status changes (functions.conversation.turn_transitions): what it
allows, and the DynamoDB condition the ledger writes from it (run against DynamoDB by
test_conversation_state.py and the ledger's tests)."""

from __future__ import annotations

from typing import get_args

import pytest

from functions.conversation.turn_transitions import CHANGES_FROM, TurnChange, from_condition, may
from voicewire.client_protocol import ENDED_STATUSES, TurnStatus


@pytest.mark.parametrize("change", list(TurnChange))
def test_an_ended_turn_changes_no_more(change):
    assert not any(may(change, status) for status in ENDED_STATUSES)


def test_only_a_running_turn_is_finished_and_only_a_starting_one_starts_running():
    assert [s for s in get_args(TurnStatus) if may(TurnChange.FINISH, s)] == ["running"]
    assert [s for s in get_args(TurnStatus) if may(TurnChange.RUN, s)] == ["starting"]
    assert may(TurnChange.CANCEL, "starting") and may(TurnChange.FAIL, "starting")


def test_the_condition_names_each_status_the_change_may_come_from():
    condition, values = from_condition(TurnChange.CANCEL)
    assert condition == "#status IN (:from_starting, :from_running)"
    assert values == {":from_starting": "starting", ":from_running": "running"}
    for change, statuses in CHANGES_FROM.items():
        assert sorted(from_condition(change)[1].values()) == sorted(statuses)
