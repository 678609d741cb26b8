"""``fairbench report`` on a run of two configs (tp8, ep4) on two hosts whose settings differ in every way
the fairness check tells apart: declared by the campaign (ep4's ep-size), sized by SGLang from free memory
(lab2's tp8 KV cache), per host or per start (addresses, ports, host names, GPU UUIDs), of another type
(lab2's ep4 reports trust_remote_code as 1), and of the host (lab2's older driver and other kernel); lab2's
ep4 lacks its unit file and has a truncated host.json.

The files are the real formats: /server_info as the simulator serves it for each config's command line,
host.json with GPU facts parsed from recorded nvidia-smi output, a unit with the serving role's
``Environment=`` lines.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from tests.support.report_files import CAMPAIGN, first_screen, lines, point
from tests.support.results_tree import REPO, SERVING_ENVIRONMENT, fairbench_report

from fairbench.cli.sim import configure
from fairbench.hosts.gpu import facts_from
from fairbench.report.formatting import setting_values
from fairbench.sim.args import resolve
from fairbench.sim.server import SimServer

GPU_RECORDINGS = REPO / "tests" / "fixtures" / "gpu"
CONFIGS = ("tp8", "ep4")
PORTS = {"tp8": 30001, "ep4": 30002}
# The same two H200s, recorded on two machines (so with their own GPU UUIDs).
HOSTS = {
    "lab1": {
        "address": "10.0.0.1",
        "recording": "h200x2",
        "driver": "580.159.04",
        "kernel": "6.8.0-87-generic",
    },
    "lab2": {
        "address": "10.0.0.2",
        "recording": "h200x2-vm",
        "driver": "580.95.05",
        "kernel": "6.8.0-90-generic",
    },
}
RECORDED_DRIVER = "580.159.04"
KV_CACHE_TOKENS = 67108864
"""The simulator's KV cache: 256 running requests at Kimi K2.6's full context of 262144 tokens."""
SMALLER_KV_CACHE_TOKENS = 60000000
"""lab2's tp8 started with less device memory free; still above one full context."""


def server_info(config: str, host: str) -> dict[str, Any]:
    """/server_info of the simulator started, as the serving role starts it, with ``config``'s argv."""
    parser = argparse.ArgumentParser()
    configure(parser)
    address, port = HOSTS[host]["address"], str(PORTS[config])
    argv = [*CAMPAIGN["configs"][config]["argv"], "--host", address, "--port", port]
    loop = asyncio.new_event_loop()
    try:
        server = SimServer(resolve(parser.parse_args(argv)), loop)
        server.finish_loading()
        info: dict[str, Any] = json.loads(json.dumps(server.server_info_body()))
    finally:
        loop.close()
    return info


def host_json(host: str) -> dict[str, Any]:
    """host.json as ``fairbench.hosts.ansible_support.host_facts`` writes it, with the GPUs of a recording."""
    facts = HOSTS[host]
    recording = GPU_RECORDINGS / facts["recording"]
    gpu = facts_from(
        smi=(recording / "nvidia-smi.txt").read_text().replace(RECORDED_DRIVER, facts["driver"]),
        query=(recording / "nvidia-smi-query.csv").read_text(),
        topology=(recording / "nvidia-smi-topo-m.txt").read_text(),
        sources={"smi": "nvidia-smi", "query": "nvidia-smi --query-gpu", "topology": "nvidia-smi topo -m"},
    )
    return {
        "hostname": host,
        "os": "Ubuntu 24.04.3 LTS",
        "kernel": facts["kernel"],
        "machine": "x86_64",
        "python": "3.12.3",
        "python_executable": "/opt/fairbench/venv/bin/python",
        "fairbench": "0.1.0",
        "gpu": gpu.to_json(),
    }


def unit_file() -> str:
    environment = [f'Environment="{name}={value}"' for name, value in SERVING_ENVIRONMENT.items()]
    return "\n".join(
        ["[Service]", "Type=exec", *environment, "ExecStart=/opt/fairbench/venv/bin/fairbench sim"]
    )


def set_everywhere(info: dict[str, Any], field: str, value: Any) -> None:
    """``field`` set at the top level of /server_info and in every DP rank's copy."""
    for holder in [info, *info["internal_states"]]:
        holder[field] = value


