"""fairbench's own accuracy task: the problems a seed gives, their prompts, and how a reply's answer is
read."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from collections import Counter
from operator import add, mul, sub

import pytest

from fairbench.answers.arithmetic import (
    ANSWER_PATTERN,
    INSTRUCTION,
    MAX_COUNT,
    NAMES,
    SHOPS,
    TEMPLATES,
    THINGS,
    Problem,
    answer_in,
    problems,
    prompt_of,
)

# The first problems of seed 1, written out: a change to the draw or to a template shows here first (a
# campaign's scores are comparable across fairbench versions only while these hold).
SEED_1 = [
    Problem(
        "a0000",
        "There were 44 passengers on a bus. At the next stop 6 of them got off and nobody got on. How many "
        "passengers are on the bus now?",
        38,
    ),
    Problem("a0001", "At the bakery, one cookie costs 14 dollars. How many dollars do 9 cookies cost?", 126),
    Problem(
        "a0002",
        "Elena threads 3 red beads and 9 blue beads onto each bracelet and makes 2 bracelets. How many beads "
        "does Elena use?",
        24,
    ),
    Problem(
        "a0003",
        "Sam baked 5 trays of muffins with 8 muffins on each tray, and sold 16 muffins at the school fair. "
        "How many muffins are left?",
        24,
    ),
]


_PLACEHOLDERS = {
    **dict.fromkeys(NAMES, "PERSON"),
    **dict.fromkeys(THINGS, "THINGS"),
    **dict.fromkeys(SHOPS, "SHOP"),
    **{word: "GOODS" for goods in SHOPS.values() for pair in goods for word in pair},
}
_WORDS = re.compile(r"\b(" + "|".join(sorted(map(re.escape, _PLACEHOLDERS), key=len, reverse=True)) + r")\b")


def _wording(question: str) -> str:
    return re.sub(r"[0-9]+", "N", _WORDS.sub(lambda match: _PLACEHOLDERS[match.group(1)], question))


def _operands(question: str) -> list[int]:
    return [int(number) for number in re.findall(r"[0-9]+", question)]


def _results(operands: list[int]) -> set[int]:
    """Every value of one or two of +, -, x over the operands, in any order and grouping."""
    operations = (add, sub, mul)
    found = set()
    for order in itertools.permutations(operands):
        if len(order) == 2:
            found |= {operation(*order) for operation in operations}
            continue
        a, b, c = order
        for first, second in itertools.product(operations, repeat=2):
            found |= {second(first(a, b), c), first(a, second(b, c))}
    return found


def test_the_first_problems_of_a_seed_are_fixed() -> None:
    assert problems(1, len(SEED_1)) == SEED_1


def test_the_draw_is_the_same_in_another_interpreter_whatever_its_hash_seed() -> None:
    script = (
        "import json; from fairbench.answers.arithmetic import problems; "
        "print(json.dumps([[p.id, p.question, p.answer] for p in problems(11, 200)]))"
    )
    draws = [
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for hash_seed in ("1", "2")
    ]
    assert draws[0] == draws[1]
    assert json.loads(draws[0]) == [[p.id, p.question, p.answer] for p in problems(11, 200)]


def test_a_longer_draw_starts_with_the_shorter_one() -> None:
    assert problems(7, 300)[:40] == problems(7, 40)
    assert problems(7, 40) != problems(8, 40)


def test_ids_are_places_in_the_draw_and_questions_are_distinct() -> None:
    drawn = problems(3, 2000)
    assert [problem.id for problem in drawn] == [f"a{index:04d}" for index in range(2000)]
    assert len({problem.question for problem in drawn}) == 2000


@pytest.mark.parametrize("count", [0, -1, MAX_COUNT + 1])
def test_a_count_out_of_range_is_refused(count: int) -> None:
    with pytest.raises(ValueError, match="count must be from 1 to"):
        problems(1, count)


def test_every_answer_follows_from_the_question_in_one_or_two_steps() -> None:
    for problem in problems(5, 3000):
        operands = _operands(problem.question)
        assert len(operands) in (2, 3), problem
        assert all(2 <= operand <= 100 for operand in operands), problem
        assert problem.answer >= 1, problem
        assert problem.answer in _results(operands), problem


def test_the_problems_mix_operations_steps_and_templates() -> None:
    drawn = problems(9, 1000)
    kinds = Counter()
    for problem in drawn:
        operands = _operands(problem.question)
        kinds[f"{len(operands)} numbers"] += 1
        if problem.answer == sum(operands):
            kinds["sum"] += 1
        if problem.answer < max(operands):
            kinds["difference"] += 1
        if problem.answer % max(operands) == 0 and problem.answer >= 2 * max(operands):
            kinds["product"] += 1
    for kind in ("2 numbers", "3 numbers", "sum", "difference", "product"):
        assert kinds[kind] >= 100, kinds
    # Every template is drawn: with its numbers, people, things, shops and goods taken out, each question
    # is one of as many wordings as there are templates.
    assert len(TEMPLATES) >= 15
    wordings = Counter(_wording(problem.question) for problem in drawn)
    assert len(wordings) == len(TEMPLATES)
    assert min(wordings.values()) >= 20


def test_the_prompt_adds_an_instruction_without_digits() -> None:
    problem = SEED_1[0]
    prompt = prompt_of(problem)
    assert prompt.startswith(problem.question)
    assert "Answer: <number>" in prompt
    assert not re.search(r"[0-9]", INSTRUCTION)
    # So the prompt's integers are the question's operands alone.
    for drawn in problems(2, 200):
        assert _operands(prompt_of(drawn)) == _operands(drawn.question)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("Answer: 42", 42),
        ("3 + 4 = 7\nAnswer: 7", 7),
        ("**Answer:** 42", 42),
        ("**Answer**: 42", 42),
        ("Answer: **42**", 42),
        ("answer: 42", 42),
        ("FINAL ANSWER: 42", 42),
        ("Answer: 1,234", 1234),
        ("Answer: 1,234,567.", 1234567),
        ("Answer: $42", 42),
        ("Answer: $42.", 42),
        ("Answer: 42.", 42),
        ("Answer: 42 apples", 42),
        ("Answer: -5", -5),
        ("Answer: 007", 7),
        ("She has 12 left.\nAnswer: 12\n", 12),
        # The last marker followed by a number decides, whatever numbers come after it on other lines.
        ("Answer: 3\nWait, that is wrong.\nAnswer: 4\nChecked with 2 + 2.", 4),
        ("Answer: 12\nAnswer: unsure\nso maybe 9", 12),
        # No marker with a number: the reply's last integer.
        ("The answer is 12 apples, from 3 boxes", 3),
        ("4 boxes of 6 make 24", 24),
        ("The total is $1,050.", 1050),
        ("Answer: forty-two, that is 42", 42),
        ("pages 3-5", 5),
        # No integer at all, or only a decimal.
        ("I do not know.", None),
        ("", None),
        ("Answer: 3.5", None),
        ("about 42.5 in all", None),
        ("Answer: ", None),
    ],
)
def test_the_answer_in_a_reply(reply: str, expected: int | None) -> None:
    assert answer_in(reply) == expected


def test_commas_group_digits_in_threes_only() -> None:
    assert answer_in("1, 2, 3") == 3
    # Digits grouped otherwise are no integer, nor is any part of them.
    assert answer_in("Answer: 1,23") is None
    assert answer_in("1,2345") is None
    assert answer_in("Answer: 1,23 or 5") == 5


def test_the_pattern_gives_one_match_whose_first_group_with_text_is_the_answer() -> None:
    # How lm-eval's regex filter reads it (findall, the last match, its first non-empty group).
    matches = re.findall(ANSWER_PATTERN, "So 2 and 3.\n**Answer:** 1,005.")
    assert matches == [("1,005", "")]
    assert re.findall(ANSWER_PATTERN, "2 and 3 make 5") == [("", "5")]
    assert re.findall(ANSWER_PATTERN, "nothing") == []


def test_a_long_reply_is_read_quickly() -> None:
    reply = "and then 12 more " * 2000 + "\nAnswer: 99"
    assert answer_in(reply) == 99
    assert answer_in("x " * 20000) is None
