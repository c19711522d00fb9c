"""A GPU check: everything issue 42 measures, in one command that writes one JSON (a benchmark, not a test).

    python bench/gpu_check.py --loop [--smoke] [--phases decode,train,tests] [--methods combined|all]
                                     [--ranks N] [--out PATH]

`--loop` adds the online loop (phase 3) to the phases, which are decode, train and tests unless
`--phases` names others (`--phases loop` alone runs it too). Phases, each timed, each written
to the JSON as soon as it ends (a phase that fails or runs out of time leaves the others'
numbers, with its error):

1. decode: a randomly initialised model of Qwen3-4B's shape built from a config (no
   download; the bundled model's tokenizer, whose ids are all below Qwen3's vocabulary);
   the local engine's decode tokens/s at batch 1, 8 and 32 (`--dtype auto`: bfloat16 on
   CUDA), sampled at temperature 1 for `--new-tokens` tokens per request;
2. train: one step of `--methods` (default combined: every signal, reward and teacher),
   full fine-tuning and LoRA, in the trainer's precision (bfloat16 compute, float32
   master weights), on synthetic samples; seconds, tokens/s, peak memory, and the model
   FLOP/s (6 N per token for full, 4 N for LoRA, whose frozen base needs no weight
   gradients; attention not counted) against the matrix-product peak measured here first
   (`peak_tflops`: an 8192-cube bfloat16 product on CUDA), i.e. a lower bound of the MFU.
   With `--ranks N` > 1 the steps run sharded with FSDP2 under torchrun (train/sharded.py);
3. loop: `openclaw-rl demo --judge oracle` (the gate on) on random weights of the default
   model's shape (SmolLM2-135M, from its config), `--loop-sessions` sessions: sessions
   per minute, wall time, updates, the trainer's step seconds and tokens/s, and the
   gate's decision seconds (both from the trainer's step lines, train/runner.py); only with
   `--loop` or when `--phases` names it, since it adds minutes to the check;
4. tests: pytest `-m "not slow and not vllm"` on the engine, decoder, precision, trainer,
   methods, gate, loop, checkpoint and weights tests (`GPU_TESTS`; `make test-gpu` runs
   this phase alone): counts and the failing tests' ids.

`--smoke` runs the same phases at tiny sizes (a tiny shape, 4 new tokens, one session pair,
one test), so `--smoke --loop` checks the whole script on a CPU in about a minute
(tests/test_gpu_check.py). On one H200 the full check is sized for about 8 minutes
(docs/gpu.md says what was measured). Writes bench/results/gpu_check.json (or --out).
`ms_per_step` is a batch's seconds over its decode steps, its prefill included.

(Over 400 lines: four phases, the table and the arguments of one command a GPU machine
runs once; split, the phases would pass the same arguments and result record around.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from statistics import median

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openclaw_rl.config import TrainConfig  # noqa: E402
from openclaw_rl.engine.loading import resolve_model_dir  # noqa: E402
from openclaw_rl.engine.local import LocalEngine  # noqa: E402
from openclaw_rl.train import sharded  # noqa: E402
from openclaw_rl.train.methods import METHODS  # noqa: E402
from openclaw_rl.train.trainer import Trainer  # noqa: E402
from openclaw_rl.types import Sample, SamplingParams, TokenStep  # noqa: E402

SHAPES = {  # Qwen3-4B's config.json, and a shape small enough for a test on a CPU
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=40960,
                     rope_theta=1_000_000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, vocab_size=49152, max_position_embeddings=2048,
                 tie_word_embeddings=True),
}
LOOP_TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2)  # over the default model's config in --smoke
BATCHES = (1, 8, 32)
PHASES = ("decode", "train", "loop", "tests")
DEFAULT_PHASES = ("decode", "train", "tests")  # --loop adds the loop
GPU_TESTS = ("test_engine", "test_decoder", "test_precision", "test_trainer", "test_methods", "test_gate",
             "test_online_loop", "test_checkpoint", "test_weights_channels")
SMOKE_TEST = "tests/test_precision.py::test_logprob_tolerance_is_stated_per_device_and_decides_the_importance_correction"
STEP_LINE = re.compile(r"step \d+ -> policy v\d+: .* in ([\d.]+)s \((\d+) tok/s\)(?:, gate ([\d.]+)s)?")


def build_model(shape: str, target: Path, tokenizer_dir: Path) -> int:
    """A random model of `shape` saved at `target` in bfloat16, with the bundled tokenizer; its parameters."""
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = Qwen3Config(**SHAPES[shape], bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    return _save_random(Qwen3ForCausalLM, config, tokenizer, target)


def build_default_shape(target: Path, smoke: bool) -> int:
    """Random weights of the default model's shape, from its own config (tiny layers in --smoke)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    default = resolve_model_dir(None)
    config = AutoConfig.from_pretrained(default, **(LOOP_TINY if smoke else {}))
    return _save_random(AutoModelForCausalLM.from_config, config, AutoTokenizer.from_pretrained(default), target)


