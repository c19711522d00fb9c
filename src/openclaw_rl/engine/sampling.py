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

    On a CPU the nucleus is found among the top `_NUCLEUS_SEARCH` tokens first (topk, not a
    sort of the whole vocabulary: ~10x cheaper at 49k tokens), and rows whose nucleus is
    wider than that fall back to the full sort; deciding that reads a value, which on an
    accelerator would wait for the device, so there the whole vocabulary is sorted (cheap
    on a GPU). Either way the kept set is the same.
    """
    vocab = logprobs.shape[-1]
    if logprobs.device.type == "cpu" and vocab > _NUCLEUS_SEARCH:
        top_lp, top_ids = torch.topk(logprobs, _NUCLEUS_SEARCH, dim=-1)  # (R, k), descending
        if bool((top_lp.exp().sum(-1) < top_p).any()):  # a nucleus does not end inside the top k
            top_lp, top_ids = torch.sort(logprobs, dim=-1, descending=True)
    else:
        top_lp, top_ids = torch.sort(logprobs, dim=-1, descending=True)
    probs = top_lp.exp()
    mass_before = torch.cumsum(probs, dim=-1) - probs  # mass of strictly better tokens
    keep_sorted = mass_before < top_p[:, None]
    keep_sorted[:, 0] = True  # the best token always survives
    keep = torch.zeros_like(logprobs, dtype=torch.bool).scatter(-1, top_ids, keep_sorted)
    kept = logprobs.masked_fill(~keep, float("-inf"))
    return torch.log_softmax(kept, dim=-1)


def sample_tokens(logprobs: torch.Tensor, generators: list[torch.Generator | None]) -> torch.Tensor:
    """One token per row: argmax where the row's generator is None (greedy), else a draw
    from exp(logprobs), for the whole batch at once and without waiting for the device.

    Each drawn row takes one uniform number from its own generator, a host generator (so
    a seeded request gives the same tokens whatever else shares its batch, on any
    device), and the numbers go to the device in one copy; the draw is then the inverse of
    each row's cumulative distribution (`searchsorted`), one batched call. With u in
    (0, 1] the point u * total lands on a token of positive probability: a token cut by
    top-p (probability 0) adds nothing to the cumulative sum, so it is never the first
    index to reach the point.
    """
    best = logprobs.argmax(dim=-1)  # (B,)
    if all(generator is None for generator in generators):
        return best
    device = logprobs.device
    u = torch.cat([torch.ones(1) if g is None else torch.rand(1, generator=g) for g in generators]).to(device)
    cdf = logprobs.exp().cumsum(dim=-1)  # (B, V), float32
    point = (1.0 - u) * cdf[:, -1]  # in (0, total]
    drawn = torch.searchsorted(cdf, point[:, None]).squeeze(-1).clamp_(max=logprobs.shape[-1] - 1)
    drawn_rows = torch.tensor([g is not None for g in generators], device=device)
    return torch.where(drawn_rows, drawn, best)


def top_alternatives(logprobs: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The n most likely tokens per row: (ids (B, n), log-probs (B, n))."""
    values, ids = torch.topk(logprobs, k=n, dim=-1)
    return ids, values
