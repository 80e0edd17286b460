"""The Spark guide's pipeline example (docs/guide/spark.md), run as it is written:
Ray-on-Spark set up on a real local Spark, a write installed through the Bookie on it, Spark
tasks calling the Bookie, a checkpoint read back and saved as Parquet, and the cluster torn
down."""

import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest
from support import REPO_ROOT

import leveled_ray as lr

pytestmark = [pytest.mark.spark, pytest.mark.example]
pytest.importorskip("pyspark")


def readme_example() -> str:
    text = (REPO_ROOT / "docs" / "guide" / "spark.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    return next(b for b in blocks if "spark-pipeline-example" in b)


def test_the_spark_guides_pipeline_runs(tmp_path):
    script = tmp_path / "example.py"
    script.write_text(readme_example())
    url, out = f"file://{tmp_path}/store", str(tmp_path / "users")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    ray_tmp = tempfile.mkdtemp(prefix="lr-ros-")  # short: Ray's socket paths must fit
    env.update(STORE_URL=url, PARQUET_OUT=out, RAY_TMPDIR=ray_tmp, PYTHONUNBUFFERED="1")
    try:
        done = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert "found 1000 of 1000" in done.stdout
    assert f"exported 50000 rows to {out}" in done.stdout
    # Torn down: the store was closed cleanly, so a reader finds every row with nothing to
    # replay, and only the example's own checkpoint is left.
    with lr.reader(url) as r:
        assert sum(1 for _ in r.fold_keys("users")) == 50_000
        assert r.get("users", "u000042") == b"profile 42"
    assert [c.name for c in lr.admin(url).list_checkpoints()] == ["example"]
