"""``python -m labkit.grading student|check|grade|reference`` (the Makefile's entry points)."""

import sys

from labkit.grading.commands import main

sys.exit(main())
