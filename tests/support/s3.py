"""moto's S3 server as the tests use it: its credentials, bucket and client options."""

from __future__ import annotations

import socket

import leveled_ray as lr

S3_KEY = "testing"
S3_REGION = "us-east-1"
S3_BUCKET = "leveled-test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3_options(endpoint: str, **changes) -> lr.Options:
    """Options for moto's S3 server at ``endpoint``, with ``changes`` (groups as dicts)."""
    return lr.Options().replace(**changes).replace(object_store=dict(
        s3_endpoint=endpoint, s3_region=S3_REGION, s3_access_key_id=S3_KEY,
        s3_secret_access_key=S3_KEY))


#: Object-store settings under which a failing request fails quickly (for stores behind the
#: fault proxy): tried three times within 3 s, and a write whose outcome is unknown settled
#: within 4 s.
QUICK_FAILURES = dict(object_store=dict(request_timeout_s=1.0, connect_timeout_s=1.0,
                                        retry_timeout_s=3.0, max_retries=2,
                                        retry_max_backoff_s=0.2, write_resolve_s=2.0))
