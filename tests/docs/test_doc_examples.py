"""Every Python example of the README and of docs/ runs as written, each document's blocks in
order in one namespace, read by sybil. A block that cannot run here says why, just before it:
``<!-- skip: next "reason" -->``; setup a reader need not see goes in an
``<!-- invisible-code-block: python -->`` comment. The example URLs (``s3://bkt/...``,
``file:///tmp/db``) point into the test's own directory."""

from __future__ import annotations

import re
import textwrap
import unittest

import pytest
from support import REPO_ROOT
from sybil import Sybil
from sybil.evaluators.python import pad
from sybil.parsers.markdown import CodeBlockParser, SkipParser

import leveled_ray as lr

pytestmark = pytest.mark.ray

DOCS = sorted(["README.md", *(str(p.relative_to(REPO_ROOT))
                              for p in (REPO_ROOT / "docs").rglob("*.md"))])
#: Example URLs, and where the test puts them.
PLACES = re.compile(r"s3://(bkt|backups)/|file:///tmp/db")


def python_blocks(doc: str) -> int:
    return len(re.findall(r"^```python$|invisible-code-block: python",
                          (REPO_ROOT / doc).read_text(), re.M))


def test_every_document_with_python_is_read():
    assert sum(python_blocks(doc) for doc in DOCS) >= 15
    assert "docs/guide/using.md" in DOCS


@pytest.mark.parametrize("doc", [d for d in DOCS if python_blocks(d)])
def test_the_examples_of_a_document_run(doc, ray_cluster, tmp_path):
    def here(match: re.Match) -> str:
        if match.group(0) == "file:///tmp/db":
            return f"file://{tmp_path}/db"
        return f"file://{tmp_path}/{match.group(1)}/"

    def evaluate(example) -> None:
        source = PLACES.sub(here, textwrap.dedent(example.parsed))
        exec(compile(pad(source, example.line + example.parsed.line_offset), doc, "exec"),
             example.namespace)

    document = Sybil(parsers=[CodeBlockParser("python", evaluate), SkipParser()]).parse(
        REPO_ROOT / doc)
    document.namespace.update(lr=lr, url=f"file://{tmp_path}/example")
    ran, skipped = 0, []
    try:
        for example in document.examples():
            try:
                example.evaluate()
            except unittest.SkipTest as reason:  # this block only: the rest of the page runs
                skipped.append(str(reason))
            else:
                ran += 1
    finally:
        for value in list(document.namespace.values()):
            if isinstance(value, (lr.Store, lr.ShardedStore)):
                value.close()
    assert ran > 0
    assert all(len(reason) > 20 for reason in skipped), skipped  # each says why
