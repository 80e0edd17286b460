"""The README's five-minute tour, run as it is written (on a store of its own)."""

import contextlib
import io

from support.readme_tour import tour as readme_tour


def test_the_readme_tour_runs_and_answers_what_its_comments_say(ray_cluster, tmp_path):
    tour = readme_tour(f"file://{tmp_path}/db")
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
