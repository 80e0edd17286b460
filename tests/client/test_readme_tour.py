"""The README's five-minute tour, run as it is written (on a store of its own)."""

import contextlib
import io
import re

from support import REPO_ROOT


def test_the_readme_tour_runs_and_answers_what_its_comments_say(ray_cluster, tmp_path):
    text = (REPO_ROOT / "README.md").read_text()
    tour = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S)
                if "import leveled_ray as lr" in b)
    tour = tour.replace("file:///tmp/db", f"file://{tmp_path}/db")
    scope: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(tour, "README.md", "exec"), scope)  # noqa: S102 - the README's own code
    lr = scope["lr"]
    assert scope["sqn"] > 0
    changes = printed.getvalue().splitlines()
    assert changes[0].startswith("users alice put") and len(changes) == 10_002
    reader = lr.reader(f"file://{tmp_path}/db")
    try:
        assert reader.get("users", "alice") == b"v2"
        assert list(reader.index_query("users", "city_bin", "paris", "paris")) == ["alice"]
    finally:
        reader.close()
