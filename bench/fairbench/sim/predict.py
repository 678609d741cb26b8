"""What a closed-loop fixed-concurrency sweep against the simulator will measure, computed in virtual time.

The server's engine and scheduler run on a virtual clock with ``C`` clients that each send their next
request the moment the previous one finishes (a sweep client's overhead, typically well under a
millisecond, is taken as zero). The metrics follow ``sglang.bench_serving``: output throughput is all
output tokens over the point's duration; TTFT is first token minus send time; TPOT is
``(latency - TTFT) / (output_len - 1)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import mean

from fairbench.sim.args import SimConfig
from fairbench.sim.engine import Engine, Scheduler, SimRequest, VirtualClock


@dataclass(frozen=True, slots=True)
class PointPrediction:
    concurrency: int
    requests: int
    duration_s: float
    output_throughput: float
    mean_ttft_s: float
    mean_tpot_s: float


def prompts_per_point(concurrency: int) -> int:
    """The campaign default ``prompts_per_level: 10x``, at least 16."""
    return max(16, 10 * concurrency)


class _ClosedLoop:
    """``concurrency`` clients, each sending its next request as soon as its last one finishes."""

    def __init__(self, config: SimConfig, input_len: int, output_len: int, num_prompts: int) -> None:
        self.clock = VirtualClock()
        schedulers = [Scheduler(config.model, config.limits) for _ in range(config.dp_size)]
        self.engine = Engine(schedulers, self.clock, decode_log_interval=config.decode_log_interval)
        self.input_len = input_len
        self.output_len = output_len
        self.unsent = num_prompts
        self.sent_at: dict[int, float] = {}
        self.first_token_at: dict[int, float] = {}
        self.ttfts: list[float] = []
        self.tpots: list[float] = []

    def send(self) -> None:
        self.unsent -= 1
        request = SimRequest(prompt_tokens=self.input_len, output_limit=self.output_len, sink=self)
        self.sent_at[id(request)] = self.clock.time()
        self.engine.submit(request)

    def deliver(self, request: SimRequest, tokens: int, finished: bool) -> None:
        now = self.clock.time()
        key = id(request)
        self.first_token_at.setdefault(key, now)
        if not finished:
            return
        sent_at = self.sent_at.pop(key)
        ttft = self.first_token_at.pop(key) - sent_at
        self.ttfts.append(ttft)
        if self.output_len > 1:
            self.tpots.append((now - sent_at - ttft) / (self.output_len - 1))
        if self.unsent:
            self.send()


def predict_point(
    config: SimConfig, input_len: int, output_len: int, concurrency: int, num_prompts: int
) -> PointPrediction:
    loop = _ClosedLoop(config, input_len, output_len, num_prompts)
    for _ in range(min(concurrency, num_prompts)):
        loop.send()
    loop.engine.start()
    loop.clock.run()
    duration = loop.clock.time()
    return PointPrediction(
        concurrency=concurrency,
        requests=num_prompts,
        duration_s=duration,
        output_throughput=num_prompts * output_len / duration,
        mean_ttft_s=mean(loop.ttfts),
        mean_tpot_s=mean(loop.tpots) if loop.tpots else 0.0,
    )


def default_concurrencies(config: SimConfig) -> list[int]:
    """1, 2, 4, ... up to the server's total running-request capacity."""
    capacity = config.limits.max_running_requests * config.dp_size
    levels = [1]
    while levels[-1] * 2 <= capacity:
        levels.append(levels[-1] * 2)
    return levels


def predict_sweep(config: SimConfig, input_len: int, output_len: int) -> list[PointPrediction]:
    return [
        predict_point(config, input_len, output_len, concurrency, prompts_per_point(concurrency))
        for concurrency in default_concurrencies(config)
    ]


def format_sweep(config: SimConfig, input_len: int, output_len: int, points: list[PointPrediction]) -> str:
    peak = max(points, key=lambda point: point.output_throughput)
    limits = config.limits
    lines = [
        f"profile {config.profile.name}, layout {config.model.layout}, dp {config.dp_size}: closed loop, "
        f"input {input_len}, output {output_len}, max running {limits.max_running_requests} per dp rank, "
        f"chunked prefill {limits.chunked_prefill_size}, "
        f"{limits.decode_steps_per_round} decode steps per round",
        f"{'concurrency':>11} {'output tok/s':>12} {'mean TTFT ms':>12} {'mean TPOT ms':>12}",
    ]
    lines += [
        f"{point.concurrency:>11} {point.output_throughput:>12.1f} "
        f"{point.mean_ttft_s * 1000:>12.1f} {point.mean_tpot_s * 1000:>12.2f}"
        for point in points
    ]
    lines.append(f"peak {peak.output_throughput:.1f} tok/s at concurrency {peak.concurrency}")
    return "\n".join(lines)
