"""Modules stay small: no file of the package (its tests, benchmarks and simulation aside) is
over 500 lines, so that each keeps one job."""

import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
MOST_LINES = 500


def test_no_package_module_is_over_500_lines():
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    package = [p for p in tracked if p.split("/")[0] not in ("tests", "bench", "testing")]
    assert len(package) > 100  # the package's modules were found
    long = {p: n for p in package
            if (n := len((ROOT / p).read_text().splitlines())) > MOST_LINES}
    assert not long, long
