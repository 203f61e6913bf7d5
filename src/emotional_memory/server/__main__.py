"""``python -m emotional_memory.server`` = the ``emotional-memory`` command."""

import sys

from emotional_memory.server.cli import main

sys.exit(main())
