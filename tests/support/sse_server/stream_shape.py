"""What a response streams before any bytes: its tokens and how they group into chunks."""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.sse_server.faults import FaultRule

# Token i of every response is TOKEN_TEXTS[i % 8] with id TOKEN_IDS[i % 8]: plain ASCII,
# so no JSON escaping can differ between encoders.
TOKEN_TEXTS = (" the", " quick", " brown", " fox", " jumps", " over", " lazy", " dog")
TOKEN_IDS = (279, 4062, 14198, 39935, 34208, 927, 16053, 5679)
EOS_TOKEN_ID = 2


@dataclass(frozen=True)
class StreamShape:
    """Everything that decides a stream's bytes except its id and clock readings."""

    api: str  # completions | chat | generate
    model: str
    prompt_tokens: int
    output_tokens: int
    tokens_per_chunk: int
    finish: str  # "length" | "stop" (EOS)
    include_usage: bool
    continuous_usage: bool
    first_token_s: float
    chunk_gap_s: float
    fault: FaultRule | None = None


def chunk_token_counts(output_tokens: int, tokens_per_chunk: int) -> list[int]:
    """Tokens per content chunk: the prefill's one token at once, then groups."""
    if output_tokens == 0:
        return [0]
    counts = [1]
    left = output_tokens - 1
    while left > 0:
        counts.append(min(tokens_per_chunk, left))
        left -= counts[-1]
    return counts


def token_text(start: int, stop: int) -> str:
    return "".join(TOKEN_TEXTS[i % 8] for i in range(start, stop))
