"""The scripted author (:class:`interlock.review.scripted_author.ScriptedAuthor`) served over a
real OpenAI-compatible HTTP server (:class:`~interlock.testing.loopback_server.LoopbackServer`),
as the tests and ``perf/generator_faults.py`` use it.

``python -m interlock.testing.authors --port 8765`` serves the clean author, for a
``generator=llm`` run without a model (docs/pipeline.md#model-authors-generatorllm).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from interlock.models.openai_backend import OpenAIBackend
from interlock.review.scripted_author import ScriptedAuthor
from interlock.testing.loopback_server import Answer, LoopbackServer, Request, completion_body


@dataclass
class ServedAuthor:
    """The loopback server's script: each request body to the author, its reply as OpenAI's
    chat completion."""

    author: ScriptedAuthor

    def __call__(self, request: Request) -> Answer:
        reply = self.author.write(request.body)
        return Answer(200, completion_body(reply.text, prompt_tokens=reply.prompt_tokens,
                                           completion_tokens=reply.completion_tokens,
                                           finish_reason=reply.finish_reason))


@contextmanager
def served(author: ScriptedAuthor, *, max_in_flight: int,
           timeout_s: float = 120) -> Iterator[OpenAIBackend]:
    """The ``openai`` backend against ``author`` on a loopback server, for as long as the block runs."""
    with LoopbackServer(ServedAuthor(author), endpoints=1, max_seconds=3600) as server:
        yield OpenAIBackend(server.urls, "scripted-author", max_in_flight=max_in_flight, max_retries=0,
                            timeout_s=timeout_s)


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the clean scripted author on the loopback address.")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--seconds", type=float, default=3600.0, help="stop answering after this long")
    args = parser.parse_args()
    with LoopbackServer(ServedAuthor(ScriptedAuthor()), endpoints=1, port=args.port,
                        max_seconds=args.seconds) as server:
        print(f"scripted author at {server.urls[0]} for {args.seconds:g} s", flush=True)
        time.sleep(args.seconds)


if __name__ == "__main__":
    main()
