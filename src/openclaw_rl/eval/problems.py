"""GSM8K-style word problems, generated from templates with a seeded RNG.

Nothing is downloaded: twelve templates (shopping, baking, travel, ages, ...) draw their
numbers, names and items from a `random.Random`, and each problem carries its integer
answer and a worked solution of one sentence per arithmetic step.

Decisions and why:

- A solution is a list of `Step`s whose operands are literals from the question or
  `Ref`s to earlier results, so the same steps can be re-computed with one step's result
  changed. That is how the teacher persona's student makes a single slip whose error
  then carries through the rest of the working (`computed_values(..., slip=...)`).
- Held-out problems are disjoint from training problems by construction: every question
  names a person, and the two sets draw their people from disjoint name pools (and their
  numbers from separate RNG streams). No text of a held-out question can occur in
  training, whatever the seeds and counts.
- Every template divides exactly and keeps every intermediate value a positive integer,
  so answers are integers and `check_answer` compares numbers, not strings.

(Over 400 lines: seventeen short templates, beside the records they build and the
reading of numbers back out of answers that checks them.)
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable

__all__ = [
    "BASIC_FORMS",
    "BASIC_TEMPLATES",
    "HELDOUT_PEOPLE",
    "LEVELS",
    "TEMPLATES",
    "TRAIN_PEOPLE",
    "Person",
    "Problem",
    "Ref",
    "Step",
    "check_answer",
    "computed_values",
    "final_number",
    "heldout_problems",
    "make_problem",
    "numbers_in",
    "render_steps",
    "train_problems",
]


@dataclass(frozen=True)
class Person:
    name: str
    subject: str  # she | he
    possessive: str  # her | his

    @property
    def Subject(self) -> str:  # noqa: N802 - the capitalised pronoun, for sentence starts
        return self.subject.capitalize()


def _people(spec: str) -> tuple[Person, ...]:
    pronouns = {"f": ("she", "her"), "m": ("he", "his")}
    return tuple(Person(name, *pronouns[g]) for name, g in (item.split(":") for item in spec.split()))


TRAIN_PEOPLE = _people(
    "Maya:f Liam:m Sofia:f Noah:m Ava:f Ethan:m Zara:f Omar:m Chloe:f Lucas:m "
    "Priya:f Mateo:m Hana:f Kofi:m Elena:f Ravi:m Nina:f Jonah:m Amara:f Felix:m"
)
HELDOUT_PEOPLE = _people("Greta:f Tomas:m Ines:f Yusuf:m Leila:f Bruno:m Mei:f Dmitri:m")


@dataclass(frozen=True)
class Ref:
    """The result of an earlier step of the same solution."""

    step: int


Operand = int | Ref
_SYMBOLS = {"+": "+", "-": "-", "*": "×", "/": "÷"}


@dataclass(frozen=True)
class Step:
    """One arithmetic step; `text` is a sentence with `{calc}` where "3 × 12 = 36" goes."""

    text: str
    op: str  # + - * /
    left: Operand
    right: Operand


@dataclass(frozen=True)
class Problem:
    id: str
    template: str
    question: str
    steps: tuple[Step, ...]
    values: tuple[int, ...]  # the result of each step; the last one is the answer
    solution: tuple[str, ...]  # the worked solution, one sentence per step

    @property
    def answer(self) -> int:
        return self.values[-1]

    @property
    def literals(self) -> tuple[int, ...]:
        """The numbers the question gives, in the order the solution uses them."""
        seen: list[int] = []
        for step in self.steps:
            for operand in (step.left, step.right):
                if isinstance(operand, int) and operand not in seen:
                    seen.append(operand)
        return tuple(seen)


def computed_values(steps: tuple[Step, ...] | list[Step], slip: tuple[int, int] | None = None) -> list[int | float]:
    """Each step's result; `slip=(k, v)` makes step k come out as v and carries it on."""
    values: list[int | float] = []
    for i, step in enumerate(steps):
        left, right = (values[o.step] if isinstance(o, Ref) else o for o in (step.left, step.right))
        if step.op == "+":
            value: int | float = left + right
        elif step.op == "-":
            value = left - right
        elif step.op == "*":
            value = left * right
        elif step.op == "/":
            value = left // right if left % right == 0 else left / right
        else:
            raise ValueError(f"step {i} has operator {step.op!r}; use one of + - * /")
        values.append(slip[1] if slip is not None and slip[0] == i else value)
    return values


