"""Does the hint-conditioned teacher (the same model) move away from the boilerplate opener?

    python scripts/opd_opener_diagnostic.py RUN_DIR/METHOD/eval-data/openclaw.db

For each base (policy v0) held-out answer that opens "To solve this problem", scores its
tokens under the original prompt (the student) and with the oracle hint appended (the
teacher), and prints A_opd = teacher - student log-probability per token, on the
opener and on the rest (docs/experiments.md, appendix).
"""
import asyncio
import json
import sqlite3
import sys
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.engine.loading import resolve_model_dir
from openclaw_rl.judge.teacher import hinted_messages
from openclaw_rl.chat import render_prompt
from openclaw_rl.eval.personas import get_persona
from openclaw_rl.eval.problems import heldout_problems

eng = LocalEngine(resolve_model_dir(None), threads=1)
tok = eng.tokenizer
p = get_persona("student"); hs = {p.first_message(x): x for x in heldout_problems(16)}
c = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
rows = list(c.execute("select prompt_messages, prompt_token_ids, response_token_ids, response_text from turns where policy_version=0 order by id limit 16"))
async def main():
    out = []
    for pm, pids, rids, text in rows:
        if not text.lower().startswith("to solve this problem"):
            continue
        msgs = json.loads(pm); pids = json.loads(pids); rids = json.loads(rids)
        prob = hs[msgs[-1]["content"]]
        hints = p.hints(prob, text, 3)
        hint = next(h for h in hints if "solve this problem" in h.lower() or "chatbot" in h.lower() or "phrases" in h.lower())
        student = await eng.score(pids, rids, temperature=1.0, top_k=0)
        tp = render_prompt(tok, hinted_messages(msgs, hint), None, None)
        teacher = await eng.score(tp, rids, temperature=1.0, top_k=0)
        k = 6  # the opener's first tokens: "To solve this problem,"
        adv = [t - s for t, s in zip(teacher.logprobs[:k], student.logprobs[:k])]
        rest = [t - s for t, s in zip(teacher.logprobs[k:], student.logprobs[k:])]
        out.append((sum(adv) / k, sum(rest) / max(1, len(rest))))
        print(repr(tok.decode(rids[:k])), "| hint:", hint[:70], "| A_opd opener %.3f, rest %.3f" % out[-1])
    print("mean A_opd on the opener tokens %.3f, on the rest %.3f over %d answers" % (
        sum(a for a, _ in out) / len(out), sum(b for _, b in out) / len(out), len(out)))
    await eng.aclose()
asyncio.run(main())
