"""The functions' settings: what the environment gives, validated, with errors that name it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from functions.access.listen_signer import ENVIRONMENT_VARIABLES
from functions.settings import (
    DEFAULT_SYSTEM_PROMPT,
    Settings,
    SettingsError,
    environment_variables,
)

DEPLOYED = {
    "VOICEWIRE_TABLE": "voicewire-sessions-a1b2",
    "VOICEWIRE_SPEECH_TARGET": "kokoro-82m",
    "VOICEWIRE_LLM": "bedrock",
    "VOICEWIRE_BEDROCK_MODEL_ID": "us.anthropic.claude-haiku-4-5-20251001-v1:0",
    "VOICEWIRE_TOKEN_SECRET_PARAMETER": "/voicewire/token-secret",
    "VOICEWIRE_VOICES": "af_heart,am_adam",
    "VOICEWIRE_ALLOWED_ORIGINS": "",
    "VOICEWIRE_MAX_TURNS_PER_MINUTE": "30",
    "VOICEWIRE_MAX_SPEECH_SECONDS_PER_TURN": "360",
    "VOICEWIRE_AUDIO_DELIVERY": "base64",
    "AWS_REGION": "eu-west-1",
    "PATH": "/usr/bin",  # the rest of a Lambda environment: not the settings' business
}


def test_a_deployed_environment_becomes_typed_settings():
    settings = Settings.from_env(DEPLOYED)
    assert settings.table_name == "voicewire-sessions-a1b2"
    assert settings.voices == frozenset({"af_heart", "am_adam"})
    assert settings.allowed_origins is None  # empty: any origin
    assert settings.max_turns_per_minute == 30 and settings.max_speech_seconds_per_turn == 360.0
    assert settings.audio_delivery == "base64" and settings.region == "eu-west-1"
    assert settings.callback_url is None and settings.system_prompt == DEFAULT_SYSTEM_PROMPT
    assert settings.speech_session_reuse is True  # unset: its default


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("VOICEWIRE_LLM", "bedrok", "'bedrock', 'replay' or 'local'"),
        ("VOICEWIRE_BEDROCK_MODEL_ID", "", "needs a model or inference profile id"),
        ("VOICEWIRE_BEDROCK_MODEL_ID", "anthropic claude", "should match pattern"),
        ("VOICEWIRE_TABLE", "", "at least 1 character"),
        ("VOICEWIRE_MAX_TURNS_PER_MINUTE", "0", "greater than or equal to 1"),
        ("VOICEWIRE_MAX_TURNS_PER_MINUTE", "thirty", "valid integer"),
        ("VOICEWIRE_SPEECH_CHUNK_TIMEOUT_SECONDS", "-1", "greater than 0"),
        ("VOICEWIRE_SPEECH_SESSION_REUSE", "maybe", "valid boolean"),
        ("VOICEWIRE_AUDIO_DELIVERY", "base-64", "'binary' or 'base64'"),
    ],
)
def test_a_wrong_variable_is_refused_with_its_name_and_value(name, value, says):
    with pytest.raises(SettingsError) as raised:
        Settings.from_env(DEPLOYED | {name: value})
    message = str(raised.value)
    assert message.startswith("the functions' settings are wrong: ")
    assert says in message
    if name != "VOICEWIRE_BEDROCK_MODEL_ID" or value:
        assert f"{name}: " in message and repr(value) in message  # which one, and what it is


def test_every_wrong_variable_is_named_at_once():
    wrong = {"VOICEWIRE_LLM": "gpt", "VOICEWIRE_MAX_OUTPUT_TOKENS": "-5"}
    with pytest.raises(SettingsError) as raised:
        Settings.from_env(DEPLOYED | wrong)
    assert "VOICEWIRE_LLM: " in str(raised.value)
    assert "VOICEWIRE_MAX_OUTPUT_TOKENS: " in str(raised.value)


def test_replay_needs_no_model_id_and_an_empty_optional_is_none():
    env = {
        "VOICEWIRE_LLM": "replay",
        "VOICEWIRE_TOKEN_SECRET_PARAMETER": "",
        "VOICEWIRE_CALLBACK_URL": "",
        "VOICEWIRE_VOICES": " , ",
    }
    settings = Settings.from_env(env)
    assert settings.llm == "replay" and settings.bedrock_model_id == ""
    assert settings.token_secret_parameter is None and settings.callback_url is None
    assert settings.voices is None


def test_the_region_comes_from_aws_region_or_else_aws_default_region():
    replay = {"VOICEWIRE_LLM": "replay"}
    assert Settings.from_env(replay | {"AWS_DEFAULT_REGION": "us-west-2"}).region == "us-west-2"
    both = replay | {"AWS_REGION": "eu-west-3", "AWS_DEFAULT_REGION": "us-west-2"}
    assert Settings.from_env(both).region == "eu-west-3"
    assert Settings.from_env(replay).region is None


def test_origins_are_normalized_as_browsers_send_them():
    origins = "https://App.Example.com/, https://admin.example.com"
    env = {"VOICEWIRE_LLM": "replay", "VOICEWIRE_ALLOWED_ORIGINS": origins}
    settings = Settings.from_env(env)
    assert settings.allowed_origins == {"https://app.example.com", "https://admin.example.com"}


def test_settings_built_from_values_read_no_environment(monkeypatch):
    """The local stack and the tests give values: the process's own variables change nothing."""
    monkeypatch.setenv("VOICEWIRE_MAX_TURNS_PER_MINUTE", "1")
    monkeypatch.setenv("VOICEWIRE_LLM", "bedrok")
    settings = Settings(llm="replay", table_name="t")
    assert settings.max_turns_per_minute == 30 and settings.table_name == "t"


def test_values_are_validated_too_and_a_mistyped_field_is_refused():
    with pytest.raises(ValidationError, match="'bedrock', 'replay' or 'local'"):
        Settings(llm="bedrok")
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        Settings(llm="replay", max_turn_per_minute=3)
    with pytest.raises(ValidationError, match="needs a model"):
        Settings()  # the default LLM is Bedrock, which needs a model id


def test_changed_settings_are_validated_again_and_frozen():
    settings = Settings(llm="replay")
    assert settings.changed(max_turns_per_minute=3).max_turns_per_minute == 3
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        settings.changed(max_turns_per_minute=0)
    with pytest.raises(ValidationError, match="frozen"):
        settings.max_turns_per_minute = 3


def test_the_variables_read_are_each_fields_own():
    names = environment_variables()
    assert {
        "VOICEWIRE_LLM",
        "VOICEWIRE_BEDROCK_MODEL_ID",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
    } <= names
    assert all(name.isupper() for name in names)
    # The region has two; the listen signer (functions/access/listen_signer.py) reads its own.
    assert names >= ENVIRONMENT_VARIABLES
    assert len(names - ENVIRONMENT_VARIABLES) == len(Settings.model_fields) + 1