def _save_random(make: Callable, config, tokenizer, target: Path) -> int:
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = make(config).to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    del model
    return params


def peak_memory_gb(device: str) -> float:
    if device == "cuda":
        return torch.cuda.max_memory_allocated() / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_tflops(device: str) -> float:
    """The matrix-product rate this device reaches (bfloat16 8192-cube on CUDA, float32 512-cube on a CPU)."""
    n, dtype = (8192, torch.bfloat16) if device == "cuda" else (512, torch.float32)
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    _sync(device)
    started = time.perf_counter()
    for _ in range(10):
        a @ b
    _sync(device)
    return 10 * 2 * n**3 / (time.perf_counter() - started) / 1e12


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


async def decode(model_dir: Path, new_tokens: int) -> list[dict]:
    engine = LocalEngine(model_dir, max_batch_size=max(BATCHES), prefix_cache_mb=0)  # one prompt repeats: compute it
    rows = []
    try:
        prompt = list(range(100, 132))

        async def one(seed: int) -> int:
            params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, seed=seed)
            return sum([1 async for e in engine.stream(prompt, params) if isinstance(e, TokenStep)])

        await one(0)  # warm up: kernels, allocator
        for batch in BATCHES:
            steps = engine.stats()["decode_steps"]
            started = time.perf_counter()
            tokens = sum(await asyncio.gather(*(one(i) for i in range(batch))))
            seconds = time.perf_counter() - started
            steps = engine.stats()["decode_steps"] - steps
            rows.append({"batch": batch, "tokens": tokens, "seconds": round(seconds, 3),
                         "tokens_per_s": round(tokens / seconds, 1), "ms_per_step": round(1e3 * seconds / steps, 2),
                         "engine_dtype": str(engine.dtype).removeprefix("torch."), "decoder": engine.decoder})
            print(f"decode batch {batch:>2}: {tokens / seconds:8.1f} tokens/s, {rows[-1]['ms_per_step']} ms/step",
                  flush=True)
    finally:
        await engine.aclose()
    return rows


def synthetic_samples(count: int, prompt_tokens: int, response_tokens: int, top_k: int) -> list[Sample]:
    """Samples that carry every signal, so each method finds what it trains on."""
    g = torch.Generator().manual_seed(0)
    samples = []
    for i in range(count):
        prompt = torch.randint(100, 40000, (prompt_tokens,), generator=g).tolist()
        response = torch.randint(100, 40000, (response_tokens,), generator=g).tolist()
        behaviour = (-torch.rand(response_tokens, generator=g) * 3).tolist()
        samples.append(Sample(
            turn_id=i, session_id=str(i), policy_version=0, prompt_token_ids=prompt, response_token_ids=response,
            behaviour_logprobs=behaviour, temperature=1.0, reward=1.0 if i % 2 else -1.0,
            teacher_logprobs=[b + 0.3 for b in behaviour],
            teacher_top_ids=[[response[t], *range(200, 200 + top_k - 1)] for t in range(response_tokens)],
            teacher_top_logprobs=[[-0.5] + [-4.0] * (top_k - 1) for _ in range(response_tokens)],
            hint="be brief", step_advantage=0.5 if i % 2 else -0.5))
    return samples


def train_steps(model_dir: Path, args: argparse.Namespace, device: str) -> list[dict]:
    """One step of each method, full and LoRA; sharded when this is a rank of a process group."""
    distributed = sharded.world_size() > 1
    rank = sharded.init_from_env() if distributed else 0
    methods = list(METHODS) if args.methods == "all" else args.methods.split(",")
    rows = []
    for lora in (False, True):
        for name in methods:
            config = TrainConfig(method=name, lora=lora, batch_size=args.batch, micro_batch_size=args.micro_batch,
                                 train_dtype=args.train_dtype, topk_k=args.top_k, gradient_checkpointing="auto")
            reset_peak(device)
            trainer = sharded.ShardedTrainer(model_dir, config) if distributed else Trainer(model_dir, config)
            if rank != 0:
                trainer.follow()
                del trainer
                continue
            try:
                rows.append(_timed_step(trainer, name, lora, args, device))
            finally:
                if distributed:
                    trainer.stop_followers()
            del trainer
    if distributed:
        torch.distributed.destroy_process_group()
    return rows


