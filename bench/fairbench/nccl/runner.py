"""The all-reduce sweep of ``fairbench nccl``: what to measure, how to run it, and nccl.json.

Tensor parallelism all-reduces the hidden state of every token in the batch once or twice per layer, so
the message sizes that matter follow from the model and the campaign (bf16, 2 bytes per element):

- **decode**: ``hidden_size x 2 x C`` bytes for each concurrency level C of the workload: a decode step
  all-reduces one token per running request (14 KiB at C=1 for Kimi K2's hidden size 7168, 3.5 MiB at
  C=256).
- **prefill**: ``hidden_size x 2 x T`` bytes for chunk-like token counts T: powers of two from the first
  one above the largest decode batch, doubling while the message stays below 64 MiB, then 64 MiB itself.
  SGLang prefills in chunks of thousands of tokens (``--chunked-prefill-size``); a chunk of 8192 tokens
  of Kimi K2 is 112 MiB, past the point where NCCL reaches its peak bus bandwidth, so 64 MiB (the
  size nccl-tests users quote) is where the sweep stops.

Variants: ``default`` sets no ``NCCL_*`` variable; each distinct set of ``NCCL_*`` variables among the
campaign's configs is one more variant, named after the configs that use it (configs with the same set
share one). Every variant runs in fresh processes, since NCCL reads its environment once, at init;
variables named ``NCCL_*`` inherited from the caller are removed first, so ``default`` means NCCL's own
defaults, as in the servers' systemd units. ``NCCL_NVLS_ENABLE=0`` is added unless the variant sets it:
NVLink multicast (NVLS) stays off, as the GPU machines' operators ask.

For each variant one worker process per GPU runs ``worker.py`` (by path, under ``--python``: the
serving venv's interpreter, which has torch); rank 0 returns raw per-iteration times, which become the
statistics of nccl.json here (``size_result``).
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from fairbench.measure.metrics import median, percentile

RESULT_FILE = "nccl.json"
FORMAT_VERSION = 1
WORKER_SCRIPT = Path(__file__).with_name("worker.py")
WORKER_PROTOCOL = 1
PROGRESS_PREFIX = "fairbench-nccl-progress"
"""The worker's progress lines on stderr start with this (worker.PROGRESS_PREFIX)."""

BYTES_PER_ELEMENT = 2
"""bf16, the dtype of the hidden state the servers all-reduce."""
PREFILL_LIMIT_BYTES = 64 * 2**20
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""Decode batch sizes without a campaign: the concurrency levels of campaigns/kimi-k2.6-pcie.yml."""
DEFAULT_VARIANT = "default"
NCCL_PREFIX = "NCCL_"
NVLS_VARIABLE = "NCCL_NVLS_ENABLE"
STDERR_TAIL_LINES = 20
FAILURE_GRACE_S = 5.0
"""How long the other ranks may take to exit after one failed."""
POLL_INTERVAL_S = 0.1
DECODE = "decode"
PREFILL = "prefill"

_VARIANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class NcclError(Exception):
    """Bad input to the sweep, or a worker that failed; the message names the file, key or variant."""


# --- what to measure -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MessageSize:
    bytes: int
    scale: str
    """``decode`` or ``prefill``."""
    tokens: int | None
    """Tokens whose hidden states make up the message (C for decode); None for the 64 MiB cap."""

    def label(self) -> str:
        if self.scale == DECODE:
            return f"C={self.tokens}"
        return f"{self.tokens} tokens" if self.tokens is not None else "64 MiB cap"


def message_sizes(hidden_size: int, concurrency: Iterable[int]) -> list[MessageSize]:
    """Decode sizes for each concurrency level, then prefill sizes (module docstring), sorted, unique."""
    if hidden_size < 1:
        raise NcclError(f"hidden size: {hidden_size} must be a positive integer")
    levels = sorted(set(concurrency))
    if not levels or levels[0] < 1:
        raise NcclError(f"concurrency: {levels} must list positive integers")
    token_bytes = hidden_size * BYTES_PER_ELEMENT
    sizes = {level * token_bytes: MessageSize(level * token_bytes, DECODE, level) for level in levels}
    tokens = 1 << levels[-1].bit_length()  # the first power of two above the largest decode batch
    while tokens * token_bytes < PREFILL_LIMIT_BYTES:
        sizes.setdefault(tokens * token_bytes, MessageSize(tokens * token_bytes, PREFILL, tokens))
        tokens *= 2
    cap_tokens = PREFILL_LIMIT_BYTES // token_bytes if PREFILL_LIMIT_BYTES % token_bytes == 0 else None
    sizes.setdefault(PREFILL_LIMIT_BYTES, MessageSize(PREFILL_LIMIT_BYTES, PREFILL, cap_tokens))
    return [sizes[size] for size in sorted(sizes)]


@dataclass(frozen=True)
class Variant:
    name: str
    env: dict[str, str]
    """The variables the variant sets (for ``default``, none)."""
    configs: tuple[str, ...] = ()
    """The campaign's configs that run with this NCCL environment."""

    def launch_env(self) -> dict[str, str]:
        """What the workers get on top of the caller's environment without its ``NCCL_*`` variables."""
        return {NVLS_VARIABLE: "0", **self.env}


