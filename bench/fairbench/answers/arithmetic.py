"""fairbench's own accuracy task: arithmetic word problems generated from a seed, offline, with known answers.

Each problem (``Problem``) is one of the templates below filled in from ``random.Random(seed)``: people,
the things they have, buy, give away or share, shops and their prices; one or two steps of addition,
subtraction and multiplication; every number in the question is one of its operands (small positive
integers), and every answer is a positive integer. ``problems(seed, count)`` draws them in order, so the
first ``n`` problems of a seed are the same whatever the count, and the same on every machine and Python
version: the draw uses ``Random.randrange`` only (its algorithm unchanged since Python 3.2), never
``hash()`` or a set's order.

A problem is asked as ``prompt_of(problem)``: its question and an instruction to end the reply with the
line ``Answer: <number>``. The instruction holds no digit, so the prompt's integers are the question's
operands alone. The reply is scored by exact match of ``answer_in(reply)`` with the answer.

``answer_in`` reads ``ANSWER_PATTERN``, one regular expression, the same one the lm-eval version of the task
(``answers.lm_eval_run``) filters replies with, so both score a reply alike:

- the first integer after an ``Answer:`` marker, on the marker's line, for the last marker that has one
  (any case, with Markdown emphasis around it: ``**Answer:** 42``; ``$`` and text before the number are
  skipped: ``Answer: $1,234.`` is 1234);
- else the last integer of the reply;
- else None.

An integer is digits, or digits grouped by commas in threes (``1,234``), with a ``-`` where no digit stands
before it; the digits of a decimal (``3.5``) or of digits grouped otherwise (``1,23``) are none.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MAX_COUNT = 10_000
"""The most problems one draw gives (ids are ``a0000`` to ``a9999``)."""

INSTRUCTION = (
    "Work the problem out, then end your reply with a line of the form `Answer: <number>`, giving the "
    "number alone, in digits."
)
"""Appended to every question; it holds no digit, so a prompt's integers are its operands alone."""

_INTEGER = r"(?<![0-9])(?<![0-9],)(?<![0-9]\.)-?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?![0-9]|[.,][0-9])"
"""An integer standing alone: not the tail of a longer number, a comma group or a decimal's fraction, nor
the head of one. A ``-`` after a digit is a hyphen (``3-5``), not a sign."""

ANSWER_PATTERN = rf"(?is)\A(?:.*\banswer[*_ \t]*:[^\n0-9]*?({_INTEGER})|.*({_INTEGER}))"
"""The integer a reply gives (the module docstring's rules), as the first non-empty group of the one match:
the greedy ``.*`` before the marker finds the last marker followed by an integer on its line, the one
before the bare integer finds the reply's last integer."""

_ANSWER = re.compile(ANSWER_PATTERN)


@dataclass(frozen=True)
class Problem:
    id: str
    """``a0000``, ``a0001``...: the problem's place in its seed's draw."""
    question: str
    answer: int


def _pick(rng: random.Random, items: Sequence[str]) -> str:
    return items[rng.randrange(len(items))]


def _between(rng: random.Random, low: int, high: int) -> int:
    """An integer from low to high, both included."""
    return low + rng.randrange(high - low + 1)


NAMES = (
    "Maya", "Tom", "Priya", "Daniel", "Aisha", "Lucas", "Mei", "Omar", "Sofia", "Ben",
    "Grace", "Kenji", "Elena", "Sam", "Fatima", "Noah", "Chloe", "Ravi", "Hannah", "Diego",
)  # fmt: skip
THINGS = (
    "stickers", "marbles", "stamps", "pencils", "crayons", "seashells", "buttons",
    "trading cards", "postcards", "paper cranes", "glass beads", "toy cars",
)  # fmt: skip
SHOPS: dict[str, tuple[tuple[str, str], ...]] = {
    "bakery": (("muffin", "muffins"), ("cookie", "cookies"), ("croissant", "croissants")),
    "bookshop": (("notebook", "notebooks"), ("paperback", "paperbacks"), ("pen", "pens")),
    "fruit stall": (("melon", "melons"), ("pineapple", "pineapples"), ("punnet of figs", "punnets of figs")),
    "toy shop": (("kite", "kites"), ("puzzle", "puzzles"), ("yo-yo", "yo-yos")),
    "flower shop": (("rose", "roses"), ("tulip", "tulips"), ("sunflower", "sunflowers")),
    "garden centre": (("plant pot", "plant pots"), ("packet of seeds", "packets of seeds")),
}
"""Each shop and what it sells, (singular, plural). A dict keeps its insertion order."""
SHOP_NAMES = tuple(SHOPS)


def _people(rng: random.Random) -> tuple[str, str]:
    """Two different people."""
    first = rng.randrange(len(NAMES))
    second = (first + 1 + rng.randrange(len(NAMES) - 1)) % len(NAMES)
    return NAMES[first], NAMES[second]