def _timed_step(trainer, name: str, lora: bool, args: argparse.Namespace, device: str) -> dict:
    samples = synthetic_samples(args.batch, args.prompt_tokens, args.response_tokens, args.top_k)
    trainer.step(samples)  # warm-up: the optimizer state is allocated here
    _sync(device)
    started = time.perf_counter()
    stats = trainer.step(samples)
    _sync(device)
    seconds = time.perf_counter() - started
    params = sum(p.numel() for n, p in trainer.model.named_parameters() if "lora_" not in n)  # the base model's
    tokens = args.batch * (args.prompt_tokens + args.response_tokens)
    tflops = (4 if lora else 6) * params * tokens / seconds / 1e12
    row = {"method": name, "lora": lora, "ranks": sharded.world_size(),
           "train_dtype": str(trainer.compute_dtype).removeprefix("torch."), "seconds": round(seconds, 3),
           "tokens_per_s": round(stats["tokens"] / seconds, 1), "model_tflops_per_s": float(f"{tflops:.3g}"),
           "loss": stats["loss"], "peak_memory_gb": round(peak_memory_gb(device), 2)}
    print(f"train {name:>8} {'lora' if lora else 'full'}: {seconds:7.2f} s/step, {tflops:7.1f} TFLOP/s, peak "
          f"{row['peak_memory_gb']:.2f} GB", flush=True)
    return row


def loop(work: Path, args: argparse.Namespace) -> dict:
    """The demo with the oracle judge and the gate on, on random weights of the default model's shape."""
    model_dir = work / "loop-model"
    params = build_default_shape(model_dir, args.smoke)
    sizes = (["--sessions", "2", "--heldout", "1", "--gate-probes", "2", "--batch-size", "1", "--parallel", "2"]
             if args.smoke else ["--sessions", str(args.loop_sessions)])
    command = [sys.executable, "-m", "openclaw_rl.cli", "demo", "--judge", "oracle", "--gate", "on",
               "--model", str(model_dir), "--out", str(work / "demo"), *sizes]
    env = {**os.environ, "COLUMNS": "1000", "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get(
        "PYTHONPATH", "")])}  # wide: one log line per step, for STEP_LINE
    proc = subprocess.run(command, capture_output=True, text=True, timeout=args.loop_timeout_s, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"demo exited {proc.returncode}: {proc.stderr[-2000:]}")
    summary = json.loads((work / "demo" / "summary.json").read_text())
    steps = [m.groups() for m in STEP_LINE.finditer(proc.stdout + proc.stderr)]
    step_s, gate_s = [float(s) for s, _, _ in steps], [float(g) for _, _, g in steps if g]
    sessions, wall = summary["sessions"], summary["wall_time_s"]
    return {"parameters": params, "sessions": sessions, "wall_time_s": wall,
            "sessions_per_minute": round(60 * sessions / wall, 2), "updates": summary["updates"],
            "rejected_versions": summary["rejected_versions"],
            "train_tokens_per_s_median": summary["train_tokens_per_s_median"],
            "train_step_s_median": round(median(step_s), 3) if step_s else None,
            "gate_decision_s_median": round(median(gate_s), 3) if gate_s else None,
            "gate_decisions": len(gate_s), "score_before": summary["score_before"],
            "score_after": summary["score_after"]}


def tests(args: argparse.Namespace) -> dict:
    """The suite's GPU-relevant files, `-m "not slow and not vllm"`: counts and failing ids."""
    targets = [SMOKE_TEST] if args.smoke else [f"tests/{name}.py" for name in GPU_TESTS]
    command = [sys.executable, "-m", "pytest", "-m", "not slow and not vllm", "-q", "-rfE", "-p", "no:cacheprovider",
               *targets]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=args.tests_timeout_s, cwd=ROOT, env=env)
        output, returncode = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as expired:
        output, returncode = (expired.stdout or b"").decode() if isinstance(expired.stdout, bytes) else (
            expired.stdout or ""), "timeout"
    summary = output.strip().splitlines()[-1] if output.strip() else ""  # "3 passed, 1 failed, 2 errors in 9s"
    counts = {kind.rstrip("s") + ("s" if kind.startswith("error") else ""): int(n)
              for n, kind in re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected)", summary)}
    failing = re.findall(r"^(?:FAILED|ERROR) (\S+)", output, flags=re.MULTILINE)
    return {"command": " ".join(command[1:]), "returncode": returncode, **counts, "failing": failing[:60],
            "tail": output[-3000:]}


