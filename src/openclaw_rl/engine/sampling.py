"""Turning logits into sampled tokens, with log-probs of the distribution sampled from.

Pure functions of tensors, shared by the decode loop (behaviour log-probs) and by
scoring (teacher and trainer log-probs), so every part of the loop measures a token
under the same transformation: logits / T, then top-p truncation and renormalisation.
Greedy rows (T = 0) record the untempered, untruncated model distribution (T = 1).
Nothing is written in place, so the trainer's gradients flow through the truncation.
"""

from __future__ import annotations

import torch


def sampling_logprobs(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Log-probs of the distribution actually sampled from.

    logits: (B, V) float; temperature, top_p: (B,) on any device. A row with temperature
    <= 0 is greedy: its log-probs are those of the plain model (T = 1, no truncation).
    Tokens cut by top-p get -inf.

    Every tensor computed with the logits is moved to, or made on, the logits' device and
    in their (float32) dtype: a caller may pass its parameters from the host (scoring does),
    and on CUDA a host tensor beside device logits is an error. Which rows need top-p is
    decided where `top_p` lives, so host parameters cost no device sync.
    """
    logits = logits.float()
    greedy = temperature <= 0
    needs_top_p = (top_p < 1.0) & ~greedy  # on top_p's device: a host decision when the caller's are on the host
    temp = torch.where(greedy, torch.ones_like(temperature), temperature).to(logits.device, logits.dtype)
    logprobs = torch.log_softmax(logits / temp[:, None], dim=-1)  # (B, V)
    if bool(needs_top_p.any()):
        rows = needs_top_p.nonzero(as_tuple=True)[0].to(logits.device)
        kept_mass = top_p.to(logits.device, logits.dtype)[rows]
        # out of place: log_softmax's backward reads its output
        logprobs = logprobs.index_put((rows,), _top_p_renormalise(logprobs[rows], kept_mass))
    return logprobs


_NUCLEUS_SEARCH = 1024  # look for the nucleus among this many best tokens first (a partial sort)


def _top_p_renormalise(logprobs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep the smallest set of most likely tokens whose mass reaches top_p; renormalise.

    The nucleus is found among the top `_NUCLEUS_SEARCH` tokens (topk, not a sort of the
    whole vocabulary: ~10x cheaper at 49k tokens); rows whose nucleus is wider than that
    fall back to the full sort. Either way the kept set is the same.
    """
    vocab = logprobs.shape[-1]
    k = min(vocab, _NUCLEUS_SEARCH)
    top_lp, top_ids = torch.topk(logprobs, k, dim=-1)  # (R, k), descending
    wide = top_lp.exp().sum(-1) < top_p  # the nucleus does not end inside the top k
    if k < vocab and bool(wide.any()):
        top_lp, top_ids = torch.sort(logprobs, dim=-1, descending=True)
    probs = top_lp.exp()
    mass_before = torch.cumsum(probs, dim=-1) - probs  # mass of strictly better tokens
    keep_sorted = mass_before < top_p[:, None]
    keep_sorted[:, 0] = True  # the best token always survives
    keep = torch.zeros_like(logprobs, dtype=torch.bool).scatter(-1, top_ids, keep_sorted)
    kept = logprobs.masked_fill(~keep, float("-inf"))
    return torch.log_softmax(kept, dim=-1)


def sample_tokens(
    logprobs: torch.Tensor,
    greedy: torch.Tensor,
    generators: list[torch.Generator | None],
) -> torch.Tensor:
    """One token per row: argmax for greedy rows, else a draw from exp(logprobs).

    Each row draws from its own generator so a seeded request gives the same tokens
    whatever else shares its batch.
    """
    tokens = logprobs.argmax(dim=-1)  # (B,)
    probs = logprobs.exp()
    for row in (~greedy).nonzero(as_tuple=True)[0].tolist():
        tokens[row] = torch.multinomial(probs[row], 1, generator=generators[row])[0]
    return tokens


def top_alternatives(logprobs: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The n most likely tokens per row: (ids (B, n), log-probs (B, n))."""
    values, ids = torch.topk(logprobs, k=n, dim=-1)
    return ids, values
