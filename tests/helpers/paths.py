"""Where the test tree's parts are: this folder (helpers and the CPU test doubles), tests/, the checkout."""

from __future__ import annotations

import os

HELPERS = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HELPERS)
REPO = os.path.dirname(TESTS)
FIXTURES = os.path.join(TESTS, "fixtures")
