"""Consolidation on the personas' own corrections (a benchmark, not a test).

    .venv/bin/python bench/experience_consolidation.py [--problems 6] [--seed 0]

Lessons come from what the simulated users say. For the student and teacher personas,
every failed check of a few bad answers to a few held-out problems gives its correction
wordings (with the problem's own numbers filled in). Each goes through the judge's
rule hints (`judge.rules.correction_hints`) and `lesson_from_hint`, as served turns
will, and then:

1. **Pairs.** Two wordings of one check should merge; wordings of two different checks of
   one persona should stay apart. Reported: how often `consolidate` (all-MiniLM-L6-v2)
   merges, replaces or adds, for each kind of pair, with the similarity range.
2. **A stream.** All of one persona's lessons in a shuffled order through `learn`:
   how many lessons the user ends with against the number of checks that failed, and the
   changes made. Ideally one lesson per check.

Writes bench/results/experience_consolidation.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
from collections import Counter
from pathlib import Path

import numpy as np

from openclaw_rl.eval.personas import get_persona
from openclaw_rl.eval.problems import Problem, heldout_problems
from openclaw_rl.experience import Experience, consolidate, learn, lesson_from_hint, similarities
from openclaw_rl.judge.backends import SentenceEncoder
from openclaw_rl.judge.rules import correction_hints



def bad_answers(problem: Problem) -> list[str]:
    """Answers that fail different checks: markdown, chatbot phrasing and length, too short, a wrong number."""
    steps = list(problem.solution)
    return [
        "## Solution\n\n" + "\n".join(f"- **Step {i + 1}:** {s}" for i, s in enumerate(steps))
        + f"\n\n**Answer:** {problem.answer}",
        "Certainly! Great question. To solve this problem, we need to go step by step. " + " ".join(steps) * 4
        + " I hope this helps!",
        f"{problem.answer}",
        " ".join(steps[:-1]) + f" So the answer is {problem.answer + 3}.",
    ]
RESULTS = Path(__file__).parent / "results" / "experience_consolidation.json"


def wordings(persona_name: str, problems: int) -> dict[str, set[str]]:
    """check name -> the lessons its correction wordings become (each lesson under its first check)."""
    persona, found, seen = get_persona(persona_name), {}, set()
    for problem in heldout_problems(problems):
        for answer in bad_answers(problem):
            for check in persona.checks(problem, answer):
                name = "no_answer" if check.fixes == persona.no_answer_fixes else check.name
                for fix in check.fixes:
                    for hint in correction_hints(f"Hmm, not quite. {fix[:1].upper()}{fix[1:]}.", "user") or [fix]:
                        lesson = lesson_from_hint(hint)
                        if lesson and lesson not in seen:
                            seen.add(lesson)
                            found.setdefault(name, set()).add(lesson)
    return found


def pairs(found: dict[str, set[str]], embed) -> dict[str, dict]:
    outcome: dict[str, Counter] = {"same check": Counter(), "different checks": Counter()}
    sims: dict[str, list[float]] = {"same check": [], "different checks": []}
    labelled = [(name, text) for name, texts in found.items() for text in sorted(texts)]
    for (name_a, a), (name_b, b) in itertools.combinations(labelled, 2):
        kind = "same check" if name_a == name_b else "different checks"
        experience, _ = consolidate(Experience("u"), a, "t1", 0.0, embed)
        outcome[kind][consolidate(experience, b, "t2", 1.0, embed)[1].kind] += 1
        sims[kind].append(float(similarities(embed, a, [b])[0]))
    return {kind: {"pairs": sum(outcome[kind].values()), **outcome[kind],
                   "similarity": [round(min(sims[kind]), 3), round(float(np.median(sims[kind])), 3),
                                  round(max(sims[kind]), 3)] if sims[kind] else None}
            for kind in outcome}


def stream(found: dict[str, set[str]], embed, seed: int) -> dict:
    candidates = [text for texts in found.values() for text in sorted(texts)]
    random.Random(seed).shuffle(candidates)
    experience, kinds = Experience("u"), Counter()
    for turn, text in enumerate(candidates):
        experience, changes = learn(experience, text, f"t{turn}", float(turn), embed, lambda t: len(t.split()))
        kinds.update(change.kind for change in changes)
    return {"checks": len(found), "candidates": len(candidates), "lessons": len(experience.lessons),
            "changes": dict(kinds), "final": [(x.text, x.support) for x in experience.lessons]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=6, help="held-out problems per persona")
    parser.add_argument("--seed", type=int, default=0, help="the order of the stream")
    args = parser.parse_args()
    encoder, cache = SentenceEncoder(), {}

    def embed(texts: list[str]) -> np.ndarray:
        missing = [t for t in texts if t not in cache]
        if missing:
            cache.update(zip(missing, np.asarray(encoder.encode(missing))))
        return np.stack([cache[t] for t in texts])

    results = {}
    for name in ("student", "teacher"):
        found = wordings(name, args.problems)
        results[name] = {"pairs": pairs(found, embed), "stream": stream(found, embed, args.seed)}
        print(f"{name}: {json.dumps(results[name]['pairs'])}")
        summary = {k: v for k, v in results[name]["stream"].items() if k != "final"}
        print(f"  stream: {json.dumps(summary)}")
        for text, support in results[name]["stream"]["final"]:
            print(f"    [{support}] {text}")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
