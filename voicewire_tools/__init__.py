"""The tools that assemble the tiers: the ``voicewire`` command, the local stack (the AWS
topology on one machine), the infra CLIs (``speech-infra``, ``agent-infra``).

They sit on top: they import the shared library (``voicewire``) and the tiers (``functions``,
``speech_server``); nothing imports them but the tests and the benchmarks.
"""
