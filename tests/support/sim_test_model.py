"""A small performance model for the simulator's unit tests: step times simple enough to work out by hand."""

from __future__ import annotations

from fairbench.sim.model import LayoutCost, PerformanceModel, Speculation

# t(b) = 10 ms + 1 ms * b; prefill = 20 ms per forward + 1 ms per 10 input tokens.
COST = LayoutCost(t0_s=0.010, k_s=0.001, prefill_tokens_per_s=10_000.0, prefill_forward_s=0.020)


def simple_model(speculation: Speculation | None = None) -> PerformanceModel:
    """COST with no CUDA-graph or speculation overheads."""
    return PerformanceModel(
        layout="test",
        cost=COST,
        cuda_graph_max_bs=1000,
        eager_extra_s=0.0,
        speculation=speculation,
        draft_step_s=0.0,
        verify_token_cost=0.0,
    )