def nccl_env(env: Mapping[str, str]) -> dict[str, str]:
    return {key: value for key, value in sorted(env.items()) if key.startswith(NCCL_PREFIX)}


def campaign_variants(config_envs: Mapping[str, Mapping[str, str]]) -> list[Variant]:
    """``default`` (with the configs that set no NCCL variable), then one variant per distinct NCCL
    environment, in the order of the configs, named after the configs that use it, joined by ``+``."""
    users: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for config, env in config_envs.items():
        users.setdefault(tuple(nccl_env(env).items()), []).append(config)
    variants = [Variant(DEFAULT_VARIANT, {}, tuple(users.pop((), [])))]
    variants += [Variant("+".join(configs), dict(env), tuple(configs)) for env, configs in users.items()]
    return variants


def parse_variant(text: str) -> Variant:
    """``NAME=KEY=VALUE,KEY=VALUE``: an extra variant from the command line."""
    name, _, assignments = text.partition("=")
    if not _VARIANT_NAME.fullmatch(name):
        raise NcclError(f"--variant {text!r}: the name must be letters, digits, _ . + - (NAME=KEY=VALUE,...)")
    env: dict[str, str] = {}
    for assignment in assignments.split(","):
        key, equals, value = assignment.partition("=")
        if not equals or not _ENV_NAME.fullmatch(key):
            raise NcclError(f"--variant {text!r}: {assignment!r} is not KEY=VALUE")
        env[key] = value
    return Variant(name, env)


def add_variants(variants: Sequence[Variant], extra: Sequence[Variant]) -> list[Variant]:
    names = [variant.name for variant in variants]
    for variant in extra:
        if variant.name in names:
            raise NcclError(f"--variant {variant.name}: a variant of that name exists already")
        names.append(variant.name)
    return [*variants, *extra]


