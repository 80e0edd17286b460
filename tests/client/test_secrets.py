"""A planted credential appears nowhere: not in reprs, stats, the CLI's output, metrics, log lines
(the driver's and every Ray worker's) or error messages. On moto's S3 server (which accepts any
credentials) with a real store on Ray."""

from __future__ import annotations

import json
import logging
import os
import traceback
import urllib.request
import uuid
from pathlib import Path

import pytest
from support.s3 import S3_BUCKET, s3_options
from support.waits import wait_until

import leveled_ray as lr
from leveled_ray.cli import main as cli
from leveled_ray.files.store import ObjectStore

pytestmark = [pytest.mark.s3, pytest.mark.ray]


def error_text(call) -> str:
    try:
        call()
    except Exception as exc:  # noqa: BLE001 - every error's text is searched
        return "".join(traceback.format_exception(exc))
    return ""


def test_a_planted_secret_appears_nowhere(ray_cluster, moto_endpoint, capsys, caplog):
    secret = f"planted-{uuid.uuid4().hex}"
    token = f"token-{uuid.uuid4().hex}"
    caplog.set_level(logging.DEBUG)
    options = s3_options(moto_endpoint, metrics_interval_s=0.5).replace(
        object_store=dict(s3_secret_access_key=secret, s3_session_token=token))
    url = f"s3://{S3_BUCKET}/secret-{uuid.uuid4().hex[:8]}"
    name = f"secret-{uuid.uuid4().hex[:8]}"
    seen = [repr(options), str(options), repr(ObjectStore.from_url(url, options).config)]
    store = lr.open(url, options, name=name)
    try:
        store.put("b", "k", b"v")
        assert store.get("b", "k") == b"v"
        seen += [json.dumps(store.stats(), default=str), repr(store), repr(store.options)]
        seen.append(error_text(lambda: store.put("b", "", b"v")))  # a refused call
        # Requests that fail: a bucket that does not exist, an endpoint that refuses.
        seen.append(error_text(lambda: lr.admin(f"s3://no-such-{uuid.uuid4().hex[:8]}/x",
                                                options).list_checkpoints()))
        seen.append(error_text(lambda: lr.admin(url, options.replace(
            object_store=dict(s3_endpoint="http://127.0.0.1:9", max_retries=0,
                              retry_timeout_s=1.0))).gc()))
        # The command line, with the credentials given as options.
        settings = {"s3_endpoint": moto_endpoint, "s3_secret_access_key": secret,
                    "s3_session_token": token,
                    "s3_access_key_id": options.object_store.s3_access_key_id,
                    "s3_region": "us-east-1"}
        args = ["--url", url] + [arg for name, value in settings.items()
                                 for arg in ("--option", f"object_store.{name}={value}")]
        for command in (["stats", "--name", name], ["inspect"], ["gc", "--dry-run"],
                        ["checkpoint", "list"]):
            cli.main(command + args)
        cli.main(["inspect", "--url", url,
                  "--option", "object_store.s3_endpoint=http://127.0.0.1:9",
                  "--option", f"object_store.s3_secret_access_key={secret}",
                  "--option", "object_store.max_retries=0",
                  "--option", "object_store.retry_timeout_s=1"])
        out = capsys.readouterr()
        seen += [out.out, out.err]
        # Metrics, as Ray's Prometheus endpoint serves them: that of the Bookie's node (any
        # of the session's nodes), once it exports this store's.
        node = store.stats()["process"]["node"]
        (port,) = [n["MetricsExportPort"] for n in ray_cluster.nodes() if n["NodeID"] == node]

        def scrape() -> str:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
            return text if f'store="{name}"' in text else ""

        seen.append(wait_until(scrape, timeout=60, interval=0.5))
    finally:
        store.close()
    seen += [r.getMessage() for r in caplog.records]
    seen += [str(r.exc_info) for r in caplog.records if r.exc_info]
    logs = Path(os.environ["RAY_TMPDIR"])  # every Ray process's log files this session
    for path in logs.rglob("*"):
        if path.is_file() and path.suffix in (".log", ".out", ".err", ".txt"):
            seen.append(path.read_bytes().decode(errors="replace"))
    leaks = [text[:200] for text in seen if secret in text or token in text]
    assert not leaks, f"the planted secret appeared in: {leaks}"
    assert "***" in repr(options) and any("leveled_puts" in text for text in seen)
