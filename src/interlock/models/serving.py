"""Servers the pipeline manages: a stage told to serve its checkpoint (``backbone.serve: vllm``)
starts ``vllm serve`` on a free loopback port, waits for its ``/health``, drives it through the
``openai`` backend, and stops it when the stage is done with it, whatever happens to the stage.

What "whatever happens" covers, and how:

- the stage finishes or raises: the backend's ``close`` (the stages release their backends, and an
  ``atexit`` hook stops any server still up when the interpreter exits);
- the stage is sent SIGTERM or SIGINT: the handler installed while a server runs turns the signal
  into ``SystemExit``, so the same hooks run;
- the stage is killed outright (SIGKILL): the server's supervisor was started with a parent-death
  signal (Linux ``PR_SET_PDEATHSIG``), so it receives SIGTERM from the kernel and takes the
  server's process group down (:mod:`interlock.models._supervisor`);
- the server dies under the stage: the next request that fails finds the process gone and raises
  :class:`ServerExited`, naming the server's log (the stage's resume picks up from there).

The server runs in a session of its own under a small supervisor, and stopping it signals the
whole group (vLLM's engine core is a child process): SIGTERM, then SIGKILL after
:data:`STOP_GRACE_S`.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from interlock.core.backend import ChatRequest, Completion, EpisodeTask
from interlock.core.config import BackboneConfig, ServerConfig
from interlock.core.errors import InterlockError
from interlock.models.vllm_worker import LOAD_POLICY, POLICY_WEIGHTS

#: where the managed servers write their logs, relative to the stage's working directory
SERVER_LOGS = Path("data/.servers")
#: seconds a stopped server has to exit after SIGTERM before it is killed
STOP_GRACE_S = 30.0
#: how many of the log's last bytes an error quotes
LOG_TAIL_BYTES = 3000

_PR_SET_PDEATHSIG = 1
#: an opener that ignores $http_proxy and the like
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerExited(InterlockError):
    """A managed server stopped while the stage still needed it."""


def free_port() -> int:
    """A TCP port on the loopback address nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def log_tail(path: Path, size: int = LOG_TAIL_BYTES) -> str:
    """The last ``size`` bytes of a log, as text ('' when it is not there)."""
    try:
        with path.open("rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - size))
            return log.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _die_with_parent(parent: int) -> None:
    """In the child, before ``exec``: ask the kernel for SIGTERM when the parent dies, and exit now
    if it already has (the request only covers a death after it was made)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


class ManagedServer:
    """One server process on ``127.0.0.1:port``, started by :meth:`start` and stopped by
    :meth:`stop` (idempotent). ``command`` must make it listen on that port."""

    def __init__(self, command: Sequence[str], port: int, log: Path, *, env: dict | None = None,
                 startup_s: float, name: str = "server") -> None:
        self.command, self.port, self.log, self.env = list(command), port, Path(log), env
        self.startup_s, self.name = startup_s, name
        self.process: subprocess.Popen | None = None
        self.url = f"http://127.0.0.1:{port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def start(self) -> ManagedServer:
        """Start the process and wait until ``/health`` answers 200; raise :class:`ServerExited`
        (with the log's end) if it exits first, or :class:`InterlockError` after ``startup_s``."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        parent = os.getpid()
        with self.log.open("wb") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "interlock.models._supervisor",
                                             *self.command], stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=self.env,
                                            start_new_session=True,
                                            preexec_fn=lambda: _die_with_parent(parent))
        _LIVE.add(self)
        deadline = time.monotonic() + self.startup_s
        try:
            while not self.healthy():
                self.check()
                if time.monotonic() > deadline:
                    raise InterlockError(f"the {self.name} did not answer on {self.url}/health within "
                                         f"{self.startup_s:g} s; its log: {self.log}", file=str(self.log))
                time.sleep(0.5)
        except BaseException:
            self.stop()
            raise
        return self

    def healthy(self) -> bool:
        """Whether ``/health`` answers 200 (asked directly: a proxy the environment names is no
        way to the loopback address)."""
        try:
            with _DIRECT.open(f"{self.url}/health", timeout=5) as answer:
                return answer.status == 200
        except OSError:
            return False

    def post(self, path: str, body: dict | None) -> None:
        """POST ``body`` (JSON; None: nothing) to ``path`` and wait for the answer; raise
        :class:`ServerExited` if the server is gone, :class:`InterlockError` with its answer if it
        does not say 200."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with _DIRECT.open(request, timeout=self.startup_s) as answer:
                answer.read()
        except urllib.error.HTTPError as error:
            said = error.read()[:LOG_TAIL_BYTES].decode("utf-8", "replace")
            raise InterlockError(f"the {self.name} answered {path} with {error.code}: {said}; its log: "
                                 f"{self.log}", file=str(self.log)) from None
        except OSError:
            self.check()
            raise

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def check(self) -> None:
        """Raise :class:`ServerExited`, naming the log and quoting its end, if the process is gone."""
        if self.process is not None and self.process.poll() is not None:
            raise ServerExited(f"the {self.name} exited; its log: {self.log}\n... {log_tail(self.log)}",
                               file=str(self.log))

    def stop(self) -> None:
        """SIGTERM to the server's process group, SIGKILL after :data:`STOP_GRACE_S`; then wait."""
        process, self.process = self.process, None
        _LIVE.discard(self)
        if process is None:
            return
        if process.poll() is None:
            _signal_group(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=STOP_GRACE_S)
        _signal_group(process.pid, signal.SIGKILL)  # what is left of the group (engine children)
        process.wait()


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


