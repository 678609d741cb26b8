"""The options of a fairbench sweep, shared by the modules that run one (fairbench_sweep, _config_run)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  url:
    description: The server's base URL.
    type: str
    required: true
  workload:
    description: The campaign's workload, as fairbench_campaign returns it.
    type: dict
    required: true
  data_dir:
    description:
      - Where the workload's file (a ShareGPT-style dataset, or a replayed trace) is on this host, by its
        name (the bench role copies it there). Default the path the workload names.
    type: path
  out:
    description: The results directory of this config.
    type: path
    required: true
  model:
    description: Model name for the OpenAI APIs (default the server's, from /v1/models).
    type: str
  gpus:
    description: GPUs behind the server, for per-GPU throughput.
    type: int
  energy_gpus:
    description:
      - The GPUs whose energy counts in each point, by NVML index (as nvidia-smi numbers them); a list, or
        a comma-separated string such as a config's C(CUDA_VISIBLE_DEVICES). CUDA numbers GPUs the same
        way when they are all of one model, or with C(CUDA_DEVICE_ORDER=PCI_BUS_ID).
      - Default every GPU the host's NVML sees. Without NVML (no nvidia-ml-py, no driver, no GPU) points
        carry no energy fields; an index NVML does not see fails the task.
    type: list
    elements: int
  identity:
    description:
      - What each point line names as its sweep, beside its figures (C(fairbench sweep)'s C(--campaign),
        C(--run-id), C(--host), C(--config)), so that lines of several runs concatenated still say where
        each came from.
      - A field left out is taken from the points already in C(out), the host else the machine's name. A
        field given another value than those points' fails the task, naming it; nothing is measured.
    type: dict
    suboptions:
      campaign:
        description: The campaign's name.
        type: str
      run_id:
        description: The campaign run's id.
        type: str
      host:
        description: The host measured, as the inventory names it (C(inventory_hostname)).
        type: str
      config:
        description: The serving config's name.
        type: str
  remeasure_failed:
    description:
      - Measure again the points of C(out) with failed requests (a request failed, the level stopped early
        at the error-rate limit, or none completed; C(fairbench sweep --resume --remeasure-failed)). The new
        point supersedes the failed one, whose line stays in points.jsonl and whose request records are
        kept beside the new ones.
      - Without it, such a point counts as measured and fails the task again.
    type: bool
    default: false
  repeats:
    description:
      - The repeats to measure (their numbers, from 0), of the workload's C(repeats); default every one.
        A campaign job measures its share of a config's repeats into the config's directory.
    type: list
    elements: int
  extend_repeats:
    description:
      - With automatic repeats in the workload, add repeats to the levels whose throughput interval is still
        wider than its target (fairbench.measure.repeats). False for a job that measures one repeat of a
        spread campaign, whose queue adds the config's further repeats as jobs.
    type: bool
    default: true
  slo:
    description:
      - The campaign's service-level objectives, each key (such as C(ttft_p99_ms), fairbench.measure.slo)
        mapped to its limit in milliseconds. Each point is judged against them and gets its goodput; with the
        workload's C(search_resolution), each repeat then bisects for the highest concurrency meeting them.
    type: dict
    default: {}
  client_processes:
    description:
      - The processes the client's streams are spread over (fairbench.measure.client_processes); default
        one per 128 streams of the highest level, up to the host's usable cores less one. Each point
        records every process's CPU and event-loop lag, and is flagged C(client_bound) when one fell behind.
    type: int
"""
