"""The speech endpoint's autoscaling targets, with their reasons; ``voicewire bench capacity``
derives them and checks them against these (no CDK here, so the bench reads them cheaply).

Target tracking on what loads an instance, as the container reports it
(``speech_server/load_metrics.py``), per-instance averages (docs/capacity.md):

- the engine's busy share: an instance is sized for 60% of it, since the cliff, where every
  listener's audio queues, is at 100%;
- open bidirectional sessions: ~38 conversations keep an ml.g5.xlarge's engine 60% busy on
  paper. Sessions move first when conversations arrive; the engine's share is the truth of it.
  Out when either is over its target, in only when both are under.
"""

MIN_INSTANCES = 1
MAX_INSTANCES = 4
TARGET_ENGINE_BUSY_PERCENT = 60.0
TARGET_SESSIONS_PER_INSTANCE = 38.0
# Out quickly (a new instance takes minutes to serve), in slowly (cold starts hurt).
SCALE_OUT_COOLDOWN_SECONDS = 120
SCALE_IN_COOLDOWN_SECONDS = 900