class _LiveServers:
    """The managed servers up in this process: stopped at exit, and on SIGTERM/SIGINT (turned into
    ``SystemExit`` while any is up, so the stage's own clean-up runs too)."""

    def __init__(self) -> None:
        self.servers: set[ManagedServer] = set()
        self.lock = threading.Lock()
        self.previous: dict[int, object] = {}
        atexit.register(self.stop_all)

    def add(self, server: ManagedServer) -> None:
        with self.lock:
            if not self.servers and threading.current_thread() is threading.main_thread():
                for signum in (signal.SIGTERM, signal.SIGINT):
                    self.previous[signum] = signal.signal(signum, _exit_on_signal)
            self.servers.add(server)

    def discard(self, server: ManagedServer) -> None:
        with self.lock:
            self.servers.discard(server)
            if not self.servers and threading.current_thread() is threading.main_thread():
                for signum, handler in self.previous.items():
                    signal.signal(signum, handler)
                self.previous.clear()

    def stop_all(self) -> None:
        for server in list(self.servers):
            server.stop()


def _exit_on_signal(signum: int, frame) -> None:
    raise SystemExit(128 + signum)


_LIVE = _LiveServers()


def vllm_command(checkpoint: Path, port: int, *, dtype: str, max_model_len: int,
                 data_parallel_size: int, tensor_parallel_size: int, gpu: bool,
                 gpu_memory_utilization: float | None = None) -> list[str]:
    """``vllm serve`` as the pipeline runs it: the checkpoint under its own path as the model name
    (what the stages ask for), the project's ``<tool_call>`` format parsed (hermes), seeded, each
    sampled token's log-probability after the temperature (as the in-process backend), the
    worker able to take new weights in place (:mod:`interlock.models.vllm_worker`, reached only
    where the server's development endpoints are on: :func:`serve_policy`); on a CPU in eager mode
    without chunked prefill, the model run by the engine-core process itself (``uni``, with
    :data:`~interlock.models.vllm_backend.CPU_ENGINE_ENV`), as the in-process backend runs it
    (:mod:`interlock.models.vllm_backend`)."""
    command = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(checkpoint),
               "--served-model-name", str(checkpoint), "--host", "127.0.0.1", "--port", str(port),
               "--dtype", dtype, "--max-model-len", str(max_model_len), "--seed", "0",
               "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
               "--logprobs-mode", "processed_logprobs", "--worker-extension-cls", POLICY_WEIGHTS]
    if gpu_memory_utilization is not None:
        command += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
    if gpu:
        command += ["--data-parallel-size", str(data_parallel_size),
                    "--tensor-parallel-size", str(tensor_parallel_size)]
    else:
        command += ["--enforce-eager", "--no-enable-chunked-prefill", "--distributed-executor-backend", "uni"]
    return command


@dataclass
class ServedBackend:
    """The ``openai`` backend over a server this process manages; ``close`` stops the server. A
    request that fails while the server is gone raises :class:`ServerExited` instead of ending its
    episode as ``server_error``: the stage stops with the log's name, and resumes when run again."""

    client: object  # an OpenAIBackend
    server: ManagedServer
    weights: WeightsDrop | None = None  # a policy server's (serve_policy): load_weights

    @property
    def name(self) -> str:
        return self.client.name

    @property
    def max_in_flight(self) -> int:
        return self.client.max_in_flight

    def begin(self, key: str, task: EpisodeTask) -> None:
        self.client.begin(key, task)

    def end(self, key: str) -> None:
        self.client.end(key)

    def complete(self, requests: list[ChatRequest]) -> list[Completion]:
        return [self._checked(c) for c in self.client.complete(requests)]

    def complete_one(self, request: ChatRequest) -> Completion:
        return self._checked(self.client.complete_one(request))

    def _checked(self, completion: Completion) -> Completion:
        if completion.finish_reason == "server_error":
            self.server.check()
        return completion

    def load_weights(self, weights: Iterable[tuple[str, object]]) -> None:
        """Give the server's model ``weights`` (name and tensor, as a transformers model's
        ``named_parameters`` gives them) in place and forget its cached prefixes: written as
        safetensors (in the server's dtype) into a folder of this process's, then loaded by the
        server's worker from there (:class:`~interlock.models.vllm_worker.PolicyWeights`, through
        ``/collective_rpc``; the server must have been started by :func:`serve_policy`)."""
        import torch
        from safetensors.torch import save_file

        if self.weights is None:
            raise InterlockError(f"the {self.server.name} takes no weights (not started by serve_policy)")
        dtype = getattr(torch, self.weights.dtype)
        save_file({name: tensor.detach().to("cpu", dtype).contiguous() for name, tensor in weights},
                  str(self.weights.folder / "model.safetensors"))
        self.server.post("/collective_rpc", {"method": LOAD_POLICY,
                                             "kwargs": {"weights_path": str(self.weights.folder)}})
        self.server.post("/reset_prefix_cache", None)

    def close(self) -> None:
        self.server.stop()
        if self.weights is not None:
            shutil.rmtree(self.weights.folder, ignore_errors=True)