def _shop_goods(rng: random.Random) -> tuple[str, str, str]:
    """A shop, and one of its goods, singular and plural."""
    shop = _pick(rng, SHOP_NAMES)
    goods = SHOPS[shop]
    singular, plural = goods[rng.randrange(len(goods))]
    return shop, singular, plural


# Each template draws its numbers and words from the generator and gives (question, answer). Every number
# is at least 2 (the nouns are plural) and every answer at least 1.
Template = Callable[[random.Random], tuple[str, int]]


def _gift(rng: random.Random) -> tuple[str, int]:
    name, other = _people(rng)
    things = _pick(rng, THINGS)
    a, b = _between(rng, 2, 30), _between(rng, 2, 30)
    return (
        f"{name} has {a} {things}. {other} gives {name} {b} more. How many {things} does {name} have now?",
        a + b,
    )


def _day_of_sales(rng: random.Random) -> tuple[str, int]:
    shop, _, goods = _shop_goods(rng)
    a, b = _between(rng, 2, 40), _between(rng, 2, 40)
    return (
        f"The {shop} sold {a} {goods} in the morning and {b} {goods} in the afternoon. How many {goods} did "
        f"the {shop} sell that day?",
        a + b,
    )


def _weekend_reading(rng: random.Random) -> tuple[str, int]:
    name, _ = _people(rng)
    a, b = _between(rng, 5, 60), _between(rng, 5, 60)
    return (
        f"{name} read {a} pages of a novel on Saturday and {b} pages on Sunday. How many pages did {name} "
        "read over the weekend?",
        a + b,
    )


def _three_days(rng: random.Random) -> tuple[str, int]:
    name, _ = _people(rng)
    things = _pick(rng, THINGS)
    a, b, c = _between(rng, 2, 20), _between(rng, 2, 20), _between(rng, 2, 20)
    return (
        f"{name} collected {a} {things} on Monday, {b} on Tuesday and {c} on Wednesday. How many {things} "
        f"did {name} collect over the three days?",
        a + b + c,
    )


def _giving_away(rng: random.Random) -> tuple[str, int]:
    name, other = _people(rng)
    things = _pick(rng, THINGS)
    a = _between(rng, 5, 40)
    b = _between(rng, 2, a - 1)
    return (
        f"{name} had {a} {things} and gave {b} of them to {other}. How many {things} does {name} have left?",
        a - b,
    )


def _bus(rng: random.Random) -> tuple[str, int]:
    a = _between(rng, 8, 50)
    b = _between(rng, 2, a - 1)
    return (
        f"There were {a} passengers on a bus. At the next stop {b} of them got off and nobody got on. How "
        "many passengers are on the bus now?",
        a - b,
    )


def _left_at_noon(rng: random.Random) -> tuple[str, int]:
    shop, _, goods = _shop_goods(rng)
    a = _between(rng, 10, 60)
    b = _between(rng, 2, a - 1)
    return (
        f"The {shop} had {a} {goods} when it opened and had sold {b} of them by noon. How many {goods} were "
        "left at noon?",
        a - b,
    )


def _packs(rng: random.Random) -> tuple[str, int]:
    name, _ = _people(rng)
    things = _pick(rng, THINGS)
    a, b = _between(rng, 2, 9), _between(rng, 2, 12)
    return (
        f"{name} buys {a} packs of {things}. Each pack holds {b} {things}. How many {things} does {name} "
        "buy?",
        a * b,
    )


def _rows_of_desks(rng: random.Random) -> tuple[str, int]:
    a, b = _between(rng, 2, 9), _between(rng, 2, 9)
    return (
        f"A classroom has {a} rows of desks with {b} desks in each row. How many desks are in the classroom?",
        a * b,
    )


def _price(rng: random.Random) -> tuple[str, int]:
    shop, one, goods = _shop_goods(rng)
    a, b = _between(rng, 2, 15), _between(rng, 2, 9)
    return (
        f"At the {shop}, one {one} costs {a} dollars. How many dollars do {b} {goods} cost?",
        a * b,
    )


def _buy_then_give(rng: random.Random) -> tuple[str, int]:
    name, other = _people(rng)
    things = _pick(rng, THINGS)
    shop = _pick(rng, SHOP_NAMES)
    a, b = _between(rng, 2, 25), _between(rng, 2, 25)
    c = _between(rng, 2, a + b - 1)
    return (
        f"{name} had {a} {things}, bought {b} more at the {shop}, and then gave {c} to {other}. How many "
        f"{things} does {name} have now?",
        a + b - c,
    )


