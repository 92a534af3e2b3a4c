"""``python -m interlock.models._supervisor COMMAND...``: runs a managed server's command as the
leader of its process group, and takes the whole group down when told to stop (SIGTERM, SIGINT)
or when the stage that started it dies (the kernel's parent-death signal, requested by
:mod:`interlock.models.serving`, arrives as SIGTERM): SIGTERM to every process of the group (the
server and what it started, such as vLLM's engine core), SIGKILL to what is left after the grace
period. A server's own children then never outlive the stage, whether or not the server cleans
up after itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

#: seconds the group has to exit after SIGTERM before SIGKILL
GRACE_S = 25.0


def main(command: list[str]) -> int:
    server = subprocess.Popen(command)
    stopping: list[float] = []  # when the stop signal came

    def stop(signum: int, frame: object) -> None:
        for own in (signal.SIGTERM, signal.SIGINT):  # the group's SIGTERM reaches this process too
            signal.signal(own, signal.SIG_IGN)
        os.killpg(0, signal.SIGTERM)
        stopping.append(time.monotonic())

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while server.poll() is None and not (stopping and time.monotonic() - stopping[0] > GRACE_S):
        time.sleep(0.1)
    code = server.returncode
    if not stopping:  # the server exited on its own: say so in its log
        print(f"interlock: the server exited with code {code}", file=sys.stderr, flush=True)
    os.killpg(0, signal.SIGKILL)  # what is left of the group, this process included
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
