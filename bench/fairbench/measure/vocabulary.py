"""The token ids a random-ids prompt may use: those the served model really has, minus its special tokens.

An id outside the model's vocabulary is not a bad request to SGLang: its embedding lookup raises and the whole
server exits. So before a sweep sends token ids it learns the vocabulary of the model the server serves, from
the model's own files on this host (the sweep runs beside the server):

1. ``/model_info`` names the server's ``tokenizer_path`` and ``model_path``;
2. each is a local model directory, or a Hugging Face id looked up in the Hugging Face cache (``HF_HOME``,
   where SGLang downloaded it), at the revision ``refs/main`` names;
3. the usable ids are ``[0, size)`` with ``size`` the smaller of the embedding's rows (``config.json``'s
   ``vocab_size``, or its ``text_config``'s) and the tokenizer's ids (``tokenizer.json``); the ids of special
   and added tokens (``tokenizer.json``'s ``added_tokens``, ``tokenizer_config.json``'s
   ``added_tokens_decoder``) are never sent, so no prompt carries an end-of-text or a chat marker.

An explicit size (``--vocab-size``, a campaign's ``workload.vocab_size``) replaces all of that. A sweep that
needs ids and cannot learn them is refused: guessing is what crashed servers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class VocabularyError(ValueError):
    """The vocabulary cannot be known; the message says what was looked at and how to give it."""


@dataclass(frozen=True, slots=True)
class Vocabulary:
    """Ids ``0 .. size-1`` exist in the model; ``excluded`` are never sent."""

    size: int
    excluded: tuple[int, ...]
    source: str
    """Where it was learned: the files read, or the option that set it."""

    def __post_init__(self) -> None:
        if self.size < 1:
            raise VocabularyError(f"vocabulary size {self.size} must be a positive integer")
        if len(self.usable_range_excluded()) >= self.size:
            raise VocabularyError(f"{self.source}: every id of the {self.size} is a special token")

    def usable_range_excluded(self) -> set[int]:
        return {token for token in self.excluded if 0 <= token < self.size}

    def usable_ids(self) -> list[int]:
        """Every id a prompt may carry, ascending."""
        skip = self.usable_range_excluded()
        return [token for token in range(self.size) if token not in skip]

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "excluded": list(self.excluded), "source": self.source}


def explicit(size: int, source: str) -> Vocabulary:
    """A size given by the user: ids ``[0, size)``, none excluded."""
    return Vocabulary(size=size, excluded=(), source=source)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise VocabularyError(f"{path}: cannot be read as JSON: {exc}") from None


def _int_field(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _embedding_rows(config: Any) -> int | None:
    """``vocab_size`` of a ``config.json``, or of its text model's (multimodal models nest it)."""
    if not isinstance(config, dict):
        return None
    for section in (config, config.get("text_config"), config.get("language_config")):
        if isinstance(section, dict) and (size := _int_field(section, "vocab_size")):
            return size
    return None


def _special_ids(entries: Iterable[Any]) -> set[int]:
    return {
        entry["id"]
        for entry in entries
        if isinstance(entry, dict) and isinstance(entry.get("id"), int) and entry.get("special", True)
    }


def _tokenizer_ids(tokenizer: Any) -> tuple[int | None, set[int]]:
    """(ids the ``tokenizer.json`` knows, the ids of its special tokens)."""
    if not isinstance(tokenizer, dict):
        return None, set()
    added = tokenizer.get("added_tokens") or []
    special = _special_ids(added) if isinstance(added, list) else set()
    # Every added token's id exists, special or not: the tokenizer's size covers them too.
    ids = {entry["id"] for entry in added if isinstance(entry, dict) and isinstance(entry.get("id"), int)}
    vocab = (tokenizer.get("model") or {}).get("vocab")
    if isinstance(vocab, dict):
        ids.update(value for value in vocab.values() if isinstance(value, int))
    elif isinstance(vocab, list):  # Unigram: [piece, score] pairs, the id is the position
        ids.update(range(len(vocab)))
    return (max(ids) + 1 if ids else None), special