@dataclass(frozen=True)
class WeightsDrop:
    """Where a trainer leaves the weights a policy server loads, and in which dtype."""

    folder: Path
    dtype: str


def serve_vllm(backbone: BackboneConfig, checkpoint: Path) -> ServedBackend:
    """Start ``vllm serve`` for ``checkpoint`` (in the dtype ``backbone.dtype`` resolves to for
    vLLM, the context ``backbone.max_context``, laid out as ``backbone.server`` says on GPUs) and
    return the ``openai`` backend over it, with ``backbone.server``'s client limits."""
    from interlock.models.backends import model_runtime

    settings = backbone.server
    return _serve(checkpoint, dtype=model_runtime(backbone, "generate", checkpoint)["resolved_dtype"],
                  max_model_len=backbone.max_context, startup_s=settings.startup_s,
                  limits=settings.client_limits(), data_parallel_size=settings.data_parallel_size,
                  tensor_parallel_size=settings.tensor_parallel_size)


def serve_policy(checkpoint: Path, server: ServerConfig, *, dtype: str, max_model_len: int,
                 gpu_memory_utilization: float, weights: Path, device: int | None = None) -> ServedBackend:
    """Start ``vllm serve`` for the policy a trainer in this process is training from
    ``checkpoint`` (one replica on the trainer's device, sharing it: ``gpu_memory_utilization``;
    ``server``'s client limits and start-up time), with the server's development endpoints on so
    :meth:`ServedBackend.load_weights` reaches its worker (``/collective_rpc``,
    ``/reset_prefix_cache``: on loopback, which no episode's tool reaches); the weights pass
    through the folder ``weights``; ``device``: the GPU it runs on (the trainer process's)."""
    weights.mkdir(parents=True, exist_ok=True)
    env = {"VLLM_SERVER_DEV_MODE": "1"}
    if device is not None:  # the device's place among those this process sees
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        env["CUDA_VISIBLE_DEVICES"] = visible[device] if device < len(visible) else str(device)
    return _serve(checkpoint, dtype=dtype, max_model_len=max_model_len, startup_s=server.startup_s,
                  limits=server.client_limits(), data_parallel_size=1, tensor_parallel_size=1,
                  gpu_memory_utilization=gpu_memory_utilization, env=env, weights=WeightsDrop(weights, dtype))


def _serve(checkpoint: Path, *, dtype: str, max_model_len: int, startup_s: float, limits: dict,
           data_parallel_size: int, tensor_parallel_size: int, gpu_memory_utilization: float | None = None,
           env: dict | None = None, weights: WeightsDrop | None = None) -> ServedBackend:
    import importlib.util

    import torch
    from transformers import AutoTokenizer

    from interlock.models.openai_backend import OpenAIBackend
    from interlock.models.vllm_backend import CPU_ENGINE_ENV

    if importlib.util.find_spec("vllm") is None:
        raise InterlockError("backbone.serve=vllm needs vLLM in this environment: `make vllm` on a CPU, "
                             "the gpu extra on a GPU (docs/scale-out.md)", field="backbone.serve")
    try:  # read first: a folder that is no checkpoint fails before a server start of minutes
        tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    except (OSError, ValueError) as error:
        raise InterlockError(f"no tokenizer to serve in {checkpoint}: {str(error)[:300]}",
                             file=str(checkpoint)) from None
    port, gpu = free_port(), torch.cuda.is_available()
    command = vllm_command(checkpoint, port, dtype=dtype, max_model_len=max_model_len,
                           data_parallel_size=data_parallel_size, tensor_parallel_size=tensor_parallel_size,
                           gpu=gpu, gpu_memory_utilization=gpu_memory_utilization)
    environment = {**({} if gpu else CPU_ENGINE_ENV), **os.environ, **(env or {})}
    log = SERVER_LOGS / f"{'-'.join(Path(checkpoint).parts[-2:])}.{port}.log"
    server = ManagedServer(command, port, log, env=environment, startup_s=startup_s,
                           name=f"vLLM server of {checkpoint}").start()
    client = OpenAIBackend(server.base_url, str(checkpoint), **limits, tokenizer=tokenizer)
    return ServedBackend(client, server, weights)