def hidden_size_from_config(path: Path) -> int:
    """``hidden_size`` of a Hugging Face config.json: the language model's, under ``text_config`` for a
    multimodal wrapper (Kimi K2.5/K2.6: ``text_config.hidden_size``; ``vision_config`` has its own),
    else at the top level."""
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise NcclError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise NcclError(f"{path}: not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise NcclError(f"{path}: not a JSON object")
    text_config = config.get("text_config")
    candidates = [("hidden_size", config.get("hidden_size"))]
    if isinstance(text_config, dict):
        candidates.insert(0, ("text_config.hidden_size", text_config.get("hidden_size")))
    for key, value in candidates:
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise NcclError(f"{path}: {key}: {value!r} is not a positive integer")
        return value
    raise NcclError(f"{path}: no hidden_size (looked for text_config.hidden_size and hidden_size)")


@dataclass(frozen=True)
class CampaignInputs:
    """What the sweep takes from a campaign: its name, decode batch sizes and configs' environments."""

    name: str
    concurrency: tuple[int, ...]
    config_envs: dict[str, dict[str, str]]

    @classmethod
    def from_json(cls, data: object, source: str) -> CampaignInputs:
        """From an expanded campaign (``Campaign.to_json``, campaign.json)."""
        if not isinstance(data, dict):
            raise NcclError(f"{source}: not an expanded campaign (a JSON object)")
        configs = data.get("configs")
        # The one workload, or each of several by name: the decode batches of them all.
        named = data.get("workloads")
        workloads = named if isinstance(named, dict) else {"workload": data.get("workload")}
        concurrency: list[object] = []
        for key, workload in workloads.items():
            levels = workload.get("concurrency") if isinstance(workload, dict) else None
            if isinstance(workload, dict) and workload.get("request_rate"):
                # An open loop's decode batches reach its bound on requests in flight.
                levels = [workload.get("max_concurrency")]
            if not isinstance(levels, list) or not all(
                isinstance(level, int) and not isinstance(level, bool) and level > 0 for level in levels
            ):
                where = "workload" if named is None else f"workloads.{key}"
                raise NcclError(f"{source}: {where}.concurrency: must be a list of positive integers")
            concurrency += levels
        if not isinstance(configs, dict):
            raise NcclError(f"{source}: configs: must be a mapping of config names")
        envs: dict[str, dict[str, str]] = {}
        for name, config in configs.items():
            env = config.get("env") if isinstance(config, dict) else None
            if not isinstance(env, dict):
                raise NcclError(f"{source}: configs.{name}.env: must be a mapping")
            envs[name] = {str(key): str(value) for key, value in env.items()}
        levels = sorted({level for level in concurrency if isinstance(level, int)})
        return cls(str(data.get("name", Path(source).stem)), tuple(levels), envs)


# --- statistics ------------------------------------------------------------------------------------------


def algorithm_bandwidth_gbps(size_bytes: int, time_us: float) -> float:
    """algbw = S / t: the message size over the operation's time, in GB/s (10^9 bytes per second)."""
    return size_bytes / (time_us * 1e-6) / 1e9


def bus_bandwidth_gbps(algbw_gbps: float, ranks: int) -> float:
    """All-reduce bus bandwidth as nccl-tests define it: busbw = algbw x 2(n-1)/n for n ranks.

    A ring all-reduce moves 2(n-1)/n x S bytes over each rank's link (reduce-scatter, then all-gather),
    so busbw is comparable with the links' own speed, whatever the number of GPUs.
    """
    return algbw_gbps * 2 * (ranks - 1) / ranks


def timing(times_us: Sequence[float], size_bytes: int, ranks: int) -> dict[str, Any]:
    """Median, p10 and p90 of the per-operation times; bandwidths from the median."""
    if not times_us or min(times_us) <= 0:
        raise NcclError(f"{size_bytes} bytes: {len(times_us)} samples, some not positive")
    median_us = median(times_us)
    algbw = algorithm_bandwidth_gbps(size_bytes, median_us)
    return {
        "median_us": median_us,
        "p10_us": percentile(times_us, 10),
        "p90_us": percentile(times_us, 90),
        "samples": len(times_us),
        "algbw_gbps": algbw,
        "busbw_gbps": bus_bandwidth_gbps(algbw, ranks),
    }


def size_result(size: MessageSize, measured: Mapping[str, Any], ranks: int) -> dict[str, Any]:
    """One size of one variant in nccl.json, from the worker's raw times."""
    graph_us = measured.get("graph_us")
    return {
        "bytes": size.bytes,
        "scale": size.scale,
        "tokens": size.tokens,
        "eager": timing(measured["eager_us"], size.bytes, ranks),
        "graph": timing(graph_us, size.bytes, ranks) if graph_us else None,
        "graph_error": measured.get("graph_error"),
    }


def variant_result(
    variant: Variant, sizes: Sequence[MessageSize], worker: Mapping[str, Any] | None, error: str | None
) -> dict[str, Any]:
    """One variant in nccl.json: its environment, its configs, and a result per size (or the error)."""
    entry: dict[str, Any] = {
        "name": variant.name,
        "env": dict(variant.env),
        "launch_env": variant.launch_env(),
        "configs": list(variant.configs),
        "error": error,
        "sizes": [],
    }
    if worker is not None:
        by_bytes = {int(item["bytes"]): item for item in worker["sizes"]}
        ranks = int(worker["world_size"])
        entry["sizes"] = [size_result(size, by_bytes[size.bytes], ranks) for size in sizes]
    return entry


@dataclass(frozen=True)
class SweepSpec:
    """Everything one ``fairbench nccl`` run measures, and how."""

    hidden_size: int
    sizes: tuple[MessageSize, ...]
    variants: tuple[Variant, ...]
    gpus: int
    campaign: str | None = None
    iters: int = 50
    warmup: int = 10
    graph: bool = True
    graph_ops: int = 10
    timeout_s: float = 300.0


def assemble(
    spec: SweepSpec, workers: Mapping[str, Mapping[str, Any]], errors: Mapping[str, str]
) -> dict[str, Any]:
    """nccl.json: the host, versions (as the first successful worker reported them), every variant."""
    first = next(iter(workers.values()), {})
    return {
        "format": FORMAT_VERSION,
        "host": socket.gethostname(),
        "campaign": spec.campaign,
        "gpus": spec.gpus,
        "device": first.get("device"),
        "torch": first.get("torch"),
        "nccl": first.get("nccl"),
        "cuda": first.get("cuda"),
        "hidden_size": spec.hidden_size,
        "dtype": "bfloat16",
        "iters": spec.iters,
        "warmup": spec.warmup,
        "graph_ops": spec.graph_ops if spec.graph else None,
        "bus_bandwidth": "busbw = algbw x 2(n-1)/n (nccl-tests); algbw = bytes / median time",
        "variants": [
            variant_result(variant, spec.sizes, workers.get(variant.name), errors.get(variant.name))
            for variant in spec.variants
        ],
    }


# --- running the workers ---------------------------------------------------------------------------------


def worker_environment(variant: Variant, base: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment without its NCCL_* variables, plus the variant's (module docstring)."""
    kept = {key: value for key, value in base.items() if not key.startswith(NCCL_PREFIX)}
    return {**kept, **variant.launch_env()}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class _Stream:
    """A child's pipe read on its own thread: every line of stdout, the last lines of stderr."""

    pipe: IO[str]
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=STDERR_TAIL_LINES))
    lines: list[str] = field(default_factory=list)
    on_line: Callable[[str], None] | None = None

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._read, daemon=True)
        thread.start()
        return thread

    def _read(self) -> None:
        for raw in self.pipe:
            line = raw.rstrip("\n")
            if self.on_line is not None and line.startswith(PROGRESS_PREFIX):
                self.on_line(line[len(PROGRESS_PREFIX) :].strip())
                continue
            self.lines.append(line)
            self.tail.append(line)


