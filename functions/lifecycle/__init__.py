"""A turn's lifecycle, once, for every front door: from a client's message to the turn's end.

- ``front_door``: a client message answered (``answer``): an ``ask``/``speak`` admitted by the
  conversation's rules and launched, a ``cancel``, ``voices``, ``history``; over a
  ``FrontDoor`` the host supplies.
- ``turn_run``: a launched turn run, then finished in the one order that loses nothing (keep
  the history, record the end, tell the client); over a ``TurnHost``.

The hosts are thin: the WebSocket API's message route (``functions.handlers.messages``: a
DynamoDB-backed conversation, a Lambda worker invoked) and worker (``functions.worker.run``: a
claim, a lease, guards), and the AgentCore app (``functions.agentcore.conversation``: the
session's state in memory, a task per turn). Failures become frames in one table,
``functions.failure_frames``.
"""