def run_phase(result: dict, name: str, out: Path, fn: Callable[[], object]) -> None:
    """Run one phase into `result[name]` (its error instead, if it fails) and write the JSON at once."""
    started = time.perf_counter()
    try:
        result[name] = fn()
    except Exception as error:  # a phase that fails is a measurement too: keep the others'
        traceback.print_exc()
        result[name] = {"error": f"{type(error).__name__}: {error}"}
    result.setdefault("phase_seconds", {})[name] = round(time.perf_counter() - started, 1)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"-- {name}: {result['phase_seconds'][name]} s", flush=True)


def table(result: dict) -> str:
    """The numbers a reader compares with issue 42's table, one line each."""
    peak = f", matmul peak {result['peak_tflops']:.1f} TFLOP/s" if "peak_tflops" in result else ""
    lines = [f"{result['device']} ({result['shape']}, torch {result['torch']}){peak}"]
    for row in result.get("decode") or []:
        if isinstance(row, dict) and "batch" in row:
            lines.append(f"decode batch {row['batch']:>2}: {row['tokens_per_s']:>9.1f} tokens/s  {row['ms_per_step']} ms/step")
    for row in result.get("train") or []:
        if isinstance(row, dict) and "method" in row:
            lines.append(f"train {row['method']} {'lora' if row['lora'] else 'full'}: {row['seconds']} s/step, "
                         f"{row['tokens_per_s']} tokens/s, {row['model_tflops_per_s']} TFLOP/s, MFU "
                         f"{row.get('mfu_percent', 0.0):.1f} % (of the matmul peak), peak {row['peak_memory_gb']} GB")
    loop_row = result.get("loop") or {}
    if "sessions" in loop_row:
        lines.append(f"loop: {loop_row['sessions']} sessions in {loop_row['wall_time_s']} s, "
                     f"{loop_row['sessions_per_minute']} sessions/min, {loop_row['updates']} updates, gate decision "
                     f"{_or_none(loop_row['gate_decision_s_median'], 's')} ({loop_row['gate_decisions']} decisions), "
                     f"trainer {_or_none(loop_row['train_tokens_per_s_median'], 'tokens/s')}, step "
                     f"{_or_none(loop_row['train_step_s_median'], 's')}")
    test_row = result.get("tests") or {}
    if "returncode" in test_row:
        lines.append(f"tests: {test_row.get('passed', 0)} passed, {test_row.get('failed', 0)} failed, "
                     f"{test_row.get('errors', 0)} errors, {test_row.get('skipped', 0)} skipped")
    for name in PHASES:
        if isinstance(result.get(name), dict) and "error" in result[name]:
            lines.append(f"{name}: FAILED {result[name]['error']}")
    return "\n".join(lines)


def _or_none(value: float | None, unit: str) -> str:
    """A median the loop may not have (no step, no gate decision in a short run): 'none' then."""
    return "none" if value is None else f"{value:g} {unit}"


