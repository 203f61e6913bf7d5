"""Entry point: ``python -m training``."""

from training.cli import main

raise SystemExit(main())
