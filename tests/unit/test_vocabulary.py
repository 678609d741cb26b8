"""The vocabulary a sweep draws token ids from: learned from the files of the model /model_info names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.support import tiny_model

from fairbench.measure.vocabulary import Vocabulary, VocabularyError, from_model_dir, from_model_info


def _write(directory: Path, **files: object) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (directory / f"{name}.json").write_text(json.dumps(content))
    return directory


def test_the_tiny_model_has_512_ids_and_end_of_text_is_excluded(tmp_path: Path) -> None:
    vocabulary = from_model_dir(tiny_model.build(tmp_path / "tiny"))
    assert (vocabulary.size, vocabulary.excluded) == (512, (511,))
    assert vocabulary.usable_ids() == list(range(511))
    assert "config.json, tokenizer.json, tokenizer_config.json" in vocabulary.source


def test_the_smaller_of_embedding_and_tokenizer_wins(tmp_path: Path) -> None:
    """A padded embedding (rows the tokenizer never produces) and a tokenizer larger than the embedding."""
    tokenizer = {"model": {"vocab": {f"t{i}": i for i in range(300)}}, "added_tokens": []}
    padded = _write(tmp_path / "padded", config={"vocab_size": 320}, tokenizer=tokenizer)
    assert from_model_dir(padded).size == 300
    shrunk = _write(tmp_path / "shrunk", config={"vocab_size": 256}, tokenizer=tokenizer)
    assert from_model_dir(shrunk).size == 256


def test_special_and_added_tokens_are_excluded_and_counted(tmp_path: Path) -> None:
    tokenizer = {
        "model": {"vocab": {f"t{i}": i for i in range(3, 100)}},
        "added_tokens": [
            {"id": 0, "content": "<unk>", "special": True},
            {"id": 1, "content": "<s>", "special": True},
            {"id": 2, "content": "</s>", "special": True},
            {"id": 100, "content": "<|im_start|>", "special": True},
            {"id": 101, "content": " plain", "special": False},
        ],
    }
    directory = _write(tmp_path / "m", tokenizer=tokenizer)
    vocabulary = from_model_dir(directory)
    # Ids 0..101 exist; the non-special added token is an ordinary id.
    assert vocabulary.size == 102
    assert vocabulary.excluded == (0, 1, 2, 100)
    assert 101 in vocabulary.usable_ids() and 100 not in vocabulary.usable_ids()


def test_a_tiktoken_model_takes_config_size_and_decoder_specials(tmp_path: Path) -> None:
    """No tokenizer.json (Kimi ships tiktoken.model): config.json's size, tokenizer_config's specials."""
    directory = _write(
        tmp_path / "kimi",
        config={"text_config": {"vocab_size": 1000}},
        tokenizer_config={"added_tokens_decoder": {"998": {"content": "[BOS]", "special": True}, "x": {}}},
    )
    vocabulary = from_model_dir(directory)
    assert (vocabulary.size, vocabulary.excluded) == (1000, (998,))


def test_a_directory_without_either_file_is_refused(tmp_path: Path) -> None:
    directory = _write(tmp_path / "empty", config={"hidden_size": 8})
    with pytest.raises(VocabularyError, match=r"neither config\.json with a vocab_size nor tokenizer\.json"):
        from_model_dir(directory)


def test_a_hugging_face_id_is_found_in_the_cache_at_refs_main(tmp_path: Path) -> None:
    repo = tmp_path / "hf" / "hub" / "models--org--tiny"
    _write(repo / "snapshots" / "old", config={"vocab_size": 10})
    _write(repo / "snapshots" / "abc123", config={"vocab_size": 4096})
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123\n")
    vocabulary = from_model_info({"model_path": "org/tiny", "tokenizer_path": "org/tiny"}, tmp_path / "hf")
    assert vocabulary.size == 4096
    assert vocabulary.source.startswith(str(repo / "snapshots" / "abc123"))


def test_the_tokenizer_path_is_read_before_the_model_path(tmp_path: Path) -> None:
    tokenizer_dir = _write(tmp_path / "tok", config={"vocab_size": 77})
    info = {"model_path": "org/not-cached", "tokenizer_path": str(tokenizer_dir)}
    assert from_model_info(info, tmp_path / "hf").size == 77


def test_a_model_that_is_not_on_this_host_is_refused_with_the_way_out(tmp_path: Path) -> None:
    with pytest.raises(VocabularyError) as caught:
        from_model_info({"model_path": "moonshotai/Kimi-K2.6"}, tmp_path / "hf")
    message = str(caught.value)
    assert "moonshotai/Kimi-K2.6" in message
    assert str(tmp_path / "hf" / "hub") in message
    assert "--vocab-size N, or workload.vocab_size" in message


def test_a_vocabulary_of_special_tokens_only_is_refused() -> None:
    with pytest.raises(VocabularyError, match="every id"):
        Vocabulary(size=2, excluded=(0, 1), source="x")
