"""The Lambda worker: one turn per asynchronous invocation, from its claim to its end.

- ``run``: a job from claim to end (the turn itself is ``functions.turn``'s).
- ``job``: what the message route hands the worker.
- ``policy``: how the worker is invoked, retried and timed (the stacks apply the same values).
- ``guards``: what stops a running turn besides its own end (a cancel in its record, the
  invocation's deadline).
- ``endings``: the ways a turn ends without being spoken.
- ``metrics``: the turn's CloudWatch metrics.
"""
