"""Apps reaching a store through Ray Client (``ray://``): a real head started with a client
server (``ray start --head --ray-client-server-port``) on 127.0.0.1, token auth on, and
drivers in fresh processes. The test stops only the processes it started."""

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile

import pytest
from support.s3 import free_port
from support.waits import wait_until

pytestmark = pytest.mark.ray

RAY = os.path.join(os.path.dirname(sys.executable), "ray")


def _driver(code: str, env: dict, cwd) -> str:
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _wait_for_port(port: int, seconds: float, log: str) -> None:
    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    with contextlib.suppress(AssertionError):
        wait_until(listening, timeout=seconds, interval=0.2)
        return
    with open(log) as f:
        raise AssertionError(f"nothing listens on port {port} after {seconds}s: "
                             f"{f.read()[-2000:]}")


@pytest.fixture
def client_head():
    """A Ray head with a client server, in a process group of its own; its ray:// address."""
    temp = tempfile.mkdtemp(prefix="lr-rc-")  # short: Ray's socket paths must fit in 107 bytes
    port = free_port()
    env = {**os.environ, "RAY_TMPDIR": str(temp)}
    env.pop("RAY_ADDRESS", None)
    log = open(os.path.join(temp, "head.log"), "w")  # noqa: SIM115 (the head writes to it)
    head = subprocess.Popen(
        [RAY, "start", "--head", "--block", "--node-ip-address=127.0.0.1",
         f"--port={free_port()}", f"--ray-client-server-port={port}", f"--temp-dir={temp}",
         "--num-cpus=1", "--include-dashboard=false", "--disable-usage-stats"],
        env=env, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)
    try:
        _wait_for_port(port, 90, os.path.join(temp, "head.log"))
        yield f"ray://127.0.0.1:{port}"
    finally:
        _stop(head, temp)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def _stop(head: subprocess.Popen, temp: str) -> None:
    """Stop the head (Ctrl-C, as ``--block`` asks), then any process of its own temp dir that
    outlived it: only what this test started, never the machine's other Ray processes."""
    for sig, wait in ((signal.SIGINT, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(head.pid, sig)
            head.wait(wait)
            break
        except (subprocess.TimeoutExpired, ProcessLookupError):
            continue
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                mine = temp.encode() in f.read()
            if mine and int(pid) != os.getpid():
                os.kill(int(pid), signal.SIGKILL)
        except (OSError, ValueError):
            continue


# A head of its own and two Ray Client drivers take about a minute: it runs in make examples.
@pytest.mark.example
def test_apps_open_and_connect_through_ray_client(client_head, tmp_path):
    url = f"file://{tmp_path}/db"
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE")}
    # One app opens a named, detached store through RAY_ADDRESS (token auth set up for it).
    opened = _driver(
        "import leveled_ray as lr\n"
        f"store = lr.open({url!r}, name='rc-store', detached=True)\n"
        "print('sqn', store.put('b', 'k', b'from the first app'))\n",
        {**env, "RAY_ADDRESS": client_head}, tmp_path)
    assert "sqn" in opened
    # Another connects by name and address alone, reads, writes, and closes it.
    connected = _driver(
        "import leveled_ray as lr\n"
        f"store = lr.connect('rc-store', address={client_head!r})\n"
        "print('got', store.get('b', 'k'))\n"
        "store.put_many([lr.Put('b', f'x{i}', b'v') for i in range(100)])\n"
        "print('many', store.get_many([('b', 'x0'), ('b', 'x99')]))\n"
        "store.close()\n",
        env, tmp_path)
    assert "got b'from the first app'" in connected
    assert "many [b'v', b'v']" in connected


def test_ray_client_without_a_token_says_what_to_set(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("RAY_AUTH") and k != "RAY_ADDRESS"}
    env["HOME"] = str(home)  # no ~/.ray/auth_token here
    out = _driver(
        "import leveled_ray as lr\n"
        "try:\n"
        f"    lr.connect('x', address='ray://127.0.0.1:{free_port()}')\n"
        "except lr.InvalidArgumentError as exc:\n"
        "    print('refused:', exc)\n",
        env, tmp_path)
    assert "refused:" in out and "RAY_AUTH_TOKEN" in out
