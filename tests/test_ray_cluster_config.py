"""ray_cluster.yaml passes Ray's own cluster-config validation (no AWS calls, no Ray cluster)."""

from __future__ import annotations

import copy
import re

import jsonschema
import pytest
import ray
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config
from support import REPO_ROOT

CONFIG_PATH = REPO_ROOT / "ray_cluster.yaml"
S3_ENV_VARS = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_ENDPOINT_URL",
)
ENV_FILE = "~/.leveled-ray/cluster.env"
TOKEN_FILE = "~/.ray/auth_token"


@pytest.fixture
def config() -> dict:
    with open(CONFIG_PATH) as f:
        return yaml.safe_load(f)


def test_raw_config_passes_ray_validation(config):
    validate_config(config)


def test_prepared_config_passes_ray_validation(config):
    # What `ray up` does before it talks to the provider: fill in the AWS defaults, merge the
    # setup commands, then validate.
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    assert prepared["provider"]["type"] == "aws"
    assert prepared["head_node_type"] in prepared["available_node_types"]
    workers = prepared["available_node_types"]["ray.worker.default"]
    assert workers["node_config"]["InstanceType"]
    assert 0 <= workers["min_workers"] <= workers["max_workers"] <= prepared["max_workers"]
    # Our setup commands replace Ray's defaults and reach both node kinds.
    for key in ("head_setup_commands", "worker_setup_commands"):
        assert prepared[key][: len(config["setup_commands"])] == config["setup_commands"]


def test_setup_installs_leveled_ray_with_the_local_ray_version(config):
    installs = [c for c in config["setup_commands"] if c.startswith("pip install")]
    assert len(installs) == 1
    assert '"${LEVELED_RAY_PIP_SPEC:-leveled-ray}"' in installs[0]
    # The cluster's Ray must match the Ray that runs `ray up`.
    pinned = re.search(r'"ray\[default\]==([^"]+)"', installs[0])
    assert pinned, installs[0]
    assert pinned.group(1) == ray.__version__


def test_s3_settings_and_token_come_from_the_launching_machine(config):
    mounts = config["file_mounts"]
    assert mounts[ENV_FILE] == ENV_FILE
    assert mounts[TOKEN_FILE] == TOKEN_FILE
    # Every shell on a node (setup, ray start, attach, exec) exports the env file's settings.
    loads_env = f"set -a; . {ENV_FILE}; set +a"
    assert any(loads_env in c and "~/.bashrc" in c for c in config["setup_commands"])
    # The comment's one-liner that writes the env file picks up every S3 variable leveled-ray
    # reads.
    text = CONFIG_PATH.read_text()
    one_liner = next(line for line in text.splitlines() if f"> {ENV_FILE}" in line)
    for name in S3_ENV_VARS:
        assert f"|{name}|" in one_liner or f"({name}|" in one_liner, name


@pytest.mark.parametrize("key", ["head_start_ray_commands", "worker_start_ray_commands"])
def test_start_commands_use_token_auth_and_s3_settings(config, key):
    starts = [c for c in config[key] if "ray start" in c]
    assert len(starts) == 1
    start = starts[0]
    assert "RAY_AUTH_MODE=token ray start" in start
    assert f". {ENV_FILE}" in start
    if key == "head_start_ray_commands":
        assert "--head --port=6379" in start
        assert "--autoscaling-config=~/ray_bootstrap_config.yaml" in start
    else:
        assert "--address=$RAY_HEAD_IP:6379" in start


@pytest.mark.parametrize(
    "mutate, error",
    [
        (lambda c: c.pop("provider"), jsonschema.ValidationError),
        (lambda c: c.update(max_workers="two"), jsonschema.ValidationError),
        (lambda c: c.update(head_setup_commands="pip install boto3"), jsonschema.ValidationError),
        (lambda c: c.update(head_node_type="ray.head.missing"), ValueError),
        (lambda c: c["available_node_types"]["ray.worker.default"].update(min_workers=3),
         ValueError),
    ],
    ids=["no-provider", "max-workers-not-int", "commands-not-list", "unknown-head-type",
         "min-workers-over-max"],
)
def test_ray_validation_rejects_a_broken_copy(config, mutate, error):
    broken = copy.deepcopy(config)
    mutate(broken)
    with pytest.raises(error):
        validate_config(broken)
    validate_config(config)  # the original is untouched and still valid
