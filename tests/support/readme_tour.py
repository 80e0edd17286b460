"""The README's five-minute tour, as its own script: ``python tests/support/readme_tour.py
OUT [URL]`` writes it to OUT, with its store at URL instead of ``file:///tmp/db``. The tests
run it (``tests/client/test_readme_tour.py``), ``make lint`` type-checks it and
``.ci/wheel-check`` runs and type-checks it with the package installed from its wheel."""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent.parent / "README.md"
TOUR_URL = "file:///tmp/db"


def tour(url: str = TOUR_URL) -> str:
    """The tour's code: the README's Python block that imports the package."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    code = next(b for b in blocks if "import leveled_ray as lr" in b)
    return code.replace(TOUR_URL, url)


if __name__ == "__main__":
    Path(sys.argv[1]).write_text(tour(*sys.argv[2:3]))
