"""What each server start answers before its sweep, as campaign.json's ``answers`` holds it: the one owner
of that contract, read by the campaign loader (``campaign.answers``), the job on its host
(``answers.check``) and the report (``report.answers``).

- ``probes``: the prompts, in the order they are sent, each with its id; ``max_tokens`` each; the API they
  go through (``chat`` applies the server's chat template); ``concurrency``: how many are in flight at
  once (1: a greedy answer does not depend on what else the batch holds).
- ``min_identical_share``: the share of probes every config must answer exactly as the baseline does;
  None: reported, not required.
- ``match``: configs that must answer every probe exactly as another (a speculative config as its base).
- ``accuracy``: a task with known answers (``AccuracyPlan``); None: none.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from fairbench.measure.workload import CHAT

DEFAULT_PROBES = 16
DEFAULT_PROBE_TOKENS = 32
DEFAULT_SEED = 1
DEFAULT_PROBLEMS = 100
DEFAULT_TASK_TOKENS = 256
DEFAULT_TASK_CONCURRENCY = 8
DEFAULT_MAX_DROP_PCT = 2.0
BUILT_IN_TASK = "arithmetic"
"""The accuracy task fairbench generates itself (``answers.arithmetic``): runs offline."""


@dataclass(frozen=True)
class Probe:
    id: str
    """The prompt's id in its set (``p07``), stable whatever the draw."""
    prompt: str


@dataclass(frozen=True)
class AccuracyPlan:
    """A task with known answers: fairbench's own (``task: arithmetic``: ``problems`` drawn from ``seed``)
    or an lm-eval task by name (``lm_eval``, its first ``limit`` documents); each sent through the chat
    API, greedy, at most ``max_tokens``. ``max_drop_pct``: a config scoring below the baseline by more
    than this many percentage points is not named best."""

    task: str
    lm_eval: bool = False
    problems: int = DEFAULT_PROBLEMS
    seed: int = DEFAULT_SEED
    max_tokens: int = DEFAULT_TASK_TOKENS
    concurrency: int = DEFAULT_TASK_CONCURRENCY
    max_drop_pct: float = DEFAULT_MAX_DROP_PCT

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class AnswersPlan:
    probes: tuple[Probe, ...]
    max_tokens: int = DEFAULT_PROBE_TOKENS
    api: str = CHAT
    concurrency: int = 1
    min_identical_share: float | None = None
    match: dict[str, str] = field(default_factory=dict)
    accuracy: AccuracyPlan | None = None
    timeout_s: float = 300.0
    """Each request's time limit, seconds: a probe is a few dozen tokens, a server that takes longer is
    stuck."""

    def text(self) -> str:
        """What the plan asks, in one line: ``fairbench validate``'s and the report's."""
        parts = [
            f"{len(self.probes)} probes greedy through {self.api}, at most {self.max_tokens} tokens each"
            if self.probes
            else "no probes"
        ]
        parts += [f"{config} must answer as {other}" for config, other in self.match.items()]
        if self.min_identical_share is not None:
            parts.append(f"each config at least {self.min_identical_share:.0%} identical to the baseline")
        task = self.accuracy
        if task is not None:
            source = (
                f"lm-eval's {task.task}, {task.problems} documents"
                if task.lm_eval
                else (f"fairbench's {task.task}, {task.problems} problems")
            )
            parts.append(f"accuracy: {source}, at most {task.max_drop_pct:g} points below the baseline")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "probes": [asdict(probe) for probe in self.probes],
            "max_tokens": self.max_tokens,
            "api": self.api,
            "concurrency": self.concurrency,
            "min_identical_share": self.min_identical_share,
            "match": dict(self.match),
            "accuracy": None if self.accuracy is None else self.accuracy.to_json(),
            "timeout_s": self.timeout_s,
        }


def plan_from_json(value: object) -> AnswersPlan | None:
    """campaign.json's ``answers`` (``AnswersPlan.to_json``); None where absent or null (a campaign from
    before answers were checked). A value that is not such a plan is a ValueError saying what is wrong."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"answers: expected a mapping, got {type(value).__name__}")
    try:
        accuracy = value.get("accuracy")
        return AnswersPlan(
            probes=tuple(Probe(str(entry["id"]), str(entry["prompt"])) for entry in value["probes"]),
            max_tokens=int(value["max_tokens"]),
            api=str(value["api"]),
            concurrency=int(value["concurrency"]),
            min_identical_share=_share(value.get("min_identical_share")),
            match={str(key): str(name) for key, name in (value.get("match") or {}).items()},
            accuracy=None if accuracy is None else AccuracyPlan(**accuracy),
            timeout_s=float(value.get("timeout_s", 300.0)),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"answers: not a plan of answers ({type(exc).__name__}: {exc})") from None


def _share(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"min_identical_share: expected a number, got {value!r}")
    return float(value)
