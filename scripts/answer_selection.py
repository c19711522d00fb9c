"""Could serving pick, among several sampled answers, the one the user would accept?

    python scripts/answer_selection.py DATA_DIR OUT_DIR --persona parent --approve 0.75 [--n 8]
    python scripts/answer_selection.py DATA_DIR OUT_DIR --persona parent --approve 0.75 --analyse-only
    python scripts/answer_selection.py RUN/data OUT_DIR --persona student --approve 0.775 --user student

DATA_DIR is the data dir of a finished `demo`/`simulate` run (its store: the user's lessons
and the judge's verdicts on their sessions). Its store is copied to OUT_DIR and served there
by the base model, the experience on and training off; each of the 16 held-out problems is
asked once with `n` answers sampled at temperature 1 (the OpenAI `n`), and every answer is
scored by the persona's rubric. Then each selector picks one answer per problem, knowing
only what the server knows, the user's own earlier first answers with the judge's reward
(+1 approved, -1 rejected), the first k of them in session order:

- `random`, and `oracle` (the best by the rubric: the ceiling of any selector);
- `shortest`, `longest`: references that know the persona (the parent wants short answers);
- `embed_knn3`, `embed_centroid`: the judge's sentence encoder (all-MiniLM-L6-v2), nearest to
  the approved answers and farthest from the rejected ones (top-3 mean, or the centroids);
- `style_far_rejected`, `style_both`: the same on a handful of style features (log words,
  sentences and lines, the share of list lines, markdown, digits and `=` per word),
  standardised over the candidates and the history.
- `lesson_checks_only`: the answer that keeps the user's lessons best as far as they can be
  read off the text (experience/checks.py: "one sentence", "short", "don't show the
  working", "show every step", "no bullet points" ...), the first sampled on a tie; it
  knows the lessons in the store, not the verdicts. `majority_number`: the first answer
  whose final number is the most common among the samples (self-consistency).
  `lesson_checks`: what `serve --lesson-samples` serves (`checks.pick`: the checks plus
  half a point for consensus on the final number; the problem's first message is the request
  whose numbers and equations the checks read).

`--rewrites R` also asks for what `serve --lesson-rewrites R` serves: on each problem where the
`lesson_checks` pick among the first 4 samples is worth rewriting (`rewriting.to_rewrite`), R
rewrites of it to the lessons (the conversation, the picked answer, then "Rewrite your
answer." and the lessons), and `rewriting.choose_rewrite` over the pick and the rewrites; printed as
`lesson_checks+rewrite` (4 samples), beside `lesson_checks` on the same 4.

`--greedy` asks only for each problem's greedy answer, served with `--lesson-rewrites` 0 and 4
(a greedy answer that breaks a checkable lesson is rewritten once), and with 4 and
`--lesson-plain on` (the default: an answer decoded without the block is a candidate too): how
a run's held-out evaluation is served. `--served S` asks what serving sends at temperature 1
(seeds 0..S-1, 4 samples, 4 rewrites) with `--lesson-plain` off and on: how a user's first
answers are served.

`--user NAME` samples as NAME of a multi-user run (scripts/two_users.py): the copied users
file gets a new key for NAME, so the server puts NAME's lessons in the prompt; the history
is NAME's sessions.

With `--greedy` or `--served`, OUT_DIR/served.json keeps each arm's rubric per problem (in
`heldout_problems(16)` order, seed by seed), so two versions of the code can be compared problem
by problem on one store.

Printed: for each history size, each selector's accepted answers (rubric >= --approve) out
of 16 and mean rubric. OUT_DIR/selection.json keeps the candidates, so `--analyse-only`
reruns the selectors without sampling again. docs/experiments.md has what it found.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import statistics
from collections.abc import Callable
from pathlib import Path

import httpx
import numpy as np
import torch

from openclaw_rl.compose import build_stack
from openclaw_rl.config import JudgeConfig, ServeConfig, TrainConfig
from openclaw_rl.eval.personas import get_persona
from openclaw_rl.eval.problems import heldout_problems
from openclaw_rl.experience.checks import checks, consensus, pick, scores
from openclaw_rl.experience.rewriting import choose_rewrite, rewrite_request, to_rewrite
from openclaw_rl.judge.backends import SentenceEncoder
from openclaw_rl.serve.background import ServerThread, free_port
from openclaw_rl.store import Store
from openclaw_rl.users import LOCAL, Users

Candidates = list[list[tuple[str, float]]]  # per problem: (answer, rubric) for each sample
History = list[tuple[str, int]]  # the user's earlier first answers and the judge's reward, oldest first


def judged_history(data_dir: Path, user: str | None = None) -> History:
    """The first answer of every played session (not the held-out evaluations) with its reward;
    `user`: theirs only."""
    store = Store(data_dir)
    try:
        found = []
        for session in store.list_sessions(10_000, 0, user):
            if "-train-" not in session.id:
                continue
            turns = [t for t in store.turns(session.id) if t.kind == "main"]
            verdict = store.verdicts([turns[0].id]).get(turns[0].id) if turns else None
            if verdict is not None:
                found.append((turns[0].created_at, turns[0].response_text, verdict.reward or 0))
    finally:
        store.close()
    return [(text, reward) for _, text, reward in sorted(found)]


def lessons_of(data_dir: Path, user: str | None) -> list[str]:
    """The lessons the server puts in `user`'s prompts (None: the keyless server's local admin)."""
    store = Store(data_dir)
    try:
        return [lesson.text for lesson in store.experience(user or LOCAL.name).lessons]
    finally:
        store.close()


def _serving(data_dir: Path, out: Path, user: str | None, rewrites: int = 0, samples: int = 1, plain: str = "off"
             ) -> tuple[ServerThread, dict[str, str]]:
    """The base model served with a copy of the run's store in `out` (training off, `--lesson-samples
    samples --lesson-rewrites rewrites --lesson-plain plain`: by default no checked sampling), and the
    headers that make a request NAME's (none: the keyless server's local admin)."""
    out.mkdir(parents=True, exist_ok=True)
    for path in data_dir.glob("openclaw.db*"):
        shutil.copy(path, out / path.name)
    headers = {}
    if user is not None:
        shutil.copy(data_dir / "users.json", out / "users.json")
        users = Users(out)
        users.revoke(user)
        headers = {"Authorization": f"Bearer {users.add(user)}"}
    serve = ServeConfig(data_dir=str(out), port=free_port(), status_interval_s=0.0, train=False,
                        lesson_samples=samples, lesson_rewrites=rewrites, lesson_plain=plain)
    stack = build_stack(serve, JudgeConfig(judge="off"), TrainConfig())
    return ServerThread(stack.app(), serve.port), headers


def _answers(thread: ServerThread, headers: dict[str, str], messages: list[dict], n: int, max_tokens: int,
             seed: int, temperature: float = 1.0) -> list[str]:
    r = httpx.post(f"{thread.base_url}/v1/chat/completions", timeout=600, headers=headers,
                   json={"messages": messages, "n": n, "max_tokens": max_tokens, "temperature": temperature,
                         "seed": seed})
    r.raise_for_status()
    return [choice["message"]["content"] for choice in r.json()["choices"]]


def sample(data_dir: Path, out: Path, persona_name: str, n: int, max_tokens: int, user: str | None) -> Candidates:
    """`n` answers to each held-out problem from the base model served with the run's store."""
    persona = get_persona(persona_name)
    thread, headers = _serving(data_dir, out, user)
    try:
        candidates = []
        for problem in heldout_problems(16):
            texts = _answers(thread, headers, [{"role": "user", "content": persona.first_message(problem)}], n,
                             max_tokens, seed=7)
            candidates.append([(text, persona.rubric(problem, text)) for text in texts])
    finally:
        thread.stop()
    return candidates


def rewritten(data_dir: Path, out: Path, persona_name: str, candidates: Candidates, lessons: list[str], rewrites: int,
              max_tokens: int, user: str | None) -> tuple[list[float], list[float]]:
    """Per problem, the rubric of the `checks.pick` of the first 4 candidates, and of what
    `serve --lesson-samples 4 --lesson-rewrites R` would serve: that pick, or a rewrite of it
    that keeps the lessons better."""
    persona, found = get_persona(persona_name), checks(lessons)
    thread, headers = _serving(data_dir, out / "rewrites", user)
    try:
        picked, served = [], []
        for problem, answers in zip(heldout_problems(16), candidates):
            texts, said = [text for text, _ in answers[:4]], persona.first_message(problem)
            best = pick(texts, found, said)[0]
            picked.append(answers[best][1])
            final = texts[best]
            if asked := to_rewrite(texts, best, found, said):
                messages = [{"role": "user", "content": said},
                            {"role": "assistant", "content": texts[best]},
                            {"role": "user", "content": rewrite_request(asked, said)}]
                again = _answers(thread, headers, messages, rewrites, max_tokens, seed=3)
                chosen = choose_rewrite(texts[best], again, found, asked, said)[0]
                final = texts[best] if chosen is None else again[chosen]
            served.append(persona.rubric(problem, final))
    finally:
        thread.stop()
    return picked, served


GREEDY_ARMS = {"greedy, rewrites 0": (0, 1, "off"), "greedy, rewrites 4": (4, 1, "off"),
               "greedy, rewrites 4, plain on (the default)": (4, 1, "on")}
SAMPLED_ARMS = {"4 samples, 4 rewrites": (4, 4, "off"), "4 samples, 4 rewrites, plain on (the default)": (4, 4, "on")}


def served_arms(data_dir: Path, out: Path, persona_name: str, max_tokens: int, user: str | None, seeds: int = 0
                ) -> dict[str, list[float]]:
    """The rubric of what serving sends for each held-out problem with the run's store, under each
    setting of the arms (rewrites, samples, --lesson-plain): greedily (`seeds` 0; the served held-out
    score of a run's evaluations, `GREEDY_ARMS`) or at temperature 1 with seeds 0..seeds-1 (what a
    user's first answers are served, `SAMPLED_ARMS`)."""
    persona, served = get_persona(persona_name), {}
    arms = SAMPLED_ARMS if seeds else GREEDY_ARMS
    for n, (name, (rewrites, samples, plain)) in enumerate(arms.items()):
        thread, headers = _serving(data_dir, out / f"arm-{'sampled' if seeds else 'greedy'}-{n}", user, rewrites,
                                   samples, plain)
        try:
            served[name] = [
                persona.rubric(problem, _answers(thread, headers, [{"role": "user", "content":
                               persona.first_message(problem)}], 1, max_tokens, seed=seed,
                               temperature=1.0 if seeds else 0.0)[0])
                for seed in range(max(1, seeds)) for problem in heldout_problems(16)]
        finally:
            thread.stop()
    return served


def style(text: str) -> np.ndarray:
    words, lines = len(text.split()), [line for line in text.splitlines() if line.strip()]
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]
    listed = sum(bool(re.match(r"\s*([-*\u2022]|\d+[.)])\s", line)) for line in lines)
    return np.array([np.log1p(words), np.log1p(len(sentences)), np.log1p(len(lines)), listed / max(1, len(lines)),
                     float(bool(re.search(r"\*\*|^#", text, re.M))), len(re.findall(r"\d+", text)) / max(1, words),
                     text.count("=") / max(1, words)])


def by_lessons(lessons: list[str], with_consensus: bool) -> Callable[[list, History, str], int]:
    found = checks(lessons)

    def chosen(answers, history, request):
        texts = [text for text, _ in answers]
        if with_consensus:
            return pick(texts, found, request)[0]
        kept = scores(texts, found, request)
        return max(range(len(answers)), key=lambda i: (kept[i], -i))
    return chosen


def selectors(encoder: SentenceEncoder, rng: random.Random, lessons: list[str]
              ) -> dict[str, Callable[[list, History, str], int]]:
    def embedded(mode: str):
        def pick(answers, history, request):
            approved = [t for t, r in history if r > 0]
            rejected = [t for t, r in history if r < 0]
            e = encoder.encode([t for t, _ in answers])
            ea, er = (encoder.encode(approved) if approved else None), (encoder.encode(rejected) if rejected else None)

            def near(i: int, group) -> float:
                if group is None:
                    return 0.0
                if mode == "centroid":
                    return float(e[i] @ group.mean(0))
                return float((e[i] @ group.T).topk(min(3, group.shape[0])).values.mean())

            return max(range(len(answers)), key=lambda i: near(i, ea) - near(i, er))
        return pick

    def styled(use_approved: bool):
        def pick(answers, history, request):
            approved = [style(t) for t, r in history if r > 0]
            rejected = [style(t) for t, r in history if r < 0]
            every = np.array([style(t) for t, _ in answers] + approved + rejected)
            mean, sd = every.mean(0), every.std(0) + 1e-6
            z = [(style(t) - mean) / sd for t, _ in answers]

            def score(i: int) -> float:
                far = min(float(np.linalg.norm(z[i] - (f - mean) / sd)) for f in rejected) if rejected else 0.0
                near = -min(float(np.linalg.norm(z[i] - (f - mean) / sd)) for f in approved) if approved else 0.0
                return far + (near if use_approved else 0.0)

            return max(range(len(answers)), key=score)
        return pick

    return {"random": lambda answers, history, request: rng.randrange(len(answers)),
            "oracle": lambda answers, history, request: max(range(len(answers)), key=lambda i: answers[i][1]),
            "shortest": lambda answers, history, request: min(range(len(answers)), key=lambda i: len(answers[i][0])),
            "longest": lambda answers, history, request: max(range(len(answers)), key=lambda i: len(answers[i][0])),
            "embed_knn3": embedded("knn3"), "embed_centroid": embedded("centroid"),
            "style_far_rejected": styled(False), "style_both": styled(True),
            "lesson_checks_only": by_lessons(lessons, False),
            "majority_number": lambda answers, history, request: max(
                range(len(answers)), key=lambda i: (consensus([text for text, _ in answers])[i], -i)),
            "lesson_checks": by_lessons(lessons, True)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--persona", required=True)
    parser.add_argument("--approve", type=float, required=True, help="the run's approval level")
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--analyse-only", action="store_true", help="reuse OUT/selection.json's candidates")
    parser.add_argument("--user", help="sample as this user of a multi-user run (their lessons, their history)")
    parser.add_argument("--greedy", action="store_true", help="only the greedy answers, served with rewrites off "
                        "and on, and with --lesson-plain on (what a run's held-out evaluation is served)")
    parser.add_argument("--served", type=int, default=0, metavar="SEEDS", help="only what serving sends at "
                        "temperature 1 (seeds 0..SEEDS-1), with --lesson-plain off and on (what a user's first "
                        "answers are served)")
    parser.add_argument("--rewrites", type=int, default=0, help="also rewrite the 4-sample pick R times (serve "
                        "--lesson-rewrites R) and print what that serves")
    args = parser.parse_args()
    torch.set_num_threads(2)
    history = judged_history(args.data_dir, args.user)
    lessons = lessons_of(args.data_dir, args.user)
    found = checks(lessons)
    print(f"lessons ({len(lessons)}), {len(found)} checks read from them:")
    for lesson in lessons:
        print(f"  {lesson}  ->  {[c.kind + (' ' + c.unit if c.unit else '') + (f' {c.limit}' if c.limit else '') for c in found if c.lesson == lesson]}")
    if args.greedy or args.served:
        arms = served_arms(args.data_dir, args.out, args.persona, args.max_tokens, args.user, args.served)
        for name, chosen in arms.items():
            print(f"| {name} | {sum(s >= args.approve for s in chosen)} | {statistics.mean(chosen):.3f} |")
        (args.out / "served.json").write_text(json.dumps(arms, indent=1))  # per problem, to pair two codes
        return
    saved = args.out / "selection.json"
    if args.analyse_only:
        candidates = json.loads(saved.read_text())["candidates"]
    else:
        candidates = sample(args.data_dir, args.out, args.persona, args.n, args.max_tokens, args.user)
        saved.write_text(json.dumps({"persona": args.persona, "candidates": candidates}))
    print(f"history: {len(history)} judged first answers, {sum(r > 0 for _, r in history)} approved, "
          f"{sum(r < 0 for _, r in history)} rejected")
    every = [score for answers in candidates for _, score in answers]
    print(f"every sample: {sum(s >= args.approve for s in every)}/{len(every)} accepted, mean rubric "
          f"{statistics.mean(every):.3f}")
    print("\n| history | selector | accepted of 16 | mean rubric |\n|---|---|---|---|")
    picks = selectors(SentenceEncoder(), random.Random(0), lessons)
    requests = [get_persona(args.persona).first_message(problem) for problem in heldout_problems(16)]
    for k in sorted({1, 2, 4, 8, len(history)}):
        for name, select in picks.items():
            chosen = [answers[select(answers, history[:k], said)][1]
                      for answers, said in zip(candidates, requests)]
            print(f"| {k} | {name} | {sum(s >= args.approve for s in chosen)} | {statistics.mean(chosen):.3f} |")
    if args.rewrites:
        first4, served = rewritten(args.data_dir, args.out, args.persona, candidates, lessons, args.rewrites,
                           args.max_tokens, args.user)
        for name, chosen in (("lesson_checks (first 4)", first4), (f"lesson_checks+rewrite ({args.rewrites})", served)):
            print(f"| all | {name} | {sum(s >= args.approve for s in chosen)} | {statistics.mean(chosen):.3f} |")


if __name__ == "__main__":
    main()