def count_gpus(python: str, worker: Path = WORKER_SCRIPT) -> int:
    """The GPUs torch sees under ``python`` (CUDA_VISIBLE_DEVICES applies)."""
    try:
        done = subprocess.run(
            [python, str(worker), "--count-gpus"], capture_output=True, text=True, timeout=120, check=False
        )
    except OSError as exc:
        raise NcclError(f"--python {python}: cannot run: {exc.strerror or exc}") from None
    if done.returncode != 0 or not done.stdout.strip().isdigit():
        tail = "\n".join(done.stderr.splitlines()[-STDERR_TAIL_LINES:])
        raise NcclError(
            f"--python {python}: counting GPUs with torch failed (exit {done.returncode}):\n{tail}"
        )
    return int(done.stdout.strip())


class Runner:
    """Starts one worker per GPU for each variant and collects rank 0's JSON document."""

    def __init__(
        self,
        spec: SweepSpec,
        python: str,
        worker: Path = WORKER_SCRIPT,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        self.spec = spec
        self.python = python
        self.worker = worker
        self.progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))

    def argv(self, rank: int, port: int) -> list[str]:
        spec = self.spec
        argv = [self.python, str(self.worker), "--rank", str(rank), "--world-size", str(spec.gpus)]
        argv += ["--master-addr", "127.0.0.1", "--master-port", str(port)]
        argv += ["--sizes", ",".join(str(size.bytes) for size in spec.sizes)]
        argv += ["--iters", str(spec.iters), "--warmup", str(spec.warmup), "--graph-ops", str(spec.graph_ops)]
        return [*argv, "--no-graph"] if not spec.graph else argv

    def run(self) -> dict[str, Any]:
        """nccl.json's document; a variant whose workers failed gets its ``error``, the others still run."""
        workers: dict[str, dict[str, Any]] = {}
        errors: dict[str, str] = {}
        for index, variant in enumerate(self.spec.variants, 1):
            env_text = " ".join(f"{key}={value}" for key, value in variant.launch_env().items())
            self.progress(f"variant {index}/{len(self.spec.variants)} {variant.name}: {env_text}")
            try:
                workers[variant.name] = self.run_variant(variant)
            except NcclError as exc:
                errors[variant.name] = str(exc)
                self.progress(f"variant {variant.name}: failed: {exc}")
        return assemble(self.spec, workers, errors)

    def _show_progress(self, variant: Variant) -> Callable[[str], None]:
        done = [0]

        def show(text: str) -> None:
            done[0] += 1
            try:
                data = json.loads(text)
                graph = data.get("graph_median_us")
                figures = f"eager {data['eager_median_us']:.1f} us" + (
                    f", graph {graph:.1f} us" if graph is not None else ""
                )
                size = f"{int(data['bytes']):,} B"
            except (ValueError, KeyError, TypeError):
                size, figures = "?", text
            self.progress(f"  {variant.name} [{done[0]}/{len(self.spec.sizes)}] {size}: {figures}")

        return show

    def run_variant(self, variant: Variant) -> dict[str, Any]:
        """Rank 0's document for ``variant``; ``NcclError`` with the failing ranks' stderr tails."""
        port = _free_port()
        env = worker_environment(variant, os.environ)
        children: list[tuple[subprocess.Popen[str], _Stream, _Stream, list[threading.Thread]]] = []
        for rank in range(self.spec.gpus):
            child = subprocess.Popen(
                self.argv(rank, port),
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            assert child.stdout is not None and child.stderr is not None
            out = _Stream(child.stdout)
            err = _Stream(child.stderr, on_line=self._show_progress(variant) if rank == 0 else None)
            children.append((child, out, err, [out.start(), err.start()]))
        timed_out = self._wait([child for child, _, _, _ in children])
        for _, _, _, threads in children:
            for thread in threads:
                thread.join()
        failed = [
            (rank, child.returncode, err.tail)
            for rank, (child, _, err, _) in enumerate(children)
            if child.returncode != 0
        ]
        if timed_out or failed:
            what = f"timed out after {self.spec.timeout_s:g} s" if timed_out else "worker failed"
            details = "".join(
                f"\n  rank {rank} (exit {code}{', killed' if code == -signal.SIGKILL else ''}):"
                + "".join(f"\n    {line}" for line in tail)
                for rank, code, tail in failed
            )
            raise NcclError(f"variant {variant.name}: {what}{details}")
        return self.document(variant, children[0][1].lines)

    def _wait(self, children: Sequence[subprocess.Popen[str]]) -> bool:
        """Waits for every rank; True when the timeout ran out. Once a rank fails, the others (stuck in
        a collective that will never complete) are killed after a grace period."""
        deadline = time.monotonic() + self.spec.timeout_s
        failed_at: float | None = None
        while any(child.poll() is None for child in children):
            now = time.monotonic()
            if failed_at is None and any(child.returncode not in (None, 0) for child in children):
                failed_at = now
            if now >= deadline or (failed_at is not None and now >= failed_at + FAILURE_GRACE_S):
                for child in children:
                    if child.poll() is None:
                        child.kill()
                        child.wait()
                return failed_at is None
            time.sleep(POLL_INTERVAL_S)
        return False

    def document(self, variant: Variant, stdout: list[str]) -> dict[str, Any]:
        """Rank 0's JSON document, checked against the protocol and the sizes asked for."""
        try:
            document = json.loads("\n".join(stdout))
        except ValueError:
            raise NcclError(
                f"variant {variant.name}: rank 0 printed no JSON document: {stdout[-3:]}"
            ) from None
        if not isinstance(document, dict) or document.get("protocol") != WORKER_PROTOCOL:
            raise NcclError(f"variant {variant.name}: rank 0's document is not protocol {WORKER_PROTOCOL}")
        items = document.get("sizes")
        if not isinstance(items, list) or not all(
            isinstance(item, dict) and isinstance(item.get("bytes"), int) for item in items
        ):
            raise NcclError(f"variant {variant.name}: rank 0's sizes are not a list of objects with bytes")
        measured = {item["bytes"] for item in items}
        missing = [size.bytes for size in self.spec.sizes if size.bytes not in measured]
        if missing or document.get("world_size") != self.spec.gpus:
            raise NcclError(
                f"variant {variant.name}: rank 0 reported world size {document.get('world_size')} "
                f"(expected {self.spec.gpus}) and lacks sizes {missing}"
            )
        for item in items:
            for key in ("eager_us", "graph_us"):
                times = item.get(key)
                if (key == "eager_us" or times is not None) and not _is_times(times):
                    raise NcclError(
                        f"variant {variant.name}: rank 0's {key} of {item['bytes']} bytes is not a list of "
                        f"microseconds: {str(times)[:80]}"
                    )
        return document


def _is_times(value: Any) -> bool:
    """A non-empty list of finite numbers (not booleans)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in value)
    )


def write_result(document: Mapping[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RESULT_FILE
    temporary = path.with_suffix(".json.tmp")
    temporary.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    temporary.replace(path)
    return path
