"""The package as users install it: the wheel holds every module of the tree.

The editable install the tests use imports straight from the checkout, so a folder left out of
the wheel would pass every other test. ``.ci/wheel-check`` goes further: it installs the
wheel into a fresh venv and runs the demo, the README's tour and the typed user scripts
there.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile

from support import REPO_ROOT

#: Folders of the repository that are not part of the package.
NOT_PACKAGE = ("tests/", "bench/", "docs/")


def tracked_files() -> list[str]:
    """The checkout's files as git knows them (new files added but not committed included)."""
    return subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                          cwd=REPO_ROOT, check=True, capture_output=True,
                          text=True).stdout.splitlines()


def tracked_modules() -> set[str]:
    """Every module of the package in the checkout, as its path inside the wheel."""
    return {f"leveled_ray/{path}" for path in tracked_files()
            if (path.endswith(".py") or path == "py.typed")
            and not path.startswith(NOT_PACKAGE) and path != "setup.py"}


def test_the_wheel_holds_every_module_of_the_tree(tmp_path):
    # Built from a copy of the tracked files: a build/ folder left in the checkout by an
    # earlier build would otherwise lend the wheel what the package list leaves out.
    source = tmp_path / "src"
    for path in tracked_files():
        if (REPO_ROOT / path).is_file():
            (source / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / path, source / path)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--quiet", "-w", str(tmp_path), str(source)], check=True)
    [wheel] = tmp_path.glob("leveled_ray-*.whl")
    with zipfile.ZipFile(wheel) as z:
        shipped = {n for n in z.namelist() if n.startswith("leveled_ray/")}
    expected = tracked_modules()
    assert "leveled_ray/replication/__init__.py" in expected
    assert expected - shipped == set(), "modules missing from the wheel"
    assert {n for n in shipped if n.endswith(".py")} - expected == set(), "files not modules"