def write_run(root: Path) -> Path:
    run = root / "demo" / "run1"
    run.mkdir(parents=True)
    (run / "campaign.json").write_text(
        json.dumps(
            {
                **CAMPAIGN,
                "placement": "every-host",
                "configs": {name: CAMPAIGN["configs"][name] for name in CONFIGS},
            }
        )
    )
    sweep = {"api": "completions", "concurrency": [1, 4], "gpus": None, "repeats": 1, "warmup": "1x"}
    for host in HOSTS:
        for config in CONFIGS:
            directory = run / host / config
            directory.mkdir(parents=True)
            files = {
                "status.json": {"status": "ok", "host": host, "config": config},
                "server_info.json": server_info(config, host),
                "host.json": host_json(host),
                "sweep.json": sweep,
            }
            if (host, config) == ("lab2", "tp8"):
                info = files["server_info.json"]
                info["max_total_num_tokens"] = SMALLER_KV_CACHE_TOKENS
                info["internal_states"][0]["memory_usage"]["token_capacity"] = SMALLER_KV_CACHE_TOKENS
            if (host, config) == ("lab2", "ep4"):
                set_everywhere(files["server_info.json"], "trust_remote_code", 1)
            for name, data in files.items():
                (directory / name).write_text(json.dumps(data, indent=2) + "\n")
            (directory / "unit.service").write_text(unit_file())
            (directory / "points.jsonl").write_bytes(lines(point(1), point(4)))
    (run / "lab2" / "ep4" / "unit.service").unlink()
    # A write cut short: not JSON, so unreadable rather than missing.
    truncated = run / "lab2" / "ep4" / "host.json"
    truncated.write_bytes(truncated.read_bytes()[:100])
    return run


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> str:
    run = write_run(tmp_path_factory.mktemp("results"))
    done = fairbench_report(run)
    assert done.returncode == 0, done.stderr
    return (run / "report.md").read_text()


def alerts(report: str) -> list[str]:
    return [block for block in first_screen(report).split("\n\n") if block.startswith("> [!")]


def test_the_first_screen_names_each_threat_with_every_configs_value_and_what_was_not_checked(
    report: str,
) -> None:
    threats, unchecked, problems, _repeats = alerts(report)
    # Threats in the order the pairs first show them (the configs of each host, then each config on both
    # hosts), each config with its own value: tp8@lab1 and ep4@lab2 are never compared; ep4@lab2 has no
    # readable host.json, so no driver or kernel. Addresses, ports, host names and GPU UUIDs differ too,
    # and are not compared; ep-size is declared; lab2's tp8 KV cache is derived.
    assert threats.splitlines() == [
        "> [!CAUTION]",
        "> **Not a fair comparison: 3 setting(s) differ between configs without the campaign declaring "
        "them.**",
        "> - server `trust_remote_code`: tp8@lab2, ep4@lab1: `true`; ep4@lab2: `1`",
        "> - host `gpu.driver_version`: tp8@lab1: `580.159.04`; tp8@lab2: `580.95.05`",
        "> - host `kernel`: tp8@lab1: `6.8.0-87-generic`; tp8@lab2: `6.8.0-90-generic`",
    ]
    assert unchecked.splitlines() == [
        "> [!WARNING]",
        "> **Not fully checked: 1 config(s) lack settings that the comparison reads, so an undeclared "
        "difference in them would go unseen.**",
        "> - **ep4@lab2**: environment (unit.service missing), host (host.json unreadable)",
    ]
    assert "/demo/run1/lab2/ep4/host.json: not JSON (" in problems


def table_rows(report: str, heading: str) -> list[list[str]]:
    """The rows of the table under ``heading``, each as its cells."""
    section = report[report.index(f"{heading}\n") :].split("\n#", 1)[0]
    table = [line for line in section.splitlines() if line.startswith("|")][2:]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table]


def test_what_differed_shows_derived_and_intended_values_and_no_field_that_is_not_compared(
    report: str,
) -> None:
    kv_cache, smaller = str(KV_CACHE_TOKENS), str(SMALLER_KV_CACHE_TOKENS)
    assert table_rows(report, "### tp8@lab1 vs tp8@lab2") == [
        ["THREAT", "host", "`gpu.driver_version`", "580.159.04", "580.95.05"],
        ["THREAT", "host", "`kernel`", "6.8.0-87-generic", "6.8.0-90-generic"],
        ["derived", "server", "`internal_states.0.memory_usage.token_capacity`", kv_cache, smaller],
        ["derived", "server", "`max_total_num_tokens`", kv_cache, smaller],
    ]
    assert table_rows(report, "### tp8@lab2 vs ep4@lab2") == [
        ["THREAT", "server", "`trust_remote_code`", "true", "1"],
        ["intended", "server", "`ep_size`", "1", "4"],
        ["derived", "server", "`internal_states.0.memory_usage.token_capacity`", smaller, kv_cache],
        ["derived", "server", "`max_total_num_tokens`", smaller, kv_cache],
    ]
    pair = report[report.index("### tp8@lab2 vs ep4@lab2\n") :]
    assert pair.split("\n\n")[1] == (
        "Not compared: environment (unit.service missing for ep4@lab2); "
        "host (host.json unreadable for ep4@lab2)."
    )
    assert table_rows(report, "### tp8@lab1 vs ep4@lab1") == [["intended", "server", "`ep_size`", "1", "4"]]


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        ([8, "8"], ["8", '"8"']),
        ([None, "none"], ["null", '"none"']),
        ([[1, 2], "[1,2]"], ["[1,2]", '"[1,2]"']),
        ([True, 1, "x"], ["true", "1", "x"]),  # already told apart: shown plainly
        (["disabled", "none", "disabled"], ["disabled", "none", "disabled"]),
    ],
)
def test_values_that_differ_only_in_type_are_shown_with_their_types(
    values: list[Any], shown: list[str]
) -> None:
    assert setting_values(values) == shown
