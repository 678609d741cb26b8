"""Whether the hosts of a pool are equivalent (fairbench.fleet.equivalence), from their fleet facts."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fairbench.campaign.fleet_facts import FACTS, REASONS
from fairbench.fleet.equivalence import (
    MISSING_FACT,
    Difference,
    EquivalenceResult,
    check_pools,
    differences,
)

H200_HOST: dict[str, Any] = {
    "gpu_model": "NVIDIA H200",
    "gpu_count": 8,
    "driver": "580.159.04",
    "cuda": "13.0",
    "cuda_toolkit": "13.0.2",
    "nccl": "2.28.3",
    "sglang": "0.5.23",
    "fairbench": "0.1.0",
    "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
    "cpus": 224,
    "memory_gib": 2016,
    REASONS: {},
}
"""The fleet facts of an 8 x H200 host, every fact known."""


def host(**changes: Any) -> dict[str, Any]:
    """H200_HOST with ``changes``; a fact changed to None gets a reason naming it."""
    facts = {**H200_HOST, **changes, REASONS: {}}
    facts[REASONS] = {fact: f"why {fact} is null" for fact in FACTS if facts[fact] is None}
    return facts


def test_the_hosts_facts_cover_every_fact() -> None:
    assert set(H200_HOST) == {*FACTS, REASONS}


def test_equal_hosts_differ_in_nothing() -> None:
    facts = {"lab1": host(), "lab2": host(), "lab3": host()}
    assert differences(facts, ["lab1", "lab2", "lab3"]) == []
    result = check_pools(facts, {"gpu_hosts": ["lab1", "lab2", "lab3"]}, [])
    assert result.ok and result.refused == [] and result.accepted == [] and result.message() == ""


@pytest.mark.parametrize("fact", list(FACTS))
def test_each_fact_that_differs_is_a_difference(fact: str) -> None:
    other: Any = 7 if isinstance(H200_HOST[fact], int) else "other"
    facts = {"a": host(), "b": host(**{fact: other})}
    assert differences(facts, ["a", "b"]) == [Difference(fact, {"a": H200_HOST[fact], "b": other})]


def test_a_sglang_difference_is_refused_naming_the_pool_hosts_and_values() -> None:
    facts = {"lab1": host(), "lab2": host(sglang="0.0.1")}
    result = check_pools(facts, {"gpu_hosts": ["lab1", "lab2"]}, [])
    assert not result.ok
    assert result.refused == [("gpu_hosts", Difference("sglang", {"lab1": "0.5.23", "lab2": "0.0.1"}))]
    assert result.accepted == []
    lines = result.message().splitlines()
    assert "pool gpu_hosts: sglang: 0.5.23 on lab1, 0.0.1 on lab2" in [line.strip() for line in lines]
    assert lines[-1] == (
        "set accept_host_differences: [sglang] in the campaign to run anyway; "
        "the report will list it as a threat"
    )


def test_an_accepted_difference_is_a_threat_not_a_refusal() -> None:
    facts = {"lab1": host(), "lab2": host(sglang="0.0.1")}
    result = check_pools(facts, {"gpu_hosts": ["lab1", "lab2"]}, ["sglang"])
    assert result.ok and result.refused == [] and result.message() == ""
    assert result.accepted == [("gpu_hosts", Difference("sglang", {"lab1": "0.5.23", "lab2": "0.0.1"}))]


def test_an_unknown_accepted_fact_is_an_error_listing_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown fact") as raised:
        check_pools({"lab1": host()}, {"gpu_hosts": ["lab1"]}, ["sglang", "kernel"])
    message = str(raised.value)
    assert "kernel" in message and "sglang;" not in message
    assert all(fact in message.split("the facts are", 1)[1] for fact in FACTS)


def test_a_host_without_facts_is_an_error_naming_it() -> None:
    facts = {"lab1": host(), "lab3": {}}
    with pytest.raises(ValueError, match=r"no fleet facts for host\(s\) lab2, lab3$"):
        differences(facts, ["lab1", "lab2", "lab3"])
    with pytest.raises(ValueError, match="lab2"):
        check_pools(facts, {"gpu_hosts": ["lab1", "lab2"]}, [])


def test_each_pool_is_compared_on_its_own() -> None:
    facts = {"h1": host(), "h2": host(), "p1": host(gpu_model="NVIDIA RTX PRO 6000", gpu_count=8)}
    pools = {"gpu_hosts": ["h1", "h2", "p1"], "h200": ["h1", "h2"]}
    result = check_pools(facts, pools, [])
    assert [(pool, difference.fact) for pool, difference in result.refused] == [("gpu_hosts", "gpu_model")]
    assert check_pools(facts, {"h200": ["h1", "h2"]}, []).ok


def test_hosts_sharing_a_value_are_named_together_and_nulls_say_why() -> None:
    facts = {"a": host(), "b": host(nccl=None), "c": host(), "d": host(nccl="2.27.5")}
    (difference,) = differences(facts, ["a", "b", "c", "d"])
    assert difference.reasons == {"b": "why nccl is null"}
    assert difference.describe() == (
        "nccl: 2.28.3 on 2 hosts (a, c), null (why nccl is null) on b, 2.27.5 on d"
    )


def test_a_fact_a_host_does_not_report_is_null() -> None:
    old = {fact: value for fact, value in host().items() if fact != "cuda_toolkit"}
    (difference,) = differences({"new": host(), "old": old}, ["new", "old"])
    assert difference.fact == "cuda_toolkit" and difference.values["old"] is None
    assert difference.reasons == {"old": MISSING_FACT}


def test_integers_are_compared_as_integers() -> None:
    facts = {"a": host(), "b": host(memory_gib=2015)}
    (difference,) = differences(facts, ["a", "b"])
    assert difference.describe() == "memory_gib: 2016 on a, 2015 on b"


def test_the_message_asks_to_accept_every_refused_fact_and_keeps_those_accepted() -> None:
    facts = {"a": host(), "b": host(driver="575.57.08", sglang="0.0.1", cuda_toolkit="12.8.1")}
    result = check_pools(facts, {"gpu_hosts": ["a", "b"]}, ["cuda_toolkit"])
    lines = result.message().splitlines()
    refused = [line.strip() for line in lines[1:-1]]
    assert refused == [
        "pool gpu_hosts: driver: 580.159.04 on a, 575.57.08 on b",
        "pool gpu_hosts: sglang: 0.5.23 on a, 0.0.1 on b",
    ]
    # In FACTS' order, the fact already accepted included: the value to put in the campaign.
    assert lines[-1] == (
        "set accept_host_differences: [driver, cuda_toolkit, sglang] in the campaign to run anyway; "
        "the report will list them as threats"
    )
    assert [difference.fact for _, difference in result.accepted] == ["cuda_toolkit"]


def test_to_json_is_json_and_round_trips() -> None:
    facts = {"a": host(), "b": host(sglang="0.0.1", nccl=None), "c": host(), "unused": host(cpus=1)}
    pools = {"gpu_hosts": ["a", "b"], "h200": ["c", "a"]}
    result = check_pools(facts, pools, ["nccl"])
    saved = json.loads(json.dumps(result.to_json()))
    assert saved["pools"] == pools
    assert saved["hosts"] == ["a", "b", "c"]
    assert saved["facts"] == {name: facts[name] for name in ("a", "b", "c")}
    assert saved["accepted_facts"] == ["nccl"]
    assert [(entry["pool"], entry["fact"]) for entry in saved["refused"]] == [("gpu_hosts", "sglang")]
    (threat,) = saved["accepted"]
    assert threat["values"] == {"a": "2.28.3", "b": None} and threat["reasons"] == {"b": "why nccl is null"}
    assert threat["text"] == "nccl: 2.28.3 on a, null (why nccl is null) on b"
    assert EquivalenceResult.from_json(saved) == result
