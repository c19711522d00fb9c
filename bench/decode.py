"""Decode speed of the local engine beside llama.cpp on the same weights (a benchmark, not a test).

    .venv/bin/python bench/decode.py [--model PATH] [--new-tokens 64] [--repeats 3]

Needs `.venv-llamacpp` (make llamacpp-venv: llama-cpp-python built from its sdist, once,
12-18 min here). The model the engine loads (safetensors, float32) is converted to an f32
GGUF with the converter that sdist vendors (convert_hf_to_gguf.py and its gguf-py), once,
into the cache dir; both engines then get the same prompts as the same token ids.

- Decode: B requests of distinct prompts (48 tokens each), greedy, `--new-tokens` new
  tokens each, batches 1, 4 and 8; generated tokens / wall second, prefill included,
  the median of `--repeats` after a warm-up. Ours goes through `LocalEngine.stream`
  (continuous batching, sampling, per-token log-probs: what serving does); llama.cpp
  through its low-level decode API, one llama_batch of B sequences per step
  (bench/decode_llamacpp.py).
- Prefill: tokens/s of one 512-token prompt (ours: a 1-token request on it).
- The engine as it was before the fused decoder (transformers' forward, `decoder="hf"`)
  is measured too, for the before/after.

Both run on 2 threads, one engine at a time. Writes bench/results/decode.json:
{"local": {"1": tok_s, "4": ..., "8": ...}, "llamacpp": {...}, "ratio": {...}, ...}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from openclaw_rl.chat import render_prompt  # noqa: E402
from openclaw_rl.engine.loading import cache_dir, resolve_model_dir  # noqa: E402
from openclaw_rl.engine.local import LocalEngine  # noqa: E402
from openclaw_rl.types import SamplingParams, TokenStep  # noqa: E402

LLAMACPP_VENV = ROOT / ".venv-llamacpp"
PROMPTS = [f"Write a long, detailed story about a robot named Unit {i} who learns to paint." for i in range(8)]


async def _count(engine: LocalEngine, prompt: list[int], params: SamplingParams) -> int:
    return sum([isinstance(e, TokenStep) async for e in engine.stream(prompt, params)])


async def _decode(engine: LocalEngine, prompts: list[list[int]], batch: int, new_tokens: int, repeats: int) -> list[float]:
    params = SamplingParams(max_new_tokens=new_tokens, temperature=0.0)
    await asyncio.gather(*(_count(engine, p, SamplingParams(max_new_tokens=4, temperature=0.0))
                           for p in prompts[:batch]))  # warm-up
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        counts = await asyncio.gather(*(_count(engine, p, params) for p in prompts[:batch]))
        rates.append(sum(counts) / (time.perf_counter() - started))
    return rates


async def _prefill(engine: LocalEngine, prompt: list[int], repeats: int) -> float:
    one = SamplingParams(max_new_tokens=1, temperature=0.0)
    await _count(engine, prompt[:64], one)
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        await _count(engine, prompt, one)
        rates.append(len(prompt) / (time.perf_counter() - started))
    return statistics.median(rates)


def measure_local(model_dir: Path, decoder: str, spec: dict, threads: int) -> dict:
    # no prefix cache: the same prompts repeat, and every prefill must be computed as llama.cpp computes it
    engine = LocalEngine(model_dir, threads=threads, decoder=decoder, prefix_cache_mb=0)

    async def run() -> dict:
        out: dict = {"decode": {}, "runs": {}}
        for batch in spec["batches"]:
            rates = await _decode(engine, spec["prompts"], batch, spec["new_tokens"], spec["repeats"])
            out["decode"][str(batch)] = round(statistics.median(rates), 1)
            out["runs"][str(batch)] = [round(r, 1) for r in rates]
            print(f"  {decoder} batch {batch}: {out['decode'][str(batch)]} tok/s", flush=True)
        out["prefill_tokens_per_s"] = round(await _prefill(engine, spec["long_prompt"], spec["repeats"]), 1)
        return out

    try:
        result = asyncio.run(run())
        result["decoder"] = engine.decoder
        result["kernels"] = bool(getattr(engine._decoder, "kernels", False))
        return result
    finally:
        asyncio.run(engine.aclose())


def _llamacpp_python() -> Path:
    python = LLAMACPP_VENV / "bin" / "python"
    if not python.is_file():
        raise SystemExit(f"{python} is missing: run `make llamacpp-venv` first (builds llama-cpp-python once)")
    return python


def _converter(version: str) -> Path:
    """The GGUF converter vendored in llama-cpp-python's sdist of `version`, fetched once."""
    root = cache_dir() / "bench" / f"llama-cpp-python-{version}"
    script = root / "vendor" / "llama.cpp" / "convert_hf_to_gguf.py"
    if script.is_file():
        return script
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={version}", "-d", tmp], check=True)
        sdist = next(Path(tmp).glob("llama_cpp_python-*.tar.gz"))
        prefix = f"{sdist.name[: -len('.tar.gz')]}/vendor/llama.cpp/"
        wanted = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(prefix)
                       and m.name[len(prefix):].startswith(wanted)]
            tar.extractall(tmp, members=members, filter="data")
        staged = root.with_name(root.name + ".tmp")
        shutil.rmtree(staged, ignore_errors=True)
        shutil.copytree(Path(tmp) / sdist.name[: -len(".tar.gz")], staged)
        staged.rename(root)
    return script


