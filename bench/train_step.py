"""One training step of our combined objective against TRL's GRPO step (a benchmark, not a test).

    .venv/bin/python bench/train_step.py [--model PATH] [--steps 4] [--threads 2]

Needs `pip install -e '.[bench]'` (TRL); `make bench` does that. Writes
bench/results/train_step.json.

Data (built once, fed to both trainers as the same token ids): 16 chat requests rendered
with the model's chat template (60-120 prompt tokens), responses sampled from the model
itself at temperature 0.7 and cut to 100-200 tokens, behaviour log-probs from one forward
pass of the model at that temperature, rewards +1 / -1 alternating, and teacher log-probs
from a forward pass with a hint appended to the last user message (judge/teacher.py's
format), so the combined advantage r + clip(teacher - behaviour, -1, 1) has both terms.

What is timed (wall clock, `--warmup` untimed steps then the median of `--steps`):

- Ours: `Trainer.step(samples)` with TrainConfig(method="combined", batch_size=16) and
  the default micro-batch of 4, full fine-tuning, lr 1e-5, kl_beta 0 (no reference pass):
  collate, 4 x (forward, loss, backward), grad clip, AdamW step.
- TRL: one optimizer step of `GRPOTrainer.train()` with generation replaced by the
  precomputed batch (`_generate_and_score_completions` returns it; no sampling, no reward
  call, no old- or reference-log-prob pass), timed by a callback from `on_step_begin` to
  `on_step_end`: `training_step` (compute_loss forward with TRL's fused LM head + backward
  on all 16 samples at once, per_device_train_batch_size=16), grad clip, AdamW (TRL's
  default fused) step, scheduler step, zero_grad. Logging runs after `on_step_end`.

TRL is configured to train the same objective: the per-token combined advantages (B, T)
are passed as `advantages` (GRPO accepts (B, T)), our behaviour log-probs as
`old_per_token_logps`, epsilon 0.2 / epsilon_high 0.28, beta 0, lr 1e-5 constant, no
weight decay, max_grad_norm 1, temperature 0.7, gradient_checkpointing off, float32 on
the CPU. loss_type "grpo" is the one that aggregates like ours: a token mean within each
sample, then a mean over samples ("bnpo" pools every token of the batch, "dr_grpo"
divides by B * max_completion_length, "dapo" by the tokens of the whole generation batch).

Throughput counts the real prompt + response tokens of the batch (no padding), the same
definition on both sides. MFU = 6 * n_params * tokens per step / seconds / peak: the
forward + backward cost of every token, no extra forward passes on either side (kl_beta
and beta are 0, old log-probs come precomputed). It ignores attention's quadratic term
and counts the LM head on prompt positions, which neither trainer computes; both errors
are small at these lengths and identical for both sides. The peak is measured, not
looked up: the best of repeated 2048 x 2048 float32 matmuls on the same threads.

The two trainers run one after the other in this process, never concurrently (two
torch processes on these two cores slow each other 5-10x); `other_processes_cores` in the
result says how busy the rest of the machine was meanwhile. main() runs past 60 lines
because most of it is the result record, written out field by field.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openclaw_rl.config import TrainConfig  # noqa: E402
from openclaw_rl.engine.loading import resolve_model_dir  # noqa: E402
from openclaw_rl.allocator import tune_allocator  # noqa: E402
from openclaw_rl.judge.teacher import hinted_messages  # noqa: E402
from openclaw_rl.chat import render_prompt  # noqa: E402
from openclaw_rl.train.batch import collate, split_micro_batches  # noqa: E402
from openclaw_rl.train.losses import combined_advantages, opd_advantages  # noqa: E402
from openclaw_rl.train.trainer import Trainer  # noqa: E402
from openclaw_rl.types import Sample  # noqa: E402

TEMPERATURE = 0.7
RESPONSE_TOKENS = (100, 200)
SEED = 0
HINT = "The user wants concrete, numbered steps and one short example; do not pad the answer."
REQUESTS = [
    "I keep getting 'permission denied (publickey)' when I push to GitHub from my new laptop, although the "
    "same key works on my desktop. What should I check, in order, to find out what is wrong?",
    "Write a short Python function that reads a CSV file of expenses (date, category, amount) and returns the "
    "total spent per category for a given month. Explain any edge cases you handle.",
    "My sourdough bread comes out dense and flat every time. I feed the starter daily and bake at 230 C. "
    "What are the most likely causes, and how can I tell which one it is?",
    "Summarise the difference between TCP and UDP for a junior developer who mostly writes web front-ends, "
    "and say when they would ever care about it.",
    "Plan a three-day trip to Lisbon for two people who like food and walking but hate museums. We arrive "
    "Friday morning and leave Sunday night. Keep the budget moderate.",
    "Our team's standup takes forty minutes every day and people are frustrated. Suggest a new format that "
    "keeps everyone informed but finishes in fifteen minutes, and how to introduce it.",
    "Explain what a Kubernetes readiness probe is, how it differs from a liveness probe, and give a YAML "
    "example for a web service that needs twenty seconds to warm up its cache.",
    "I have two job offers: a startup with equity and a lower salary, and a large company with a higher "
    "salary and slower growth. What questions should I ask myself to decide?",
    "Draft a polite email to my landlord asking for the broken heating to be repaired this week, mentioning "
    "that I reported it twice already and that temperatures are dropping.",
    "Why does my React component re-render every time its parent renders even though its props did not "
    "change? Show how to fix it and explain when the fix is not worth it.",
    "Give me a beginner strength-training routine I can do at home with two dumbbells, three times a week, "
    "and explain how to progress over the first two months.",
    "What is the difference between a mutex and a semaphore? Use an example from a program that downloads "
    "files with a limited number of parallel connections.",
    "I want to learn enough statistics to read A/B test results at work. What topics should I study first, "
    "and what mistakes do people usually make when interpreting those results?",
    "Help me write a SQL query that finds customers who placed an order in each of the last three months "
    "but never in the month before that. Tables: customers(id, name), orders(id, customer_id, created_at).",
    "My houseplants keep getting yellow leaves in winter. The flat is warm and dry and I water once a week. "
    "What am I probably doing wrong, and what should I change first?",
    "Explain gradient clipping in neural network training: why it is needed, the difference between clipping "
    "by value and by norm, and how to pick a threshold.",
]
EARLIER_EXCHANGE = [  # every third prompt continues a conversation, so prompt lengths spread to ~120
    {"role": "user", "content": "Hi! A few questions today. Keep the answers practical, please."},
    {"role": "assistant", "content": "Of course, ask away."},
]


def build_samples(trainer: Trainer, tokenizer, batch: int) -> list[Sample]:
    """`batch` samples with sampled responses, behaviour and teacher log-probs and +-1 rewards."""
    rng = random.Random(SEED)
    torch.manual_seed(SEED)
    messages = [
        (EARLIER_EXCHANGE if i % 3 == 1 else []) + [{"role": "user", "content": REQUESTS[i % len(REQUESTS)]}]
        for i in range(batch)
    ]
    prompts = [render_prompt(tokenizer, m, None, None) for m in messages]
    responses = _sample_responses(trainer.model, prompts, tokenizer.pad_token_id, RESPONSE_TOKENS[1])
    responses = [r[: rng.randint(*RESPONSE_TOKENS)] for r in responses]
    behaviour = _score(trainer, prompts, responses)
    teacher = _score(trainer, [render_prompt(tokenizer, hinted_messages(m, HINT), None, None) for m in messages],
                     responses)
    return [
        Sample(turn_id=i, session_id=f"bench-{i}", policy_version=0, prompt_token_ids=prompts[i],
               response_token_ids=responses[i], behaviour_logprobs=behaviour[i], temperature=TEMPERATURE,
               reward=1.0 if i % 2 == 0 else -1.0, teacher_logprobs=teacher[i], hint=HINT)
        for i in range(batch)
    ]


@torch.no_grad()
def _sample_responses(model, prompts: list[list[int]], pad_id: int, tokens: int) -> list[list[int]]:
    """Exactly `tokens` sampled tokens per prompt (end of turn suppressed), left-padded batch."""
    width = max(map(len, prompts))
    input_ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])  # (B, P)
    attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])  # (B, P)
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=True, temperature=TEMPERATURE,
                         top_p=1.0, top_k=0, max_new_tokens=tokens, min_new_tokens=tokens, pad_token_id=pad_id)
    return out[:, width:].tolist()


@torch.no_grad()
def _score(trainer: Trainer, prompts: list[list[int]], responses: list[list[int]]) -> list[list[float]]:
    """Log-probs of each response after its prompt, measured as sampling measures them."""
    placeholders = [
        Sample(turn_id=i, session_id="score", policy_version=0, prompt_token_ids=p, response_token_ids=r,
               behaviour_logprobs=[0.0] * len(r), temperature=TEMPERATURE)
        for i, (p, r) in enumerate(zip(prompts, responses))
    ]
    scores = []
    for start in range(0, len(placeholders), 4):  # 4 at a time keeps the (B, T, V) log-probs small
        batch = collate(placeholders[start : start + 4])
        logprobs, _ = trainer.logprobs(batch)  # (4, T)
        scores += [row[: len(s.response_token_ids)].tolist() for row, s in zip(logprobs, placeholders[start:])]
    return scores


def time_ours(trainer: Trainer, samples: list[Sample], warmup: int, steps: int) -> tuple[list[float], dict]:
    first = {}
    seconds = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        stats = trainer.step(samples)
        elapsed = time.perf_counter() - start
        first = first or stats
        if i >= warmup:
            seconds.append(elapsed)
        print(f"  ours step {i}: {elapsed:.2f} s{'  (warm-up)' if i < warmup else ''}")
    return seconds, first


def trl_inputs(samples: list[Sample], pad_id: int) -> dict[str, torch.Tensor]:
    """The dict GRPOTrainer's generation step would return for these samples: prompts
    left-padded, completions right-padded, our combined per-token advantages."""
    batch = collate(samples)
    width = max(len(s.prompt_token_ids) for s in samples)
    prompt_ids = torch.tensor([[pad_id] * (width - len(s.prompt_token_ids)) + s.prompt_token_ids for s in samples])
    prompt_mask = (torch.arange(width)[None] >= torch.tensor([width - len(s.prompt_token_ids) for s in samples])[:, None])
    mask = batch["loss_mask"]  # (B, T)
    opd = opd_advantages(batch["teacher_logprobs"], batch["behaviour_logprobs"], batch["teacher_mask"], 1.0)
    advantages, _ = combined_advantages(batch["reward"], batch["has_reward"], opd, batch["teacher_mask"], mask, 1.0, 1.0)
    return {
        "prompt_ids": prompt_ids,  # (B, P)
        "prompt_mask": prompt_mask.long(),  # (B, P)
        "completion_ids": torch.where(mask, batch["response_ids"], pad_id),  # (B, T)
        "completion_mask": mask.long(),  # (B, T)
        "advantages": advantages,  # (B, T)
        "old_per_token_logps": batch["behaviour_logprobs"],  # (B, T)
        "num_items_in_batch": mask.sum(),
    }


def time_trl(model_dir: Path, samples: list[Sample], warmup: int, steps: int) -> tuple[list[float], float]:
    """Seconds of each timed GRPO optimizer step, and the loss of the first step."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class StepTimer(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.started = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.started)
            note = "  (warm-up)" if len(self.seconds) <= warmup else ""
            print(f"  TRL step {len(self.seconds) - 1}: {self.seconds[-1]:.2f} s{note}")

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    batch = len(samples)
    with tempfile.TemporaryDirectory() as output_dir:
        config = GRPOConfig(
            output_dir=output_dir, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
            logging_steps=1, disable_tqdm=True, seed=SEED, max_steps=warmup + steps,
            per_device_train_batch_size=batch, gradient_accumulation_steps=1,
            num_generations=4 if batch % 4 == 0 else 2, max_completion_length=RESPONSE_TOKENS[1],
            gradient_checkpointing=False, loss_type="grpo", beta=0.0, epsilon=0.2, epsilon_high=0.28,
            learning_rate=1e-5, lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=1.0,
            temperature=TEMPERATURE,
        )
        dataset = Dataset.from_list([{"prompt": tokenizer.decode(s.prompt_token_ids)} for s in samples])
        trainer = GRPOTrainer(model=model, reward_funcs=lambda completions, **kwargs: [0.0] * len(completions),
                              args=config, train_dataset=dataset, processing_class=tokenizer)
        inputs = trl_inputs(samples, tokenizer.pad_token_id)
        trainer._generate_and_score_completions = lambda generation_batch: dict(inputs)  # no generation
        timer = StepTimer()
        trainer.add_callback(timer)
        trainer.train()
        first_loss = next(log["loss"] for log in trainer.state.log_history if "loss" in log)
    return timer.seconds[warmup:], float(first_loss)


