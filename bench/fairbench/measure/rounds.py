"""What the rounds of a spread campaign show of the machines: each round measures every config still
needed once, so a round that ran faster or slower for all its configs, or a host that did, shows in the
configs' values beside their own means.

``values``: per config, its figure (output tok/s at one level) by round (the repeat number, ``#rK``'s K);
``hosts``: per config, the host that measured each round. Every effect is relative to each config's own
mean, so configs of different speeds weigh alike:

- the deviation of one value: dev(c, r) = 100 x (v(c, r) / mean_c - 1), mean_c over c's rounds;
- a round's effect: the mean of dev(c, r) over the configs it measured (``round_effects``);
- a host's effect: the mean of dev(c, r) over the values it measured (``host_effects``);
- the baseline's drift: 100 x (v(b, last) / v(b, first) - 1) over the earliest and the latest round the
  baseline config b was measured in (``baseline_drift_pct``): the drift sentinel, as the baseline runs in
  the first round and the last.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from fairbench.measure.metrics import mean

ByRound = Mapping[int, float]
"""One config's values, by round."""


def _deviations(values: Mapping[str, ByRound]) -> Iterator[tuple[str, int, float]]:
    """(config, round, dev) for each value of a config with a nonzero mean and two rounds or more (one
    round deviates from nothing)."""
    for config, by_round in values.items():
        center = mean(list(by_round.values())) if by_round else 0.0
        if len(by_round) < 2 or center == 0:
            continue
        for round_index, value in by_round.items():
            yield config, round_index, 100 * (value / center - 1)


def round_effects(values: Mapping[str, ByRound]) -> dict[int, float]:
    """Each round's effect, in %, by round, earliest first (module docstring)."""
    found: dict[int, list[float]] = {}
    for _, round_index, deviation in _deviations(values):
        found.setdefault(round_index, []).append(deviation)
    return {round_index: mean(found[round_index]) for round_index in sorted(found)}


def host_effects(values: Mapping[str, ByRound], hosts: Mapping[str, Mapping[int, str]]) -> dict[str, float]:
    """Each host's effect, in %, by host in name order (module docstring); a value whose host is not known
    counts for none."""
    found: dict[str, list[float]] = {}
    for config, round_index, deviation in _deviations(values):
        host = hosts.get(config, {}).get(round_index)
        if host is not None:
            found.setdefault(host, []).append(deviation)
    return {host: mean(found[host]) for host in sorted(found)}


def baseline_drift_pct(by_round: ByRound) -> float | None:
    """The baseline's drift, in % (module docstring); None with one round or a first value of 0."""
    if len(by_round) < 2:
        return None
    first, last = by_round[min(by_round)], by_round[max(by_round)]
    return 100 * (last / first - 1) if first else None
