"""Helpers shared by the tests; ``tests/conftest.py`` holds the fixtures."""

from pathlib import Path

#: The checkout: the ``leveled_ray`` package itself.
REPO_ROOT = Path(__file__).resolve().parent.parent.parent
