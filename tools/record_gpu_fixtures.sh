#!/usr/bin/env bash
# Record what nvidia-smi says on this GPU host into DIR, as a fixture set for fairbench's GPU fact parsers
# (bench/fairbench/hosts/gpu.py; tests/unit/test_gpu_facts.py tests every set under tests/fixtures/gpu/):
#
#   bash tools/record_gpu_fixtures.sh tests/fixtures/gpu/h200x1
#
# The first three are the commands fairbench.hosts.gpu.collect runs, spelled exactly as it does (a unit test
# checks that they match); nvidia-smi-q.xml is the independent source the tests check the parsers against.
# Needs only nvidia-smi: no fairbench, no Python.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 DIR" >&2
    exit 2
fi
dir=$1
mkdir -p "$dir"

nvidia-smi >"$dir/nvidia-smi.txt"
nvidia-smi --query-gpu=index,name,uuid,pci.bus_id,memory.total,power.limit,clocks.max.sm,compute_cap --format=csv \
    >"$dir/nvidia-smi-query.csv"
nvidia-smi topo -m >"$dir/nvidia-smi-topo-m.txt"
nvidia-smi -q -x >"$dir/nvidia-smi-q.xml"

echo "recorded $(grep -c '<gpu id=' "$dir/nvidia-smi-q.xml") GPU(s) into $dir:"
ls -l "$dir"