def selected_phases(args: argparse.Namespace) -> list[str]:
    """`--phases` (default: decode, train, tests), with the loop when `--loop` asks for it, in order."""
    phases = set(args.phases.split(",")) | ({"loop"} if args.loop else set())
    unknown = phases - set(PHASES)
    if unknown:
        raise SystemExit(f"unknown phases {sorted(unknown)}; choose from {', '.join(PHASES)}")
    return [name for name in PHASES if name in phases]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cuda = torch.cuda.is_available()
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: the script checked on a CPU")
    parser.add_argument("--loop", action="store_true", help="add the online loop (the demo, gate on) to the phases")
    parser.add_argument("--phases", default=",".join(DEFAULT_PHASES), help=f"comma-separated, of {', '.join(PHASES)}")
    parser.add_argument("--shape", choices=sorted(SHAPES), default=None, help="default: qwen3-4b on CUDA, else tiny")
    parser.add_argument("--methods", default="combined", help="comma-separated methods to step, or all")
    parser.add_argument("--ranks", type=int, default=max(1, torch.cuda.device_count()))
    parser.add_argument("--new-tokens", type=int, default=64 if cuda else 8)
    parser.add_argument("--batch", type=int, default=8 if cuda else 4)
    parser.add_argument("--micro-batch", type=int, default=4 if cuda else 2)
    parser.add_argument("--prompt-tokens", type=int, default=256 if cuda else 16)
    parser.add_argument("--response-tokens", type=int, default=256 if cuda else 8)
    parser.add_argument("--top-k", type=int, default=16 if cuda else 4)
    parser.add_argument("--train-dtype", default="auto")
    parser.add_argument("--loop-sessions", type=int, default=16)
    parser.add_argument("--loop-timeout-s", type=float, default=180.0)
    parser.add_argument("--tests-timeout-s", type=float, default=240.0)
    parser.add_argument("--threads", type=int, default=0, help="torch threads on a CPU (0: torch's default)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "gpu_check.json"))
    parser.add_argument("--model-dir", default="", help="internal: the ranks of --ranks train on this model")
    args = parser.parse_args(argv)
    if args.smoke:
        args.new_tokens, args.batch, args.micro_batch, args.prompt_tokens, args.response_tokens = 4, 2, 1, 8, 4
        args.ranks, args.shape = 1, args.shape or "tiny"
    args.shape = args.shape or ("qwen3-4b" if cuda else "tiny")
    return args


def decode_and_train(result: dict, args: argparse.Namespace, device: str, work: Path, out: Path,
                     phases: set[str]) -> None:
    model_dir = work / args.shape
    result["parameters"] = build_model(args.shape, model_dir, resolve_model_dir(None))
    print(f"{args.shape}: {result['parameters'] / 1e9:.3f} B parameters, random, in {model_dir}", flush=True)
    if "decode" in phases:
        reset_peak(device)
        run_phase(result, "decode", out, lambda: asyncio.run(decode(model_dir, args.new_tokens)))
        result["decode_peak_memory_gb"] = round(peak_memory_gb(device), 2)
    if "train" in phases:
        run_phase(result, "train", out, lambda: with_mfu(sharded_train(model_dir, args, device, work),
                                                         result["peak_tflops"]))


def with_mfu(rows: list[dict], peak_tflops: float) -> list[dict]:
    """Each step's model FLOP/s as a percentage of the measured matmul peak (a lower bound of the MFU:
    attention is not counted)."""
    return [{**row, "mfu_percent": round(100 * row["model_tflops_per_s"] / peak_tflops, 1)} for row in rows]


def sharded_train(model_dir: Path, args: argparse.Namespace, device: str, work: Path) -> list[dict]:
    if args.ranks <= 1:
        return train_steps(model_dir, args, device)
    rows_file = work / "train.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.ranks}",
               __file__, *sys.argv[1:], "--model-dir", str(model_dir), "--out", str(rows_file)]
    subprocess.run(command, check=True)
    return json.loads(rows_file.read_text())


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    if args.model_dir:  # a rank under torchrun: train, rank 0 writes its rows
        rows = train_steps(Path(args.model_dir), args, device)
        if int(os.environ.get("RANK", "0")) == 0:
            Path(args.out).write_text(json.dumps(rows))
        return
    phases = selected_phases(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    result = {"shape": args.shape, "smoke": args.smoke, "device": torch.cuda.get_device_name() if cuda else "cpu",
              "gpus": torch.cuda.device_count(), "ranks": args.ranks, "torch": torch.__version__,
              "machine": platform.processor() or platform.machine(), "cpu_threads": torch.get_num_threads(),
              "date": time.strftime("%Y-%m-%d"), "phases": phases,
              "batch": args.batch, "prompt_tokens": args.prompt_tokens, "response_tokens": args.response_tokens}
    if "train" in phases:
        result["peak_tflops"] = float(f"{peak_tflops(device):.3g}")
    work = Path(tempfile.mkdtemp(prefix="gpu-check-"))
    try:
        if {"decode", "train"} & set(phases):
            decode_and_train(result, args, device, work, out, set(phases))
        if "loop" in phases:
            run_phase(result, "loop", out, lambda: loop(work, args))
        if "tests" in phases:
            run_phase(result, "tests", out, lambda: tests(args))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["seconds"] = round(time.perf_counter() - started, 1)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(table(result))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