def gguf_of(model_dir: Path, version: str) -> Path:
    target = cache_dir() / "bench" / f"{model_dir.name}-f32.gguf"
    if target.is_file():
        return target
    script = _converter(version)
    partial = target.with_suffix(".gguf.tmp")
    env = {**os.environ, "PYTHONPATH": str(script.parent / "gguf-py")}
    print(f"converting {model_dir} to {target} (f32, once)", flush=True)
    done = subprocess.run([sys.executable, str(script), str(model_dir), "--outtype", "f32", "--outfile", str(partial)],
                          env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"the GGUF converter failed:\n{done.stderr[-3000:]}")
    partial.rename(target)
    return target


def measure_llamacpp(model_dir: Path, spec: dict, threads: int) -> dict:
    python = _llamacpp_python()
    version = subprocess.run([str(python), "-c", "import llama_cpp; print(llama_cpp.__version__)"],
                             check=True, capture_output=True, text=True).stdout.strip()
    gguf = gguf_of(model_dir, version)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        done = subprocess.run([str(python), str(ROOT / "bench" / "decode_llamacpp.py"), "--gguf", str(gguf),
                               "--requests", f.name, "--threads", str(threads)],
                              check=True, capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["version"] = version
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="", help="model directory (default: the bundled model)")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--no-before", action="store_true", help="skip the transformers-forward engine")
    args = parser.parse_args()
    model_dir = resolve_model_dir(args.model or None)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = [render_prompt(tokenizer, [{"role": "user", "content": p}], None, None) for p in PROMPTS]
    long_prompt = tokenizer("The history of painting spans many centuries and styles. " * 80)["input_ids"][:512]
    spec = {"prompts": prompts, "long_prompt": long_prompt, "batches": [1, 4, 8], "new_tokens": args.new_tokens,
            "repeats": args.repeats}
    results: dict = {"model": model_dir.name, "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                     "threads": args.threads, "new_tokens": args.new_tokens, "repeats": args.repeats,
                     "load_average_at_start": round(os.getloadavg()[0], 2)}
    print("llama.cpp ...", flush=True)
    llama = measure_llamacpp(model_dir, spec, args.threads)
    print(f"  llama.cpp {llama['version']}: {llama['decode']} tok/s", flush=True)
    print("local engine ...", flush=True)
    local = measure_local(model_dir, "auto", spec, args.threads)
    results["local"] = local["decode"]
    results["llamacpp"] = llama["decode"]
    results["ratio"] = {b: round(local["decode"][b] / llama["decode"][b], 2) for b in local["decode"]}
    results["prefill_tokens_per_s"] = {"local": local["prefill_tokens_per_s"], "llamacpp": llama["prefill_tokens_per_s"],
                                       "prompt_tokens": len(long_prompt)}
    results["runs"] = {"local": local["runs"], "llamacpp": llama["runs"]}
    results["local_decoder"] = {"decoder": local["decoder"], "kernels": local["kernels"]}
    results["llamacpp_version"] = llama["version"]
    if not args.no_before:
        print("local engine, transformers' forward (before) ...", flush=True)
        before = measure_local(model_dir, "hf", spec, args.threads)
        results["before"] = {"local": before["decode"], "prefill_tokens_per_s": before["prefill_tokens_per_s"],
                             "ratio": {b: round(before["decode"][b] / llama["decode"][b], 2) for b in before["decode"]}}
    results["load_average_at_end"] = round(os.getloadavg()[0], 2)
    out = ROOT / "bench" / "results" / "decode.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({k: results[k] for k in ("local", "llamacpp", "ratio", "prefill_tokens_per_s")}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
