"""``fairbench sim``: an SGLang-compatible server with a documented performance model and fault switches.

It accepts the command line of ``sglang.launch_server`` (the flag table in ``sglang_flags.json`` is
generated from SGLang's own parser), speaks SGLang's HTTP API and stream formats, and produces tokens on
the schedule of a continuous-batching performance model whose constants live in ``profiles/*.yaml``.

Modules, in the order data flows through them:
``args`` (flags -> ``SimConfig``), ``model`` (profile -> step and prefill times), ``engine`` (the
continuous-batching scheduler and the clock that drives it), ``api`` (request bodies in, SGLang's
response and stream formats out), ``outputs`` (what a response says: its tokens per prompt and numerics
family, their log-probabilities, the sums it gets right, how repetitive a prompt is), ``http`` (a minimal
HTTP/1.1 server on raw asyncio, fast enough to stream tens of thousands of tokens per second on one
core), ``server`` (routes, auth, ``/server_info``,
``/metrics``, start-up), ``nodes`` (one server over ``--nnodes`` hosts: rank 0's rendezvous with the
other ranks, their heartbeats, the other ranks' dummy health server), ``disaggregation`` and
``kv_transfer`` (``--disaggregation-mode prefill|decode``: the KV transfer model, the prefill's bootstrap
server and the decode's wait for the KV), ``faults`` and ``predict`` (the
same engine on a virtual clock: what a closed-loop sweep will measure). The ``fairbench sim`` command is
``fairbench.cli.sim``.

The simulator shares no code with fairbench's client: both follow SGLang's formats as read from its
source, so a bug in one is caught by the other instead of cancelling out.
"""
