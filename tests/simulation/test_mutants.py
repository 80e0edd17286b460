"""The mutation catalogue (``make mutate``) stays applicable: each mutant's text is found once
in its module, so an edit of the code that moves it fails here, not at the end of a long run."""

import os
import pathlib

from mutants import MUTANTS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_each_mutant_is_found_once_in_its_module():
    assert len(MUTANTS) >= 30
    stale = [m.name for m in MUTANTS
             if pathlib.Path(ROOT, m.path).read_text().count(m.old) != 1]
    assert stale == []
