"""A chat-completions server whose answer is known: it replies with the sum of the integers in the last
message, in one of four wordings, so a task scored through it has a score the test can compute.

fairbench's arithmetic prompts hold only their operands as integers (the instruction has no digit), so its
reply is right exactly where the problem is a sum of all its numbers. The wordings exercise the ways
``arithmetic.answer_in`` reads a reply, chosen by the sum modulo 4:

0: ``... Answer: 42``; 1: ``**Answer:** 1,042.``; 2: ``... Answer: $42``; 3: no marker, the sum last.

Every request's JSON body is kept (``SummingServer.bodies``), so a test sees what its client sent.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def reply_to(prompt: str) -> str:
    total = sum(int(number) for number in re.findall(r"[0-9]+", prompt))
    return (
        f"Adding every number up gives {total}.\nAnswer: {total}",
        f"Let me add them.\n\n**Answer:** {total:,}.",
        f"The total is {total}.\n\nAnswer: ${total}",
        f"All together that makes {total}",
    )[total % 4]


@dataclass
class SummingServer:
    url: str
    bodies: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def summing_server() -> Iterator[SummingServer]:
    """The server on a free loopback port, in a thread; stopped afterwards."""
    bodies: list[dict[str, Any]] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
            with lock:
                bodies.append(body)
            text = reply_to(str(body["messages"][-1]["content"]))
            answer = json.dumps(
                {
                    "id": "summing",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body.get("model"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield SummingServer(f"http://127.0.0.1:{server.server_address[1]}", bodies)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
