"""Speech in: what a client needs to stream a microphone to Amazon Transcribe streaming.

- ``transcribe_url``: the presigned ``wss://`` URL (SigV4 in the query) a client opens, minted
  by whoever holds the credentials (the message route, the AgentCore app, a CLI);
- ``transcribe_events``: the event-stream messages on that WebSocket: ``AudioEvent`` in,
  ``TranscriptEvent`` and exceptions out, with typed models of the transcript's JSON.

Both speak AWS's protocol exactly, so the same client works against AWS and against the local
endpoint ``voicewire_tools.local_stack.transcribe_streaming``. Import the submodules you need:
this package imports nothing, so minting a URL does not load the event-stream code.
"""
