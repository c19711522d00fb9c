"""Where a run's OPD advantages point: their sign, their position, and the tokens they push.

    python scripts/opd_advantages.py RUN_DIR/METHOD/data/openclaw.db [--top 12]

Reads the samples the judge wrote for training (ready or used; every one with teacher
log-probs) from a `simulate` run's store, and prints, for A_opd = clip(teacher -
behaviour, -1, 1) per response token (train/losses.py's advantage):

- its mean over all tokens, over the first 8 tokens of each response and over the rest,
  and the share of tokens where it is negative;
- its mean on the end-of-turn token (a negative one teaches the policy not to stop);
- the hints the judge selected, most frequent first;
- the tokens it pushes up and down most in total (sum over their occurrences).

docs/experiments.md uses it to explain why OPD moved the student's scores the way it did.
"""

from __future__ import annotations

import argparse
import collections
import json
import sqlite3

from openclaw_rl.engine.loading import resolve_model_dir

FIRST = 8  # the opener: the tokens where "To solve this problem, we need to" lives


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("db", help="a simulate run's training store: RUN_DIR/METHOD/data/openclaw.db")
    parser.add_argument("--top", type=int, default=12, help="tokens to list in each direction")
    parser.add_argument("--clip", type=float, default=1.0, help="C, the OPD clip (train --opd-clip-c)")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_dir(None))
    with sqlite3.connect(f"file:{args.db}?mode=ro", uri=True) as conn:
        payloads = [json.loads(p) for (p,) in conn.execute(
            "SELECT payload FROM samples WHERE status IN ('ready', 'used') AND payload IS NOT NULL")]
        hints = collections.Counter(h for (h,) in conn.execute(
            "SELECT selected_hint FROM verdicts WHERE selected_hint IS NOT NULL"))
    by_token: dict[int, list[float]] = collections.defaultdict(list)
    first, rest = [], []
    for sample in payloads:
        if not sample.get("teacher_logprobs"):
            continue
        pairs = zip(sample["teacher_logprobs"], sample["behaviour_logprobs"], sample["response_token_ids"])
        for i, (teacher, behaviour, token) in enumerate(pairs):
            advantage = max(-args.clip, min(args.clip, teacher - behaviour))
            by_token[token].append(advantage)
            (first if i < FIRST else rest).append(advantage)
    every = first + rest
    if not every:
        raise SystemExit(f"{args.db}: no sample with teacher log-probs (a binary run has none)")
    print(f"{len(payloads)} samples, {len(every)} response tokens with a teacher")
    print(f"mean A_opd: all {sum(every) / len(every):+.4f}, first {FIRST} tokens {sum(first) / len(first):+.4f}, "
          f"rest {sum(rest) / max(len(rest), 1):+.4f}; negative on {sum(a < 0 for a in every) / len(every):.0%}")
    end = by_token.get(tokenizer.eos_token_id, [])
    if end:
        print(f"end of turn {tokenizer.eos_token!r}: mean A_opd {sum(end) / len(end):+.3f} over {len(end)} responses, "
              f"negative in {sum(a < 0 for a in end)}")
    print("selected hints:")
    for hint, count in hints.most_common(5):
        print(f"  {count:3d}  {hint}")
    totals = [(sum(v), len(v), tokenizer.decode([t])) for t, v in by_token.items() if len(v) >= 5]
    for title, rows in (("pushed up most", sorted(totals, reverse=True)), ("pushed down most", sorted(totals))):
        print(f"{title} (total A_opd, occurrences, token):")
        for total, count, text in rows[: args.top]:
            print(f"  {total:+7.2f}  {count:4d}  {text!r}")


if __name__ == "__main__":
    main()