def render_steps(steps: tuple[Step, ...] | list[Step], values: list[int | float] | tuple[int, ...]) -> list[str]:
    """The worked solution as sentences, with each step's operands taken from `values`."""
    sentences = []
    for step, value in zip(steps, values):
        left, right = (values[o.step] if isinstance(o, Ref) else o for o in (step.left, step.right))
        sentences.append(step.text.format(calc=f"{left} {_SYMBOLS[step.op]} {right} = {value}"))
    return sentences


# -- the templates ---------------------------------------------------------------------
# Each takes an RNG and two distinct people and returns (question, steps).

Template = Callable[[random.Random, Person, Person], tuple[str, list[Step]]]


def _packs(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    item = rng.choice(["stickers", "pencils", "marbles", "crayons", "trading cards", "erasers"])
    packs, per_pack = rng.randint(3, 9), rng.randint(6, 15)
    given = rng.randint(2, packs * per_pack - 2)
    question = (f"{p.name} buys {packs} packs of {item}. Each pack has {per_pack} {item}. {p.Subject} gives "
                f"{given} {item} to {f.name}. How many {item} does {p.name} have left?")
    return question, [
        Step(f"First, {p.name} has {{calc}} {item} in total.", "*", packs, per_pack),
        Step(f"After giving {given} to {f.name}, {p.subject} has {{calc}} {item} left.", "-", Ref(0), given),
    ]


def _savings(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    thing = rng.choice(["bike helmet", "video game", "pair of shoes", "board game", "backpack"])
    weekly, weeks = rng.randint(5, 25), rng.randint(3, 10)
    spent = rng.randint(3, weekly * weeks - 1)
    question = (f"{p.name} saves ${weekly} every week for {weeks} weeks. Then {p.subject} spends ${spent} on a "
                f"{thing}. How many dollars does {p.name} have left?")
    return question, [
        Step(f"In {weeks} weeks {p.name} saves {{calc}} dollars.", "*", weekly, weeks),
        Step(f"After buying the {thing}, {p.subject} has {{calc}} dollars left.", "-", Ref(0), spent),
    ]


def _change(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    item, items = rng.choice([("notebook", "notebooks"), ("sandwich", "sandwiches"), ("ticket", "tickets"),
                              ("plant", "plants"), ("toy car", "toy cars")])
    price, count = rng.randint(2, 12), rng.randint(2, 8)
    bill = min(b for b in (20, 50, 100) if b > price * count)
    question = (f"A {item} costs ${price}. {p.name} buys {count} {items} and pays with a ${bill} bill. "
                f"How much change does {p.subject} get, in dollars?")
    return question, [
        Step(f"The {items} cost {{calc}} dollars.", "*", count, price),
        Step(f"So {p.name} gets {{calc}} dollars back.", "-", bill, Ref(0)),
    ]


def _bakery(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    food = rng.choice(["cookies", "muffins", "cupcakes", "rolls"])
    trays, per_tray, bag = rng.randint(2, 6), rng.randint(6, 12), rng.randint(2, 6)
    bags = rng.randint(1, (trays * per_tray - 1) // bag)
    sold = trays * per_tray - bag * bags
    question = (f"{p.name} bakes {trays} trays of {food} with {per_tray} {food} on each tray. {p.Subject} sells "
                f"{sold} of them and puts the rest into bags of {bag}. How many bags does {p.subject} fill?")
    return question, [
        Step(f"{p.name} bakes {{calc}} {food}.", "*", trays, per_tray),
        Step(f"After selling {sold}, there are {{calc}} {food} left.", "-", Ref(0), sold),
        Step(f"In bags of {bag}, that makes {{calc}} bags.", "/", Ref(1), bag),
    ]


def _train_trip(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    speed, hours, extra = rng.randrange(40, 95, 5), rng.randint(2, 5), rng.randint(10, 60)
    question = (f"{p.name} takes a train that travels {speed} kilometers per hour for {hours} hours. Then "
                f"{p.subject} rides a bus for another {extra} kilometers. How many kilometers does {p.name} "
                f"travel in total?")
    return question, [
        Step("The train covers {calc} kilometers.", "*", speed, hours),
        Step(f"With the bus ride, {p.name} travels {{calc}} kilometers.", "+", Ref(0), extra),
    ]


def _ages(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    age, older, years = rng.randint(6, 14), rng.randint(2, 9), rng.randint(2, 10)
    question = (f"{p.name} is {age} years old. {f.name} is {older} years older than {p.name}. "
                f"What will the sum of their ages be in {years} years?")
    return question, [
        Step(f"{f.name} is {{calc}} years old now.", "+", age, older),
        Step("Together they are {calc} years old now.", "+", age, Ref(0)),
        Step(f"In {years} years each of them is {years} years older, which adds {{calc}} years.", "*", 2, years),
        Step("So the sum of their ages will be {calc} years.", "+", Ref(1), Ref(2)),
    ]


def _reading(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    per_day, days = rng.randint(8, 30), rng.randint(3, 9)
    pages = per_day * days + rng.randint(10, 120)
    question = (f"{p.name}'s book has {pages} pages. {p.Subject} reads {per_day} pages every day. "
                f"How many pages are left after {days} days?")
    return question, [
        Step(f"In {days} days {p.name} reads {{calc}} pages.", "*", per_day, days),
        Step("So there are {calc} pages left.", "-", pages, Ref(0)),
    ]


def _garden(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    rows, per_row, each = rng.randint(3, 8), rng.randint(4, 10), rng.randint(3, 9)
    given = rng.randint(5, rows * per_row * each - 5)
    question = (f"{p.name} plants {rows} rows of tomato plants with {per_row} plants in each row. Each plant "
                f"grows {each} tomatoes. {p.Subject} gives away {given} tomatoes. How many tomatoes does "
                f"{p.subject} keep?")
    return question, [
        Step("There are {calc} plants.", "*", rows, per_row),
        Step("They grow {calc} tomatoes.", "*", Ref(0), each),
        Step(f"After giving {given} away, {p.name} keeps {{calc}} tomatoes.", "-", Ref(1), given),
    ]


def _quarter(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    marbles, bought = 4 * rng.randint(4, 25), rng.randint(3, 20)
    question = (f"{p.name} has {marbles} marbles. {p.Subject} gives a quarter of them to {f.name} and then buys "
                f"{bought} more. How many marbles does {p.name} have now?")
    return question, [
        Step(f"A quarter of {marbles} is {{calc}} marbles.", "/", marbles, 4),
        Step(f"After giving them to {f.name}, {p.name} has {{calc}} marbles.", "-", marbles, Ref(0)),
        Step(f"After buying {bought} more, {p.subject} has {{calc}} marbles.", "+", Ref(1), bought),
    ]


def _wages(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    rate, saturday, sunday = rng.randint(8, 20), rng.randint(2, 6), rng.randint(2, 6)
    question = (f"{p.name} earns ${rate} an hour. {p.Subject} works {saturday} hours on Saturday and {sunday} "
                f"hours on Sunday. How many dollars does {p.subject} earn over the weekend?")
    return question, [
        Step(f"{p.name} works {{calc}} hours in total.", "+", saturday, sunday),
        Step(f"At {rate} dollars an hour, {p.subject} earns {{calc}} dollars.", "*", Ref(0), rate),
    ]


def _vans(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    size, vans, adults = rng.randint(5, 8), rng.randint(3, 8), rng.randint(2, 5)
    students = size * vans - adults
    question = (f"{p.name}'s class is going on a trip. There are {students} students and {adults} adults, and "
                f"each van holds {size} people. If every van is full, how many vans do they need?")
    return question, [
        Step("There are {calc} people going.", "+", students, adults),
        Step(f"With {size} people in each van, they need {{calc}} vans.", "/", Ref(0), size),
    ]


def _apples(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    monday = rng.randint(5, 20)
    used = rng.randint(2, 3 * monday - 2)
    question = (f"{p.name} picks {monday} apples on Monday and twice as many on Tuesday. {p.Subject} uses "
                f"{used} apples to make pies. How many apples are left?")
    return question, [
        Step(f"On Tuesday {p.subject} picks {{calc}} apples.", "*", 2, monday),
        Step("Together that is {calc} apples.", "+", monday, Ref(0)),
        Step(f"After using {used} for pies, {{calc}} apples are left.", "-", Ref(1), used),
    ]


def _sharing(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    friends, each = rng.randint(3, 8), rng.randint(4, 12)
    eaten = rng.randint(1, each - 1)
    total = friends * each
    question = (f"{p.name} has {total} crackers and shares them equally among {friends} friends. Each friend "
                f"eats {eaten} of their crackers. How many crackers does each friend have left?")
    return question, [
        Step("Each friend gets {calc} crackers.", "/", total, friends),
        Step("After eating some, each friend has {calc} crackers left.", "-", Ref(0), eaten),
    ]


TEMPLATES: dict[str, Template] = {
    "packs": _packs, "savings": _savings, "change": _change, "bakery": _bakery, "train_trip": _train_trip,
    "ages": _ages, "reading": _reading, "garden": _garden, "quarter": _quarter, "wages": _wages,
    "vans": _vans, "apples": _apples, "sharing": _sharing,
}


# -- one-step problems: the `basic` level of the tool-call environment -------------------
# One arithmetic operation on small numbers: what a 135M model gets right some of the time,
# so that agent episodes succeed now and then and outcome rewards have variance.

_THINGS = ("apples", "stickers", "pencils", "marbles", "books", "shells", "cookies", "coins")


def _basic_add(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    item, have, more = rng.choice(_THINGS), rng.randint(2, 9), rng.randint(2, 9)
    question = f"{p.name} has {have} {item}. {f.name} gives {p.name} {more} more. How many {item} does {p.name} have now?"
    return question, [Step(f"{p.name} has {{calc}} {item}.", "+", have, more)]


def _basic_subtract(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    item, have = rng.choice(_THINGS), rng.randint(5, 12)
    given = rng.randint(1, 4)
    question = f"{p.name} has {have} {item} and gives {given} of them to {f.name}. How many {item} does {p.name} have left?"
    return question, [Step(f"{p.name} has {{calc}} {item} left.", "-", have, given)]


def _basic_multiply(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    item, boxes, each = rng.choice(_THINGS), rng.randint(2, 5), rng.randint(2, 5)
    question = f"{p.name} buys {boxes} boxes with {each} {item} in each box. How many {item} does {p.name} buy?"
    return question, [Step(f"{p.name} buys {{calc}} {item}.", "*", boxes, each)]


def _basic_divide(rng: random.Random, p: Person, f: Person) -> tuple[str, list[Step]]:
    item, friends, each = rng.choice(_THINGS), rng.randint(2, 4), rng.randint(2, 5)
    question = (f"{p.name} shares {friends * each} {item} equally among {friends} friends. "
                f"How many {item} does each friend get?")
    return question, [Step(f"Each friend gets {{calc}} {item}.", "/", friends * each, friends)]


BASIC_TEMPLATES: dict[str, Template] = {
    "basic_add": _basic_add, "basic_subtract": _basic_subtract, "basic_multiply": _basic_multiply,
    "basic_divide": _basic_divide,
}
# The operation a basic task asks for, with letters for its numbers, that the task's prompt
# shows after the question: the form of the working and of the answer are given, the numbers
# and the arithmetic are not (with a worked example instead, SmolLM2-135M copied its answer).
BASIC_FORMS: dict[str, str] = {
    "basic_add": "more is adding: A + B = C. The answer is C.",
    "basic_subtract": "giving some away is subtracting: A - B = C. The answer is C.",
    "basic_multiply": "boxes of the same size is multiplying: A × B = C. The answer is C.",
    "basic_divide": "sharing equally is dividing: A ÷ B = C. The answer is C.",
}
_BY_LEVEL: dict[str, dict[str, Template]] = {"standard": TEMPLATES, "basic": BASIC_TEMPLATES}
LEVELS = tuple(_BY_LEVEL)  # the template sets a problem set draws from
_ALL_TEMPLATES: dict[str, Template] = TEMPLATES | BASIC_TEMPLATES


def _templates(level: str) -> dict[str, Template]:
    if level not in _BY_LEVEL:
        raise ValueError(f"unknown problem level {level!r}; choose one of {', '.join(LEVELS)}")
    return _BY_LEVEL[level]


def make_problem(template: str, rng: random.Random, people: tuple[Person, ...], problem_id: str) -> Problem:
    """One problem from the named template, its numbers and people drawn from `rng`."""
    if template not in _ALL_TEMPLATES:
        raise ValueError(f"unknown template {template!r}; choose one of {', '.join(_ALL_TEMPLATES)}")
    person, friend = rng.sample(people, 2)
    question, steps = _ALL_TEMPLATES[template](rng, person, friend)
    values = computed_values(steps)
    if not all(isinstance(v, int) and v > 0 for v in values):  # a template bug, never a user error
        raise AssertionError(f"template {template} produced non-positive or fractional values {values}")
    return Problem(id=problem_id, template=template, question=question, steps=tuple(steps),
                   values=tuple(values), solution=tuple(render_steps(steps, values)))


def train_problems(seed: int, n: int, level: str = "standard") -> list[Problem]:
    """`n` training problems; the same seed gives the same problems. `level`: "standard" (the
    multi-step templates) or "basic" (one operation on small numbers)."""
    names = list(_templates(level))
    stream = "train" if level == "standard" else f"train-{level}"
    problems = []
    for i in range(n):
        rng = random.Random(f"{stream}:{seed}:{i}")
        problems.append(make_problem(rng.choice(names), rng, TRAIN_PEOPLE, f"{stream}-{seed}-{i:05d}"))
    return problems


def probe_problems(seed: int, n: int, avoid: list[Problem] = ()) -> list[Problem]:
    """`n` problems for the update gate's probes: drawn like training ones (the same people), from
    a stream of their own, none asking the question of a problem in `avoid`."""
    names, taken = list(TEMPLATES), {p.question for p in avoid}
    problems: list[Problem] = []
    i = 0
    while len(problems) < n:
        rng = random.Random(f"probe:{seed}:{i}")
        problem = make_problem(rng.choice(names), rng, TRAIN_PEOPLE, f"probe-{seed}-{i:05d}")
        if problem.question not in taken:
            taken.add(problem.question)
            problems.append(problem)
        i += 1
    return problems


def heldout_problems(n: int = 16, level: str = "standard") -> list[Problem]:
    """The fixed evaluation set: every template of `level` in turn, people never used in training."""
    names = list(_templates(level))
    stream = "heldout" if level == "standard" else f"heldout-{level}"
    return [make_problem(names[i % len(names)], random.Random(f"{stream}:{i}"), HELDOUT_PEOPLE,
                         f"{stream}-{i:03d}") for i in range(n)]


# -- reading numbers back out of responses ---------------------------------------------

_NUMBER = re.compile(r"(?<![\w.])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d])|(?<![\w.,])\d+(?:\.\d+)?(?![\d])")
_MARKED = re.compile(
    r"(?:answer\s*(?:is|:|=)|\#\#\#\#|\\boxed\{)\s*\$?\s*(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)",
    re.IGNORECASE,
)


def numbers_in(text: str) -> list[float]:
    """Every number in `text`, in order ("1,200" is 1200; "$36" is 36; signs are ignored)."""
    return [float(m.group().replace(",", "")) for m in _NUMBER.finditer(text)]


def final_number(text: str) -> float | None:
    """The response's final answer: the last marked one ("answer is 27", "#### 27",
    "\\boxed{27}") if there is one, else the last number in the text."""
    marked = _MARKED.findall(text)
    if marked:
        return float(marked[-1].replace(",", ""))
    numbers = numbers_in(text)
    return numbers[-1] if numbers else None


def check_answer(response_text: str, answer: int) -> bool:
    value = final_number(response_text)
    return value is not None and abs(value - answer) < 1e-9
