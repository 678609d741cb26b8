"""``fairbench sweep``: a concurrency sweep against one running server.

Every number an option takes has its range in bounds.py (NaN and infinities are never in one). However a
sweep ends, it ends in one line saying how, after the summary of the points measured so far.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fairbench.campaign.model import Workload
from fairbench.campaign.sweep import sweep_spec
from fairbench.cli import interruptible
from fairbench.cli.usage import UsageError
from fairbench.measure import bounds
from fairbench.measure.bounds import Bound
from fairbench.measure.client import DEFAULT_CONNECT_TIMEOUT_S, DEFAULT_READ_TIMEOUT_S, ServerUnreachable
from fairbench.measure.energy import GpuSelectionError
from fairbench.measure.progress import Progress
from fairbench.measure.repeats import AUTO, DEFAULT_REPEATS, AutoRepeats, Repeats
from fairbench.measure.results import ResultsDir, ResultsError, RunIdentity
from fairbench.measure.results_format import is_open_loop
from fairbench.measure.server_metrics import SAMPLE_INTERVAL_S
from fairbench.measure.slo import SloError, SloTarget, parse_target
from fairbench.measure.sweep import DEFAULT_MAX_ERROR_RATE, Sweep, SweepSpec
from fairbench.measure.trace_replay import load_window, replay_rates
from fairbench.measure.traces import TraceError
from fairbench.measure.vocabulary import VocabularyError
from fairbench.measure.workload import (
    APIS,
    ARRIVALS,
    CACHE_STATES,
    CARRIED,
    DEFAULT_API,
    DEFAULT_ARRIVAL,
    DEFAULT_BURSTINESS,
    DEFAULT_CACHE_STATE,
    DEFAULT_MULTI_TURN,
    DEFAULT_PROMPTS_PER_LEVEL,
    DEFAULT_RANGE_RATIO,
    DEFAULT_SEED,
    DEFAULT_SHARED_PREFIX,
    DEFAULT_WARMUP,
    FLUSHED,
    GENERATED,
    GROUPED,
    MIN_PROMPTS_PER_LEVEL,
    MULTI_TURN,
    POISSON,
    PRIMED,
    RANDOM_IDS,
    SHARED_PREFIX,
    SHUFFLED,
    TRACE,
    LevelCount,
    MultiTurn,
    SharedPrefix,
    TraceWindow,
    WorkloadError,
    level_count,
    parse_count,
)


def _number(text: str, bound: Bound) -> int | float:
    """``text`` as a number within ``bound``; an integer bound's ``1e11`` or ``nan`` is read as a float,
    for the bound to refuse it by name."""
    kinds: tuple[type[int] | type[float], ...] = (int, float) if bound.integer else (float,)
    for kind in kinds:
        try:
            value = kind(text)
        except ValueError:
            continue
        if (problem := bound.problem(value)) is not None:
            raise argparse.ArgumentTypeError(f"{text!r} {problem}")
        return value
    raise argparse.ArgumentTypeError(f"{text!r} is not a number")


def bounded(bound: Bound) -> Callable[[str], Any]:
    """argparse type of a number within ``bound`` (also ``fairbench nccl``'s)."""
    return lambda text: _number(text, bound)


def _bounded_list(text: str, bound: Bound, item: str, what: str = "integers") -> list[int | float]:
    """Comma-separated numbers within ``bound`` (``what`` they are, for the message), none twice."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"{text!r} must be a comma-separated list of {what}")
    try:
        values = [_number(part, bound) for part in parts]
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"{text!r} lists a {item} twice")
    return values


def concurrency_list(text: str) -> list[int]:
    """argparse type of a comma-separated list of concurrency levels (also ``fairbench nccl``'s)."""
    return [int(value) for value in _bounded_list(text, bounds.CONCURRENCY, "level")]


def _rate_list(text: str) -> list[float]:
    return [float(value) for value in _bounded_list(text, bounds.REQUEST_RATE, "rate", "request rates")]


def _speedup_list(text: str) -> list[float]:
    return [float(value) for value in _bounded_list(text, bounds.SPEEDUP, "speedup", "speedups")]


def _gpu_list(text: str) -> list[int]:
    return [int(value) for value in _bounded_list(text, bounds.GPU_INDEX, "GPU")]


def _count(text: str) -> LevelCount:
    try:
        return level_count(text)
    except WorkloadError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _repeats(text: str) -> Repeats:
    """argparse type of ``--repeats``: N, ``auto``, or ``auto:MIN:MAX:PCT`` (measure.repeats)."""
    if text == AUTO:
        return AutoRepeats()
    if not text.startswith(f"{AUTO}:"):
        return int(_number(text, bounds.REPEATS))
    parts = text.split(":")[1:]
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r} must be N, auto or auto:MIN:MAX:PCT")
    minimum, maximum = (int(_number(part, bounds.AUTO_REPEATS)) for part in parts[:2])
    if maximum < minimum:
        raise argparse.ArgumentTypeError(f"{text!r}: MAX {maximum} is below MIN {minimum}")
    return AutoRepeats(minimum, maximum, float(_number(parts[2], bounds.HALF_WIDTH_PCT)))


def _slo_entry(text: str) -> SloTarget:
    """argparse type of one ``--slo KEY=MS`` (measure.slo)."""
    key, equals, limit = text.partition("=")
    try:
        value = float(limit) if equals else None
        return parse_target(key, value)
    except (SloError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def _name(text: str) -> str:
    """argparse type of a name a point line records (``--campaign`` and the like)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must name something: it is empty")
    if not text.isprintable():
        raise argparse.ArgumentTypeError(f"{text!r} holds a control character")
    return text


def _results_dir(text: str) -> Path:
    if not text:
        raise argparse.ArgumentTypeError("an empty path would write into the current directory: name one")
    return Path(text)


DESCRIPTION = (
    "Measure one running server at each load level: a concurrency level keeps C requests in flight, each "
    "replaced the moment it ends (closed loop); a request rate sends requests as they fall due (open loop). "
    "Each level gets a warmup first, then its measured requests. Every level and repeat becomes one line of "
    "OUT/points.jsonl (the keys of SGLang's bench_serving, and fairbench's own), with each request's timings "
    "under OUT/requests/. It ends by printing a table of the points; the exit status is 1 when the sweep "
    "failed or a point completed no request. An interrupted sweep loses only the level in flight: run it "
    "again with --resume."
)
EPILOG = """\
examples:
  fairbench sweep --url http://127.0.0.1:30000 --input-len 1024 --output-len 512 \\
      --concurrency 1,2,4,8,16,32,64 --out results/try
  fairbench sweep --url http://127.0.0.1:30000 --input-len 1024 --output-len 512 \\
      --request-rate 0.5,1,2 --max-concurrency 64 --slo ttft_p99_ms=2000 --out results/open

Every option and file is described in docs/running.md and docs/results.md.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.add_argument("--url", required=True, help="server base URL, e.g. http://127.0.0.1:30000")
    parser.add_argument(
        "--api", choices=APIS, default=DEFAULT_API, help=f"generation API (default {DEFAULT_API})"
    )
    parser.add_argument(
        "--model", help="model name for the OpenAI APIs (default: the server's, from /v1/models)"
    )
    parser.add_argument(
        "--api-key", default=os.environ.get("FAIRBENCH_API_KEY"), help="bearer token (or FAIRBENCH_API_KEY)"
    )
    parser.add_argument(
        "--dataset",
        default=RANDOM_IDS,
        help=f"{RANDOM_IDS}, {SHARED_PREFIX} (the --gsp-* options), {MULTI_TURN} (the --mt-* options), or "
        "a ShareGPT-style JSON file",
    )
    tokens = bounded(bounds.TOKENS)
    parser.add_argument(
        "--input-len",
        type=tokens,
        help=f"input tokens per request (with {SHARED_PREFIX} or {MULTI_TURN}: the --gsp-* or --mt-* lengths "
        "together)",
    )
    parser.add_argument(
        "--output-len", type=tokens, help="output tokens per request (required but with --trace)"
    )
    parser.add_argument(
        "--range-ratio",
        type=bounded(bounds.SHARE),
        default=DEFAULT_RANGE_RATIO,
        help="draw each request's lengths between this share of the length and the length (default "
        "%(default)g: all the same)",
    )
    shared = parser.add_argument_group(
        f"{SHARED_PREFIX}",
        "groups of requests sharing a system prompt, as sglang.bench_serving's generated-shared-prefix",
    )
    default = DEFAULT_SHARED_PREFIX
    shared.add_argument(
        "--gsp-num-groups",
        type=bounded(bounds.PREFIX_GROUPS),
        default=default.groups,
        help="system prompts (default %(default)s)",
    )
    shared.add_argument(
        "--gsp-prompts-per-group",
        type=bounded(bounds.PROMPTS_PER_GROUP),
        default=default.prompts_per_group,
        help="requests per system prompt (default %(default)s)",
    )
    shared.add_argument(
        "--gsp-system-prompt-len",
        type=tokens,
        default=default.system_prompt_len,
        help="tokens of each system prompt (default %(default)s)",
    )
    shared.add_argument(
        "--gsp-question-len",
        type=tokens,
        default=default.question_len,
        help="tokens of each request's question, after its system prompt (default %(default)s)",
    )
    shared.add_argument(
        "--gsp-ordered",
        action="store_true",
        help=f"send each group's requests together, group after group (default: {SHUFFLED}, from the seed)",
    )
    turns = parser.add_argument_group(
        f"{MULTI_TURN}",
        "conversations whose every turn sends the conversation so far, the server's replies included "
        "(--concurrency: the conversations in flight; token ids need --api generate)",
    )
    default_turns = DEFAULT_MULTI_TURN
    turns.add_argument(
        "--mt-turns",
        type=bounded(bounds.TURNS),
        default=default_turns.turns,
        help="turns of each conversation (default %(default)s)",
    )
    turns.add_argument(
        "--mt-user-len",
        type=tokens,
        default=default_turns.user_len,
        help="tokens of each user turn (default %(default)s)",
    )
    turns.add_argument(
        "--mt-system-prompt-len",
        type=bounded(bounds.SYSTEM_PROMPT_TOKENS),
        default=default_turns.system_prompt_len,
        help="tokens of each conversation's system prompt (default %(default)s: none)",
    )
    turns.add_argument(
        "--mt-system-prompts",
        type=bounded(bounds.SYSTEM_PROMPTS),
        default=default_turns.system_prompts,
        help="distinct system prompts, shared round-robin by the conversations (default %(default)s)",
    )
    turns.add_argument(
        "--mt-think-time",
        type=bounded(bounds.THINK_TIME_S),
        default=default_turns.think_time_s,
        help="seconds between a reply and the next turn (default %(default)g)",
    )
    turns.add_argument(
        "--mt-sharegpt",
        metavar="FILE",
        help="take the user turns from this ShareGPT-style file's conversations (text prompts) instead "
        "of --mt-user-len random tokens",
    )
    load = parser.add_mutually_exclusive_group(required=True)
    load.add_argument("--concurrency", type=concurrency_list, help="closed-loop levels, e.g. 1,2,4,8")
    load.add_argument(
        "--request-rate",
        type=_rate_list,
        help="open-loop levels, requests per second, e.g. 0.5,1,2 (needs --max-concurrency)",
    )
    load.add_argument(
        "--trace",
        type=Path,
        metavar="FILE",
        help="replay a request trace (Mooncake .jsonl or Azure .csv): each request at its time, with its "
        "lengths and shared blocks (levels: --trace-speedup)",
    )
    trace = parser.add_argument_group("trace replay", "the window of --trace replayed, and how fast")
    trace.add_argument(
        "--trace-speedup",
        type=_speedup_list,
        default=[1.0],
        help="levels: how much faster than recorded, e.g. 0.5,1,2 (default 1); each is the window's own "
        "request rate times the speedup",
    )
    trace.add_argument(
        "--trace-start",
        type=bounded(bounds.TRACE_SECONDS),
        default=0.0,
        help="replay from this many seconds after the trace's first request (default 0)",
    )
    trace.add_argument(
        "--trace-duration",
        type=bounded(bounds.TRACE_DURATION_S),
        help="replay this many seconds of the trace (default: to its end)",
    )
    trace.add_argument(
        "--trace-count",
        type=bounded(bounds.TRACE_REQUESTS),
        help="replay at most this many requests (default: every one in the window)",
    )
    parser.add_argument(
        "--arrival",
        choices=ARRIVALS,
        default=DEFAULT_ARRIVAL,
        help=f"open-loop arrivals (default {DEFAULT_ARRIVAL})",
    )
    parser.add_argument(
        "--burstiness",
        type=bounded(bounds.BURSTINESS),
        default=DEFAULT_BURSTINESS,
        help="the shape of gamma arrivals: below 1 burstier, above 1 more even (default %(default)g)",
    )
    parser.add_argument(
        "--max-concurrency",
        type=bounded(bounds.CONCURRENCY),
        help="open loop: the most requests in flight (one due beyond them waits, timed from when due)",
    )
    parser.add_argument(
        "--prompts-per-level",
        type=_count,
        default=DEFAULT_PROMPTS_PER_LEVEL,
        help="measured requests per level: N, or Nx for N times the level (default %(default)s, at least "
        f"{MIN_PROMPTS_PER_LEVEL})",
    )
    parser.add_argument(
        "--warmup",
        type=_count,
        default=DEFAULT_WARMUP,
        help=f"warmup requests: N or Nx (default {DEFAULT_WARMUP})",
    )
    auto = AutoRepeats()
    parser.add_argument(
        "--repeats",
        type=_repeats,
        default=DEFAULT_REPEATS,
        help=f"measure every level N times (default %(default)s); auto: {auto.minimum} to {auto.maximum} "
        f"times, until the throughput's 95 %% interval is within ±{auto.half_width_pct:g} %%; "
        "auto:MIN:MAX:PCT sets those bounds",
    )
    parser.add_argument(
        "--slo",
        type=_slo_entry,
        action="append",
        default=[],
        metavar="KEY=MS",
        help="an objective each point is judged against, e.g. ttft_p99_ms=2000 or tpot_p50_ms=50 "
        "(repeatable); each point records whether it met them, and its goodput",
    )
    parser.add_argument(
        "--search-resolution",
        type=bounded(bounds.SEARCH_RESOLUTION),
        help="after the levels, search between the last level meeting --slo and the first that does not, to "
        "within N requests in flight",
    )
    parser.add_argument(
        "--seed",
        type=bounded(bounds.SEED),
        default=DEFAULT_SEED,
        help=f"prompt seed (default {DEFAULT_SEED})",
    )
    parser.add_argument(
        "--vocab-size",
        type=bounded(bounds.VOCABULARY),
        help="random token ids from [0, N) (default: the served model's vocabulary, from its files)",
    )
    cache = parser.add_mutually_exclusive_group()
    cache.add_argument(
        "--cache-state",
        choices=CACHE_STATES,
        default=DEFAULT_CACHE_STATE,
        help=f"what the prefix cache holds when each point starts: {CARRIED} (what the previous point left), "
        f"{FLUSHED} (POST /flush_cache before its warmup), {PRIMED} (flushed, then each group's system "
        f"prompt sent once; {SHARED_PREFIX} only) (default %(default)s)",
    )
    cache.add_argument(
        "--flush-cache",
        dest="cache_state",
        action="store_const",
        const=FLUSHED,
        help=f"the same as --cache-state {FLUSHED}",
    )
    parser.add_argument(
        "--max-error-rate",
        type=bounded(bounds.SHARE),
        default=DEFAULT_MAX_ERROR_RATE,
        help="stop a level early once more than this share of its requests failed (default %(default)g)",
    )
    parser.add_argument("--gpus", type=bounded(bounds.GPUS), help="GPUs serving, for per-GPU throughput")
    energy = parser.add_mutually_exclusive_group()
    energy.add_argument(
        "--energy-gpus",
        type=_gpu_list,
        help="GPUs whose energy counts, by NVML index, e.g. 0,1 (default: every GPU NVML sees)",
    )
    energy.add_argument("--no-energy", action="store_true", help="do not sample GPU energy")
    parser.add_argument(
        "--client-processes",
        type=bounded(bounds.CLIENT_PROCESSES),
        help="processes the client's streams are spread over (default: one per 128 streams of the highest "
        "level, up to the usable cores less one)",
    )
    metrics = parser.add_mutually_exclusive_group()
    metrics.add_argument(
        "--no-server-metrics",
        action="store_true",
        help="do not scrape the server's /metrics around each point (default: where it answers)",
    )
    metrics.add_argument(
        "--server-metrics-interval",
        type=bounded(bounds.METRICS_INTERVAL_S),
        default=SAMPLE_INTERVAL_S,
        help="seconds between scrapes of /metrics during a point (default %(default)g)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=bounded(bounds.CONNECT_TIMEOUT_S),
        default=DEFAULT_CONNECT_TIMEOUT_S,
        help="seconds to wait for a connection to the server (default %(default)g)",
    )
    parser.add_argument(
        "--read-timeout",
        type=bounded(bounds.READ_TIMEOUT_S),
        default=DEFAULT_READ_TIMEOUT_S,
        help="seconds a response may go without data before its request counts as failed (default "
        "%(default)g)",
    )
    parser.add_argument("--out", type=_results_dir, required=True, help="results directory")
    identity = parser.add_argument_group(
        "identity",
        "the names each point line records (a campaign run sets all four); with --resume, one left out is "
        "taken from the points already there, and one that differs from theirs is refused",
    )
    identity.add_argument("--campaign", type=_name, help="the campaign's name (default none)")
    identity.add_argument("--run-id", type=_name, help="the campaign run's id (default none)")
    identity.add_argument(
        "--host",
        type=_name,
        help="the host measured, as the inventory names it (default: this machine's name)",
    )
    identity.add_argument("--config", type=_name, help="the serving config's name (default none)")
    parser.add_argument("--resume", action="store_true", help="skip the points already in --out")
    parser.add_argument(
        "--remeasure-failed",
        action="store_true",
        help="with --resume: measure again the points with failed requests",
    )
    parser.add_argument(
        "--progress",
        choices=("auto", "bar", "lines"),
        default="auto",
        help="a live bar, plain lines (for logs), or auto: the bar on a terminal (default %(default)s)",
    )


def _url_problem(url: str) -> str | None:
    """Why ``url`` cannot be a server's base URL, or None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a port out of range, or not a number
        host = parts.hostname
        if host:
            host.encode("idna")  # what the client does before it connects (empty or overlong labels)
    except ValueError as exc:  # UnicodeError is one
        return str(exc)
    if parts.scheme not in ("http", "https"):
        return "must start with http:// or https://"
    if not host:
        return "names no host"
    return None


def _shared_prefix(args: argparse.Namespace) -> SharedPrefix | None:
    if args.dataset != SHARED_PREFIX:
        return None
    return SharedPrefix(
        groups=args.gsp_num_groups,
        prompts_per_group=args.gsp_prompts_per_group,
        system_prompt_len=args.gsp_system_prompt_len,
        question_len=args.gsp_question_len,
        order=GROUPED if args.gsp_ordered else SHUFFLED,
    )


def _multi_turn(args: argparse.Namespace) -> MultiTurn | None:
    if args.dataset != MULTI_TURN:
        return None
    if args.mt_sharegpt is not None and not _is_file(args.mt_sharegpt):
        raise UsageError(f"--mt-sharegpt: {args.mt_sharegpt!r} is not a file")
    return MultiTurn(
        turns=args.mt_turns,
        user_len=args.mt_user_len,
        system_prompt_len=args.mt_system_prompt_len,
        system_prompts=args.mt_system_prompts,
        think_time_s=args.mt_think_time,
        sharegpt=None if args.mt_sharegpt is None else str(Path(args.mt_sharegpt).absolute()),
    )


def _input_len(args: argparse.Namespace, shared: SharedPrefix | None, turns: MultiTurn | None) -> int:
    """``--input-len``, or the shared prefix's or the first turn's lengths, which it may repeat but not
    contradict."""
    if shared is not None:
        given, options = shared.input_len, "--gsp-system-prompt-len + --gsp-question-len"
    elif turns is not None:
        given, options = turns.first_input_len, "--mt-system-prompt-len + --mt-user-len"
    else:
        if args.input_len is None:
            raise UsageError(f"--input-len: required (but with --dataset {SHARED_PREFIX} or {MULTI_TURN})")
        return int(args.input_len)
    if args.input_len not in (None, given):
        raise UsageError(f"--input-len: {args.input_len} is not {options}, {given}: leave it out")
    return given


def _trace_load(args: argparse.Namespace) -> dict[str, Any]:
    """The Workload fields of ``--trace``'s replay: its window, whose own rate times each speedup are the
    levels, its longest lengths, its arrivals, and at most all of it in flight unless capped."""
    _check_trace_options(args)
    window = TraceWindow(str(args.trace), args.trace_start, args.trace_duration, args.trace_count)
    try:
        requests = load_window(window)
    except TraceError as exc:
        raise UsageError(f"--trace: {exc}") from None
    return {
        "dataset": TRACE,
        "trace": window,
        "input_len": max(request.input_len for request in requests),
        "output_len": max(request.output_len for request in requests),
        "request_rate": tuple(replay_rates(requests, args.trace_speedup)),
        "arrival": TRACE,
        "max_concurrency": args.max_concurrency or len(requests),
    }


def _check_trace_options(args: argparse.Namespace) -> None:
    """What a trace sets itself, given beside --trace, is refused naming the option."""
    for option, given in (
        ("--dataset", args.dataset != RANDOM_IDS),
        ("--input-len", args.input_len is not None),
        ("--output-len", args.output_len is not None),
        ("--range-ratio", args.range_ratio != DEFAULT_RANGE_RATIO),
        ("--arrival", args.arrival != DEFAULT_ARRIVAL),
        ("--search-resolution", args.search_resolution is not None),
        ("--cache-state primed", args.cache_state == PRIMED),
    ):
        if given:
            raise UsageError(f"{option}: a trace sets its own requests, lengths and arrivals: leave it out")


def spec_from_args(args: argparse.Namespace) -> SweepSpec:
    shared = _shared_prefix(args)
    turns = _multi_turn(args)
    if args.trace is not None:
        load = _trace_load(args)
    else:
        if args.output_len is None:
            raise UsageError("--output-len: required (but with --trace)")
        load = {
            "dataset": args.dataset,
            "input_len": _input_len(args, shared, turns),
            "output_len": args.output_len,
            "request_rate": tuple(args.request_rate or ()),
            "arrival": args.arrival,
            "max_concurrency": args.max_concurrency,
        }
    workload = Workload(
        api=args.api,
        concurrency=tuple(args.concurrency or ()),
        prompts_per_level=args.prompts_per_level,
        warmup=args.warmup,
        repeats=args.repeats,
        seed=args.seed,
        vocab_size=args.vocab_size,
        burstiness=args.burstiness,
        search_resolution=args.search_resolution,
        shared_prefix=shared,
        multi_turn=turns,
        cache_state=args.cache_state,
        **load,
    )
    try:
        spec = sweep_spec(
            workload,
            args.url,
            range_ratio=args.range_ratio,
            model=args.model,
            api_key=args.api_key,
            gpus=args.gpus,
            energy=not args.no_energy,
            energy_gpus=args.energy_gpus,
            identity=RunIdentity(
                campaign=args.campaign, run_id=args.run_id, host=args.host, config=args.config
            ),
            slo=tuple(args.slo),
            client_processes=args.client_processes,
            max_error_rate=args.max_error_rate,
            connect_timeout=args.connect_timeout,
            read_timeout=args.read_timeout,
            server_metrics=not args.no_server_metrics,
            server_metrics_interval_s=args.server_metrics_interval,
        )
    except WorkloadError as exc:
        raise UsageError(f"--{str(exc).replace('_', '-')}") from None
    _check_together(args)
    return spec


def _check_together(args: argparse.Namespace) -> None:
    """The checks no option's type can make alone; UsageError names the option."""
    if args.dataset not in GENERATED and not _is_file(args.dataset):
        raise UsageError(
            f"--dataset: {args.dataset!r} is not {RANDOM_IDS!r}, {SHARED_PREFIX!r}, {MULTI_TURN!r} nor a file"
        )
    if args.trace is None:
        _check_levels(args)
    if (problem := _url_problem(args.url)) is not None:
        raise UsageError(f"--url: {args.url!r}: {problem}")
    if args.search_resolution is not None and not args.slo:
        raise UsageError("--search-resolution: searches for the highest level meeting an SLO: add --slo")
    if len({target.key for target in args.slo}) != len(args.slo):
        raise UsageError("--slo: an objective is given twice")
    if args.remeasure_failed and not args.resume:
        raise UsageError(
            "--remeasure-failed: measures again points of a sweep already in --out: add --resume"
        )


def _check_levels(args: argparse.Namespace) -> None:
    """A closed or random open loop's levels and their options (a trace's are its own)."""
    open_loop = args.request_rate is not None
    if open_loop and args.max_concurrency is None:
        raise UsageError("--max-concurrency: an open loop needs its bound on requests in flight")
    if not open_loop and args.max_concurrency is not None:
        raise UsageError("--max-concurrency: bounds an open loop; a closed loop's bound is its --concurrency")
    if args.arrival == POISSON and args.burstiness != DEFAULT_BURSTINESS:
        raise UsageError("--burstiness: shapes gamma arrivals only: add --arrival gamma")
    if open_loop and args.search_resolution is not None:
        raise UsageError("--search-resolution: searches over --concurrency levels, not request rates")
    for option, count in (("--prompts-per-level", args.prompts_per_level), ("--warmup", args.warmup)):
        try:
            parse_count(count, max(args.request_rate if open_loop else args.concurrency))
        except WorkloadError as exc:
            raise UsageError(f"{option}: {exc}") from None


def _is_file(path: str) -> bool:
    try:
        return Path(path).is_file()
    except OSError:  # a name too long
        return False


SUMMARY_COLUMNS = (
    ("C", "max_concurrency", "{:d}"),
    ("rep", "repeat", "{:d}"),
    ("ok", "completed", "{:d}"),
    ("failed", "failed", "{:d}"),
    ("out tok/s", "output_throughput", "{:,.1f}"),
    ("steady tok/s", "steady_output_throughput", "{:,.1f}"),
    ("TTFT p50 ms", "median_ttft_ms", "{:,.1f}"),
    ("TTFT p99 ms", "p99_ttft_ms", "{:,.1f}"),
    ("TPOT p50 ms", "median_tpot_ms", "{:,.2f}"),
    ("ITL p50 ms", "median_itl_ms", "{:,.2f}"),
    ("tok/s/user", "per_user_tps", "{:,.1f}"),
)
# Shown after C only for an open loop's points, whose C is their bound on requests in flight.
RATE_COLUMNS = (
    ("req/s", "request_rate", "{:g}"),
    ("achieved", "achieved_request_rate", "{:,.2f}"),
)
# Shown only when the sweep has an SLO.
SLO_COLUMNS = (
    ("SLO", "slo_met", "{}"),
    ("attained", "slo_attainment", "{:.1%}"),
    ("goodput tok/s", "goodput_output_throughput", "{:,.1f}"),
)
# Shown only when a point has GPU energy: a machine without GPUs gets no empty columns.
ENERGY_COLUMNS = (
    ("GPU W", "gpu_mean_power_w", "{:,.0f}"),
    ("tok/J", "output_tokens_per_j", "{:,.2f}"),
)


def summary_table(points: list[dict[str, Any]]) -> str:
    """Per-level summary, one row per point, columns right-aligned."""

    def cell(point: dict[str, Any], key: str, fmt: str) -> str:
        value = point.get(key)
        try:
            return "-" if value is None else fmt.format(value)
        except (TypeError, ValueError, OverflowError):  # a line edited by hand: shown as it is
            return str(value)

    columns: tuple[tuple[str, str, str], ...] = SUMMARY_COLUMNS
    if any(is_open_loop(point) for point in points):
        columns = (columns[0], *RATE_COLUMNS, *columns[1:])
    if any("gpu_energy_j" in point for point in points):
        columns += ENERGY_COLUMNS
    if any("slo_met" in point for point in points):
        columns += SLO_COLUMNS
    rows = [[header for header, _, _ in columns]]
    rows += [[cell(point, key, fmt) for _, key, fmt in columns] for point in points]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    return "\n".join(
        "  ".join(text.rjust(width) for text, width in zip(row, widths, strict=False)) for row in rows
    )


SWEEP_ERRORS = (GpuSelectionError, ResultsError, ServerUnreachable, VocabularyError, WorkloadError)


def _message(exc: Exception) -> str:
    """The error line's text, naming the option a run-time check refused."""
    if isinstance(exc, GpuSelectionError):
        return f"--energy-gpus: {exc}"
    if isinstance(exc, WorkloadError):  # the dataset's content: "dataset: FILE: ..."
        return f"--{exc}"
    return str(exc)


def _show_measured(results: ResultsDir) -> list[dict[str, Any]]:
    """Print the summary of the points in the directory, if it has any; returns them."""
    try:
        points = results.points()
    except ResultsError:  # the line that ends the sweep names the file
        return []
    if points:
        print(summary_table(points))
        print(f"points:   {results.points_path}")
        print(f"requests: {results.requests_dir}/")
    return points


def run(args: argparse.Namespace) -> int:
    spec = spec_from_args(args)
    results = ResultsDir(args.out)
    live = {"auto": None, "bar": True, "lines": False}[args.progress]
    sweep = Sweep(spec, results, Progress(sys.stderr, live=live))
    try:
        interruptible.run(sweep.run(resume=args.resume, remeasure_failed=args.remeasure_failed))
    except KeyboardInterrupt:
        _show_measured(results)
        raise
    except SWEEP_ERRORS as exc:
        _show_measured(results)
        print(f"fairbench sweep: error: {_message(exc)}", file=sys.stderr)
        return 1
    points = _show_measured(results)
    return 0 if all(point["completed"] for point in points) else 1
