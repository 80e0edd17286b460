"""Finds the package's folders (the metadata is in setup.cfg).

The repository root *is* the package ``leveled_ray`` (``package_dir``), so every folder below
it that holds a module is a subpackage ``leveled_ray.<folder>``. They are found here, not
listed, so a new folder cannot be left out of the wheel (``tests/test_wheel.py`` checks the
built wheel against the tree).
"""

from pathlib import Path

from setuptools import find_namespace_packages, setup
from setuptools.command.build_py import build_py

# Folders of the repository that are not part of the package.
NOT_PACKAGE = ["tests", "tests.*", "bench", "bench.*", "docs", "docs.*", "build", "build.*",
               "site", "site.*", "data", "data.*", "dist", "dist.*", "*__pycache__*"]


def subpackages() -> list[str]:
    found = find_namespace_packages(where=".", exclude=NOT_PACKAGE)
    return [name for name in found if any(Path(*name.split(".")).glob("*.py"))]


class BuildPy(build_py):
    """Leaves this file out: at the root, it would otherwise ship as ``leveled_ray.setup``."""

    def find_package_modules(self, package, package_dir):
        return [m for m in super().find_package_modules(package, package_dir)
                if (m[0], m[1]) != ("leveled_ray", "setup")]


setup(packages=["leveled_ray"] + [f"leveled_ray.{name}" for name in subpackages()],
      cmdclass={"build_py": BuildPy})