def _decoder_special_ids(tokenizer_config: Any) -> set[int]:
    """Special ids of ``tokenizer_config.json``'s ``added_tokens_decoder``: tiktoken models have no
    tokenizer.json."""
    decoder = tokenizer_config.get("added_tokens_decoder") if isinstance(tokenizer_config, dict) else None
    if not isinstance(decoder, dict):
        return set()
    return {
        int(key)
        for key, entry in decoder.items()
        if key.isdigit() and isinstance(entry, dict) and entry.get("special", True)
    }


def from_model_dir(directory: Path) -> Vocabulary:
    """The vocabulary of a model directory (``config.json``, and ``tokenizer.json`` where it has one)."""
    config_path = directory / "config.json"
    tokenizer_path = directory / "tokenizer.json"
    tokenizer_config_path = directory / "tokenizer_config.json"
    rows = _embedding_rows(_read_json(config_path)) if config_path.is_file() else None
    tokenizer_size, special = (
        _tokenizer_ids(_read_json(tokenizer_path)) if tokenizer_path.is_file() else (None, set())
    )
    if tokenizer_config_path.is_file():
        special |= _decoder_special_ids(_read_json(tokenizer_config_path))
    sizes = [size for size in (rows, tokenizer_size) if size is not None]
    if not sizes:
        raise VocabularyError(
            f"{directory}: neither config.json with a vocab_size nor tokenizer.json with a vocabulary"
        )
    read = [path.name for path in (config_path, tokenizer_path, tokenizer_config_path) if path.is_file()]
    return Vocabulary(
        size=min(sizes), excluded=tuple(sorted(special)), source=f"{directory} ({', '.join(read)})"
    )


def hf_home() -> Path:
    """The Hugging Face cache's root, as ``huggingface_hub`` finds it."""
    if home := os.environ.get("HF_HOME"):
        return Path(home)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"


def hf_cache_dir(model_id: str, home: Path) -> Path | None:
    """The snapshot of Hugging Face model ``org/name`` in the cache at ``home``: ``refs/main``'s revision,
    else the only snapshot; None when it is not there."""
    repo = home / "hub" / ("models--" + model_id.replace("/", "--"))
    ref = repo / "refs" / "main"
    if ref.is_file():
        snapshot = repo / "snapshots" / ref.read_text(encoding="utf-8").strip()
        if snapshot.is_dir():
            return snapshot
    snapshots = sorted(path for path in (repo / "snapshots").glob("*") if path.is_dir())
    return snapshots[0] if len(snapshots) == 1 else None


def model_dir(name: str, home: Path) -> Path | None:
    """Where the files of the model a server names live on this host: the path itself, or its cache copy."""
    path = Path(name)
    if path.is_dir():
        return path
    if name.count("/") == 1 and not name.startswith(("/", ".")):
        return hf_cache_dir(name, home)
    return None


def from_model_info(model_info: Mapping[str, Any], home: Path | None = None) -> Vocabulary:
    """The vocabulary of the model a server's ``/model_info`` names (its tokenizer's directory first)."""
    home = hf_home() if home is None else home
    names = [
        value
        for key in ("tokenizer_path", "model_path")
        if isinstance(value := model_info.get(key), str) and value
    ]
    for name in dict.fromkeys(names):
        directory = model_dir(name, home)
        if directory is not None:
            return from_model_dir(directory)
    served = " / ".join(dict.fromkeys(names)) or "(no model_path in /model_info)"
    raise VocabularyError(
        f"cannot learn the vocabulary of the served model {served}: it is neither a directory on this host "
        f"nor in the Hugging Face cache {home / 'hub'}; random token ids need it (an id the model does not "
        "have crashes an SGLang server), so give its size: --vocab-size N, or workload.vocab_size in a "
        "campaign"
    )
