"""A model directory's config.json: the context length SGLang derives from it, and what it refuses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fairbench.sim.checkpoint import Checkpoint, CheckpointError, read_checkpoint


def checkpoint(tmp_path: Path, config: Any) -> Checkpoint:
    (tmp_path / "config.json").write_text(json.dumps(config))
    return read_checkpoint(str(tmp_path))


@pytest.mark.parametrize(
    ("config", "length"),
    [
        ({"max_position_embeddings": 4096, "n_positions": 1024}, 4096),
        ({"n_positions": 1024}, 1024),
        ({"max_position_embeddings": 4096, "rope_scaling": {"factor": 4}}, 16384),
        # The length already holds the scaling; a factor SGLang does not read may be anything.
        ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "llama3", "factor": "x"}}, 4096),
        ({"text_config": {"seq_length": 8192}, "max_position_embeddings": 2048}, 8192),
        ({}, 2048),
    ],
)
def test_the_context_length_is_sglangs(tmp_path: Path, config: dict[str, Any], length: int) -> None:
    assert checkpoint(tmp_path, config).context_length == length


def test_a_model_path_without_a_config_json_is_an_empty_checkpoint(tmp_path: Path) -> None:
    assert read_checkpoint(str(tmp_path)) == Checkpoint()


@pytest.mark.parametrize(
    ("config", "problem"),
    [
        (
            {"max_position_embeddings": 4096, "rope_scaling": {"factor": float("nan")}},
            "rope_scaling.factor: must be a finite number, got nan",
        ),
        (
            {"max_position_embeddings": 4096, "rope_scaling": {"factor": None}},
            "rope_scaling.factor: a number is required, got None",
        ),
        ({"max_position_embeddings": "4096"}, "max_position_embeddings: a number is required, got '4096'"),
        ({"n_positions": True}, "n_positions: a number is required, got True"),
        (
            {"text_config": {"seq_length": float("inf")}},
            "text_config.seq_length: must be a finite number, got inf",
        ),
        (
            {"max_position_embeddings": 10**400},
            "max_position_embeddings: must be a finite number, got an integer too large for a float",
        ),
        (
            {"max_position_embeddings": 1e200, "rope_scaling": {"factor": 1e200}},
            "max_position_embeddings times rope_scaling.factor: must be a finite number, got inf",
        ),
    ],
)
def test_a_length_that_is_no_finite_number_is_refused_naming_the_file_and_key(
    tmp_path: Path, config: dict[str, Any], problem: str
) -> None:
    with pytest.raises(CheckpointError) as error:
        checkpoint(tmp_path, config)
    assert str(error.value) == f"{tmp_path / 'config.json'}: {problem}"


def test_a_model_path_no_file_system_can_hold_is_refused_naming_it() -> None:
    path = "/" + "a" * 300 + "/model"
    with pytest.raises(CheckpointError) as caught:
        read_checkpoint(path)
    assert str(caught.value) == f"{path}/config.json: File name too long"


@pytest.mark.parametrize(
    ("config", "dtype"),
    [
        ({"torch_dtype": "float16"}, "float16"),
        ({"text_config": {"torch_dtype": "bfloat16"}, "torch_dtype": "float32"}, "bfloat16"),
        ({"dtype": "float16"}, "float16"),
        ({"torch_dtype": 16}, None),
        ({}, None),
    ],
)
def test_the_weights_dtype_is_what_dtype_auto_loads(
    tmp_path: Path, config: dict[str, Any], dtype: str | None
) -> None:
    assert checkpoint(tmp_path, config).torch_dtype == dtype
