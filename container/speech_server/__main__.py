"""``python -m speech_server [serve]``: the container's entry point.

SageMaker starts a container with the argument ``serve``; it is accepted and means the same as
none. Everything else comes from ``VOICEWIRE_*`` environment variables (see ``settings.py``).
"""

import sys

from speech_server.process_exit import stop_outside_serving

stop_outside_serving()  # before the imports below: a Ctrl-C during them is one line, no traceback

from speech_server.server import main  # noqa: E402

if sys.argv[1:] not in ([], ["serve"]):
    sys.exit(f"usage: python -m speech_server [serve] (got {' '.join(sys.argv[1:])})")
main()
