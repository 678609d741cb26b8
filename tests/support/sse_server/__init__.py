"""A small, fast, scriptable HTTP/1.1 server that streams like SGLang 0.5.23.

It is the known-timing counterpart that fairbench's streaming client is tested and
benchmarked against. It shares no code with ``bench/fairbench``: a format helper used
by both would let a shared bug cancel out. Every byte it streams follows SGLang's own
source (``srt/entrypoints/openai/serving_completions.py``, ``serving_chat.py``,
``sse_utils.py``, ``protocol.py``, ``srt/entrypoints/http_server.py``) as served by
uvicorn's httptools protocol behind Starlette's ``StreamingResponse``:

* ``POST /v1/completions``: one ``text_completion`` chunk per output step, the last
  one carrying ``finish_reason``; cumulative ``usage`` on every chunk when
  ``stream_options.continuous_usage_stats``; a final ``choices: []`` usage chunk
  when ``stream_options.include_usage``; then ``data: [DONE]``.
* ``POST /v1/chat/completions``: a role chunk (``"role":"assistant","content":""``)
  right before the first content chunk, content chunks, a separate
  ``finish_reason`` chunk, the optional usage chunk, ``data: [DONE]``.
* ``POST /generate``: cumulative ``text`` and ``output_ids`` and a ``meta_info`` with
  the cumulative ``completion_tokens`` on every chunk, ``data: [DONE]``.

HTTP details that a client can trip over are kept: the OpenAI routes send their
response head only together with the first chunk (SGLang awaits the first chunk
before it returns the ``StreamingResponse``), ``/generate`` sends its head at once;
every SSE event is its own chunk of the chunked transfer encoding and its own
``transport.write``; keep-alive connections idle for ``keep_alive_timeout_s`` are
closed (uvicorn's default under SGLang: 5 s).

Output: ``max_tokens`` / ``max_completion_tokens`` / ``sampling_params.max_new_tokens``
tokens (defaults 16, 16 and 128), or fewer with finish reason ``stop`` when the request
does not set ``ignore_eos`` and ``eos_at`` is configured; ``output_len_override`` forces
a length (a server that returns the wrong length). The first chunk carries one token
(SGLang streams the prefill's token at once), later chunks ``tokens_per_chunk`` tokens
(like ``--stream-interval`` / ``--num-continuous-decode-steps``). Prompt tokens: the
number of token ids, or of whitespace-separated words of a text prompt.

Timing: chunk ``j`` (0-based) of a request goes out at ``dispatch + first_token_ms +
j * chunk_gap_ms``, scheduled against absolute loop times, so a late callback does not
shift the chunks after it. The server records ``time.perf_counter_ns()`` (the client's
clock on the same machine) of each request's arrival and of each content chunk's write:
``GET /debug/send_times`` (``?clear=1`` empties it afterwards) or ``--send-times-file``.

Run it as ``python -m tests.support.sse_server --port 0 [flags]`` from the repository
root (it prints ``listening on HOST:PORT``), in a loop with ``async with SSEServer(...)``,
in a thread with ``ServerThread``, or in a child process with ``ServerProcess``.

Modules, from the wire up: ``http_messages`` and ``sse`` (heads, chunked SSE framing),
``connection`` (one client connection), ``scheduled_stream`` (a stream's events sent on
schedule), ``request_body`` (what a request asks for), ``stream_shape``,
``openai_stream`` and ``generate_stream`` (the three APIs' event bytes), ``stream_plan``
and ``templates`` (a stream's events, rendered once per shape), ``faults`` and
``config`` (the scripted behaviour), ``recording`` (the send-time records),
``plain_routes`` and ``server`` (routing), ``server_thread``, ``server_process`` and
``cli`` (ways to run it). The names tests use are importable from the package itself.
"""

from tests.support.sse_server.cli import parse_args
from tests.support.sse_server.config import ServerConfig
from tests.support.sse_server.faults import FaultRule
from tests.support.sse_server.running import RunningServer, StartServer
from tests.support.sse_server.server import SSEServer
from tests.support.sse_server.server_process import ServerProcess
from tests.support.sse_server.server_thread import ServerThread
from tests.support.sse_server.stream_shape import chunk_token_counts

__all__ = [
    "FaultRule",
    "RunningServer",
    "SSEServer",
    "ServerConfig",
    "ServerProcess",
    "ServerThread",
    "StartServer",
    "chunk_token_counts",
    "parse_args",
]
