"""Servers the pipeline manages (interlock.models.serving): started on a free loopback port, waited
for, and stopped whatever happens to the process that started them (it returns, raises, is sent
SIGTERM or SIGKILL, or the server dies under it). The server here is a real HTTP server with a
child process of its own, as ``vllm serve`` has its engine core; the vLLM server itself is in
tests/test_served_vllm.py. Each guarantee has a twin: the same process started without the
manager's care outlives its parent, so the check that it is gone could fail."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from interlock.core.backend import ChatRequest, releasing
from interlock.core.chat import Message
from interlock.models.openai_backend import OpenAIBackend
from interlock.models.serving import ManagedServer, ServedBackend, ServerExited, free_port
from interlock.testing.loopback_server import client_limits

from helpers.config import defaults
from helpers.repo import REPO, command_timeout

#: a server answering /health, that starts a child (its "engine") and writes both pids to a file;
#: it exits on its own after ``die_after`` seconds when that is given
SERVER = textwrap.dedent("""
    import http.server, os, subprocess, sys, threading
    port, pids, die_after = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    with open(pids + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {child.pid}")
    os.replace(pids + ".tmp", pids)
    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()
        def do_POST(self):
            self.send_response(500)
            self.end_headers()
        def log_message(self, *args):
            pass
    if die_after > 0:
        threading.Timer(die_after, lambda: os._exit(3)).start()
    print("serving", flush=True)
    http.server.ThreadingHTTPServer(("127.0.0.1", port), Health).serve_forever()
""")


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its parent, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gone(pids: list[int]) -> bool:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if not any(alive(pid) for pid in pids):
            return True
        time.sleep(0.2)
    return False


def read_pids(path: Path) -> list[int]:
    deadline = time.monotonic() + command_timeout()
    while not path.exists():
        assert time.monotonic() < deadline, "the server never wrote its pids"
        time.sleep(0.1)
    return [int(p) for p in path.read_text().split()]


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "server.py"
    path.write_text(SERVER)
    return path


def managed(script: Path, tmp_path: Path, die_after: float = 0) -> ManagedServer:
    port = free_port()
    return ManagedServer([sys.executable, str(script), str(port), str(tmp_path / "pids"), str(die_after)],
                         port, tmp_path / "logs" / "server.log", startup_s=command_timeout(),
                         name="test server")


def test_a_managed_server_answers_and_stops_with_its_children(script, tmp_path) -> None:
    server = managed(script, tmp_path).start()
    pids = read_pids(tmp_path / "pids")
    assert server.healthy() and all(alive(pid) for pid in pids)
    client = OpenAIBackend(server.base_url, "m", **client_limits(max_retries=0))
    with releasing(ServedBackend(client, server)):
        pass
    assert gone(pids), "the server or its child outlived close()"
    assert not server.healthy()
    assert "serving" in (tmp_path / "logs" / "server.log").read_text()


def test_a_server_that_exits_before_it_answers_fails_with_its_log(tmp_path) -> None:
    port = free_port()
    server = ManagedServer([sys.executable, "-c", "import sys; print('no such model: x'); sys.exit(2)"],
                           port, tmp_path / "s.log", startup_s=command_timeout(), name="test server")
    with pytest.raises(ServerExited) as raised:
        server.start()
    assert "exited with code 2" in str(raised.value) and str(tmp_path / "s.log") in str(raised.value)
    assert "no such model: x" in str(raised.value)


def test_a_server_that_dies_under_the_stage_stops_it_naming_the_log(script, tmp_path) -> None:
    """A request that fails while the server is gone raises (the stage stops, and resumes when run
    again); the twin: the same failing request to a live server is an episode's server_error."""
    server = managed(script, tmp_path, die_after=3).start()
    backend = ServedBackend(OpenAIBackend(server.base_url, "m", **client_limits(max_retries=0)), server)
    request = ChatRequest("k", (Message("user", "hi"),))
    deadline = time.monotonic() + command_timeout()
    while server.alive():
        # the server answers 500: an episode's failure while the server lives, not the stage's
        assert backend.complete_one(request).finish_reason == "server_error"
        assert time.monotonic() < deadline
        time.sleep(0.2)
    with pytest.raises(ServerExited, match=str(tmp_path / "logs" / "server.log")):
        backend.complete([request])
    backend.close()


STAGE = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    from interlock.models.serving import ManagedServer
    server = ManagedServer([sys.executable, {script!r}, sys.argv[1], {pids!r}, "0"], int(sys.argv[1]),
                           {log!r}, startup_s=600, name="test server")
    if sys.argv[2] == "plain":  # the twin: the same server without the manager's care
        import subprocess
        subprocess.Popen(server.command, start_new_session=True)
    else:
        server.start()
    print("up", flush=True)
    time.sleep(3600)
""")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_a_stage_that_is_killed_takes_its_server_with_it(script, tmp_path, signum) -> None:
    """SIGTERM runs the stage's clean-up (the handler turns it into SystemExit); SIGKILL leaves no
    clean-up to run, and the kernel's parent-death signal stops the server. The twin, a server the
    stage started plainly, is still running after the same kill."""
    survivors = {}
    for mode in ("managed", "plain"):
        pids_file = tmp_path / f"{mode}.pids"
        stage = tmp_path / f"{mode}_stage.py"
        stage.write_text(STAGE.format(tests=str(REPO / "tests"), script=str(script), pids=str(pids_file),
                                      log=str(tmp_path / f"{mode}.log")))
        process = subprocess.Popen([sys.executable, str(stage), str(free_port()), mode],
                                   stdout=subprocess.PIPE, text=True)
        assert process.stdout.readline().strip() == "up"
        pids = read_pids(pids_file)
        process.send_signal(signum)
        process.wait(timeout=command_timeout())
        survivors[mode] = not gone(pids) if mode == "managed" else all(alive(pid) for pid in pids)
        kill_all(pids)
    assert survivors == {"managed": False, "plain": True}


def test_serving_without_vllm_installed_says_how_to_install_it(tiny_checkpoint, monkeypatch) -> None:
    import importlib.util

    from interlock.core.config import GenerationConfig
    from interlock.core.errors import InterlockError
    from interlock.models.backends import make_backend

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "vllm" else real(name, *a))
    backbone = defaults("backbone=tiny").backbone.replace(
        weights={"source": "pretrained", "model": str(tiny_checkpoint)}, serve="vllm", max_context=512,
        generation=GenerationConfig(temperature=0.0, max_new_tokens=8))
    with pytest.raises(InterlockError, match="needs vLLM in this environment: `make vllm`"):
        make_backend(backbone, tiny_checkpoint)


def test_a_request_the_server_refuses_names_the_path_its_answer_and_the_log(script, tmp_path) -> None:
    """What a policy server's weight update goes through (``ManagedServer.post``): the test server
    answers every POST with 500."""
    from interlock.core.errors import InterlockError

    server = managed(script, tmp_path).start()
    try:
        with pytest.raises(InterlockError, match=r"answered /collective_rpc with 500.*server\.log"):
            server.post("/collective_rpc", {"method": "load_policy"})
        backend = ServedBackend(OpenAIBackend(server.base_url, "m", **client_limits(max_retries=0)), server)
        with pytest.raises(InterlockError, match="takes no weights"):  # not a policy server
            backend.load_weights([])
    finally:
        server.stop()


def test_a_policy_server_of_a_folder_without_a_tokenizer_fails_before_starting(tmp_path, monkeypatch) -> None:
    pytest.importorskip("vllm", reason="vLLM is not installed (make vllm; the gpu extra)")
    from interlock.core.errors import InterlockError
    from interlock.models.serving import SERVER_LOGS, serve_policy

    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InterlockError, match="no tokenizer to serve in"):
        serve_policy(tmp_path / "empty", defaults().backbone.server, dtype="float32", max_model_len=256,
                     gpu_memory_utilization=0.3, weights=tmp_path / "weights")
    assert not (tmp_path / SERVER_LOGS).exists()  # no server was started