def matmul_peak_gflops(threads: int, size: int = 2048, repeats: int = 10) -> float:
    """Best float32 GFLOP/s of a size x size matmul on `threads` threads."""
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b  # warm-up
    best = min(_seconds(lambda: a @ b) for _ in range(repeats))
    return 2 * size**3 / best / 1e9


class OtherLoad:
    """Cores kept busy by other processes while this one ran: all CPU time the kernel
    counted (/proc/stat) minus this process's own, over the wall time. Near 0 on a quiet machine."""

    def __init__(self) -> None:
        self.start = self._snapshot()

    @staticmethod
    def _snapshot() -> tuple[float, float, float]:
        fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        busy_s = (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # minus idle and iowait
        own = os.times()
        return time.perf_counter(), busy_s, own.user + own.system

    def cores(self) -> float:
        end = self._snapshot()
        wall, busy, own = (b - a for a, b in zip(self.start, end))
        return max(0.0, (busy - own) / wall)


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def theoretical_peak_gflops(threads: int) -> tuple[float | None, str]:
    """cores x clock x FP32 FLOPs per cycle from /proc/cpuinfo flags (an estimate)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None, "no /proc/cpuinfo"
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    mhz = next((float(line.split(":", 1)[1]) for line in info.splitlines() if line.startswith("cpu MHz")), None)
    if mhz is None:
        return None, "no clock in /proc/cpuinfo"
    per_cycle, isa = (64, "AVX-512") if "avx512f" in flags else (32, "AVX2") if "fma" in flags else (8, "SSE")
    how = f"{threads} cores x {mhz:.0f} MHz x {per_cycle} FP32 FLOPs/cycle ({isa}: 2 FMA pipes assumed)"
    return threads * mhz * 1e6 * per_cycle / 1e9, how


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model directory (default: SmolLM2-135M-Instruct)")
    parser.add_argument("--batch", type=int, default=16, help="samples per optimizer step (the paper's 16)")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per trainer")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per trainer before timing")
    parser.add_argument("--threads", type=int, default=2, help="torch threads for everything")
    parser.add_argument("--micro-batch", type=int, default=None,
                        help="our samples per forward/backward pass (default: the trainer's, 1 on a CPU)")
    parser.add_argument("--allocator", choices=("tuned", "glibc"), default="tuned",
                        help="tuned: big blocks from the heap, as the CLI runs (openclaw_rl/allocator.py); glibc: "
                             "its defaults")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "train_step.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model_dir = resolve_model_dir(args.model)

    from transformers import AutoTokenizer

    import trl

    other_load = OtherLoad()
    peak_before = matmul_peak_gflops(args.threads)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if args.allocator == "tuned":
        tune_allocator()
    config = TrainConfig(method="combined", batch_size=args.batch, train_threads=args.threads,
                         micro_batch_size=args.micro_batch)
    ours = Trainer(model_dir, config)
    samples = build_samples(ours, tokenizer, args.batch)
    prompt_tokens = [len(s.prompt_token_ids) for s in samples]
    response_tokens = [len(s.response_token_ids) for s in samples]
    tokens = sum(prompt_tokens) + sum(response_tokens)
    n_params = sum(p.numel() for p in ours.model.parameters())
    size = ours.micro_batch_size
    padded = {  # positions each side runs through the model: ours pads per micro-batch, TRL per batch
        "ours": sum(len(group) * max(len(s.prompt_token_ids) + len(s.response_token_ids) for s in group)
                    for group in split_micro_batches(samples, size)),
        "trl": len(samples) * (max(prompt_tokens) + max(response_tokens)),
    }
    print(f"{args.batch} samples: prompts {min(prompt_tokens)}-{max(prompt_tokens)} tokens, responses "
          f"{min(response_tokens)}-{max(response_tokens)}; {tokens} tokens per step; {n_params / 1e6:.1f}M params")

    print("ours (Trainer.step, method=combined):")
    ours_seconds, ours_first = time_ours(ours, samples, args.warmup, args.steps)
    del ours
    gc.collect()
    print(f"TRL {trl.__version__} (GRPOTrainer optimizer step, generation replaced by the same batch):")
    trl_seconds, trl_first_loss = time_trl(model_dir, samples, args.warmup, args.steps)
    threads_after = torch.get_num_threads()
    other_cores = other_load.cores()

    peak = max(peak_before, matmul_peak_gflops(args.threads))  # before and after: a busy moment only lowers it
    theory, theory_how = theoretical_peak_gflops(args.threads)
    ours_s, trl_s = statistics.median(ours_seconds), statistics.median(trl_seconds)
    flops = 6 * n_params * tokens
    result = {
        "model": model_dir.name,
        "batch": args.batch,
        "tokens_per_step": tokens,
        "response_tokens_per_step": sum(response_tokens),
        "prompt_tokens_range": [min(prompt_tokens), max(prompt_tokens)],
        "response_tokens_range": [min(response_tokens), max(response_tokens)],
        "padded_positions_per_step": padded,
        "ours_s_per_step": round(ours_s, 3),
        "trl_s_per_step": round(trl_s, 3),
        "ours_tok_s": round(tokens / ours_s, 1),
        "trl_tok_s": round(tokens / trl_s, 1),
        "ours_response_tok_s": round(sum(response_tokens) / ours_s, 1),
        "trl_response_tok_s": round(sum(response_tokens) / trl_s, 1),
        "speedup_vs_trl": round(trl_s / ours_s, 3),
        "mfu": round(flops / ours_s / (peak * 1e9), 4),
        "trl_mfu": round(flops / trl_s / (peak * 1e9), 4),
        "model_flops_per_step": flops,
        "n_params": n_params,
        "peak_gflops": round(peak, 1),
        "peak_method": f"measured dense-matmul peak: best of 10 float32 2048x2048 @ 2048x2048 torch.matmul "
                       f"calls on {args.threads} threads, before and after the trainers (max of the two)",
        "theoretical_peak_gflops": round(theory, 1) if theory else None,
        "theoretical_peak_method": theory_how,
        "ours_step_seconds": [round(s, 3) for s in ours_seconds],
        "trl_step_seconds": [round(s, 3) for s in trl_seconds],
        "first_step_loss": {"ours": round(ours_first["loss"], 5), "trl": round(trl_first_loss, 5)},
        "first_step_ratio_mean_ours": round(ours_first["ratio_mean"], 5),
        "warmup_steps": args.warmup,
        "timed_steps": args.steps,
        "threads": args.threads,
        "micro_batch": size,
        "allocator": args.allocator,
        "torch": torch.__version__,
        "trl": trl.__version__,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "other_processes_cores": round(other_cores, 2),
        "notes": [
            f"ours: wall time of Trainer.step (collate, {-(-args.batch // size)} micro-batches "
            f"of {size} by length: forward, combined loss, backward; grad clip; AdamW step); "
            f"TrainConfig(method='combined', batch_size={args.batch}), full fine-tuning, kl_beta=0",
            "TRL: on_step_begin..on_step_end of GRPOTrainer.train() with _generate_and_score_completions "
            f"replaced by the precomputed batch: compute_loss (fused LM head, {args.batch} samples in one pass) + "
            "backward, grad clip, fused AdamW step, scheduler step, zero_grad; no generation, reward or "
            "old-log-prob pass",
            "TRL objective matched: advantages = our per-token combined advantages (B, T), old_per_token_logps = "
            "our behaviour log-probs, loss_type='grpo' (per-sample token mean, then batch mean), beta=0, "
            "epsilon=0.2, epsilon_high=0.28, gradient_checkpointing=False, lr 1e-5 constant, float32",
            "tokens = real prompt + response tokens of the batch (no padding), same on both sides; the padded "
            "positions each side actually runs are in padded_positions_per_step; "
            "speedup_vs_trl = trl_s_per_step / ours_s_per_step; first_step_loss equal on both sides checks that "
            "both trainers optimise the same objective on the same tokens",
            "mfu = 6 * n_params * tokens_per_step / s_per_step / peak_gflops; no extra forward passes on either "
            "side; ignores attention's quadratic term and counts the LM head on prompt positions",
            f"median of {args.steps} timed steps after {args.warmup} warm-up step(s) per trainer; trainers run "
            f"sequentially in one process; torch threads {args.threads} (after TRL: {threads_after})",
            f"other_processes_cores: CPU cores other processes kept busy on average during the run "
            f"({other_cores:.2f} of {os.cpu_count()}); well above 0 means the timings are inflated",
        ],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