def _boxes_and_loose(rng: random.Random) -> tuple[str, int]:
    name, _ = _people(rng)
    things = _pick(rng, THINGS)
    a, b, c = _between(rng, 2, 8), _between(rng, 2, 12), _between(rng, 2, 15)
    return (
        f"{name} has {a} boxes of {things} with {b} {things} in each box, and {c} more {things} that are not "
        f"in a box. How many {things} does {name} have in all?",
        a * b + c,
    )


def _trays(rng: random.Random) -> tuple[str, int]:
    name, _ = _people(rng)
    a, b = _between(rng, 2, 6), _between(rng, 4, 12)
    c = _between(rng, 2, a * b - 1)
    return (
        f"{name} baked {a} trays of muffins with {b} muffins on each tray, and sold {c} muffins at the "
        "school fair. How many muffins are left?",
        a * b - c,
    )


def _library(rng: random.Random) -> tuple[str, int]:
    a = _between(rng, 15, 80)
    b = _between(rng, 2, a - 3)
    c = _between(rng, 2, a - b - 1)
    return (
        f"A library shelf held {a} books. On Monday {b} of them were borrowed, and on Tuesday {c} more were "
        "borrowed. How many books are still on the shelf?",
        a - b - c,
    )


def _two_goods(rng: random.Random) -> tuple[str, int]:
    name, _ = _people(rng)
    shop = _pick(rng, SHOP_NAMES)
    goods = SHOPS[shop]
    first = rng.randrange(len(goods))
    second = (first + 1 + rng.randrange(len(goods) - 1)) % len(goods)
    (one, many), (other, _) = goods[first], goods[second]
    a, b, c = _between(rng, 2, 12), _between(rng, 2, 20), _between(rng, 2, 6)
    return (
        f"At the {shop}, a {one} costs {a} dollars and a {other} costs {b} dollars. {name} buys {c} {many} "
        f"and one {other}. How many dollars does {name} spend?",
        c * a + b,
    )


def _bracelets(rng: random.Random) -> tuple[str, int]:
    name, _ = _people(rng)
    a, b, c = _between(rng, 2, 12), _between(rng, 2, 12), _between(rng, 2, 6)
    return (
        f"{name} threads {a} red beads and {b} blue beads onto each bracelet and makes {c} bracelets. How "
        f"many beads does {name} use?",
        (a + b) * c,
    )


def _change(rng: random.Random) -> tuple[str, int]:
    name, _ = _people(rng)
    shop, _, goods = _shop_goods(rng)
    b, c = _between(rng, 2, 6), _between(rng, 2, 9)
    note = 20 if b * c < 20 else 50 if b * c < 50 else 100
    return (
        f"At the {shop}, {name} buys {b} {goods} at {c} dollars each and pays with a {note}-dollar note. "
        f"How many dollars of change does {name} get?",
        note - b * c,
    )


def _parking(rng: random.Random) -> tuple[str, int]:
    a = _between(rng, 10, 60)
    b = _between(rng, 2, a - 1)
    c = _between(rng, 2, 30)
    return (
        f"A car park had {a} cars in it. Then {b} cars drove out and {c} cars drove in. How many cars are in "
        "the car park now?",
        a - b + c,
    )


TEMPLATES: tuple[Template, ...] = (
    # One step.
    _gift, _day_of_sales, _weekend_reading, _giving_away, _bus, _left_at_noon, _packs, _rows_of_desks,
    _price,
    # Two steps.
    _three_days, _buy_then_give, _boxes_and_loose, _trays, _library, _two_goods, _bracelets, _change,
    _parking,
)  # fmt: skip


def problems(seed: int, count: int) -> list[Problem]:
    """``count`` problems drawn from ``seed``, each with its id; the first ``n`` of a seed are the same for
    every count. A question drawn twice is drawn again, so the problems are distinct. ValueError where
    ``count`` is not from 1 to ``MAX_COUNT``."""
    if not 1 <= count <= MAX_COUNT:
        raise ValueError(f"count must be from 1 to {MAX_COUNT}, got {count}")
    rng = random.Random(seed)
    drawn: list[Problem] = []
    seen: set[str] = set()  # membership only: the order comes from the list
    while len(drawn) < count:
        question, answer = TEMPLATES[rng.randrange(len(TEMPLATES))](rng)
        if question in seen:
            continue
        seen.add(question)
        drawn.append(Problem(f"a{len(drawn):04d}", question, answer))
    return drawn


def prompt_of(problem: Problem) -> str:
    """What a server is asked: the question, then ``INSTRUCTION``."""
    return f"{problem.question}\n\n{INSTRUCTION}"


def answer_in(reply: str) -> int | None:
    """The integer ``reply`` gives as its answer (the module docstring's rules), or None."""
    match = _ANSWER.search(reply)
    if match is None:
        return None
    number = next(group for group in match.groups() if group)
    return int(number.replace(",", ""))
