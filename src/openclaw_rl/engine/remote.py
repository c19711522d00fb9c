"""What every HTTP engine (vLLM, SGLang) shares: the update gate and weights on disk.

The update gate gives a remote server the local engine's guarantee: every response
comes from exactly one policy version, and no request is refused during an update.

    request:  wait while an update runs -> count in flight -> stream -> count out
    update:   hold new requests -> wait for those in flight -> pause, load, resume -> release
              (`exclusive()`; vLLM's scoring uses it too, see engine/vllm.py)

Held requests are not refused: they wait in asyncio and start on the new version.
Waiting for the requests in flight (rather than pausing them mid-generation, which
vLLM's `/pause?mode=keep` could do) is what makes the version of each response true:
no response is half old weights and half new.

Weights reach a remote server through a directory it can read: a Hugging Face
safetensors file for full weights, peft's adapter format for LoRA. Each version is
written to a fresh directory under a temporary name and renamed into place, so a server
never reads a half-written file; older directories are pruned.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from openclaw_rl.engine.base import LoraAdapter

KEEP_VERSIONS = 2  # the one being served and the one being loaded


class UpdateGate:
    """New requests wait while an update runs; an update waits for requests in flight.

    Bound to the event loop it is first used on: `rebind()` makes a fresh one for a new
    loop (the CLI loads resumed weights with `asyncio.run` before uvicorn's loop starts).
    """

    def __init__(self) -> None:
        self._cond = asyncio.Condition()
        self.in_flight = 0
        self.held = 0
        self.updating = False

    @contextlib.asynccontextmanager
    async def request(self) -> AsyncIterator[None]:
        async with self._cond:
            if self.updating:
                self.held += 1
                try:
                    await self._cond.wait_for(lambda: not self.updating)
                finally:
                    self.held -= 1
            self.in_flight += 1
        try:
            yield
        finally:
            async with self._cond:
                self.in_flight -= 1
                self._cond.notify_all()

    @contextlib.asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        """Alone on the server: a weight update, or work that must not share a batch."""
        async with self._cond:
            await self._cond.wait_for(lambda: not self.updating)  # one update at a time
            self.updating = True
            try:
                await self._cond.wait_for(lambda: self.in_flight == 0)
            except BaseException:
                self.updating = False
                self._cond.notify_all()
                raise
        try:
            yield
        finally:
            async with self._cond:
                self.updating = False
                self._cond.notify_all()


def write_full_weights(root: Path, state_dict: dict[str, torch.Tensor], version: int) -> Path:
    """`root/vNNNNNN/model.safetensors`, complete before the directory appears."""
    tensors, seen = {}, set()
    for name, t in state_dict.items():
        t = t.detach().to("cpu").contiguous()
        if t.data_ptr() in seen:  # a tied weight (lm_head = embedding): safetensors wants its own copy
            t = t.clone()
        seen.add(t.data_ptr())
        tensors[name] = t
    return _write_version(root, version, lambda d: save_file(tensors, str(d / "model.safetensors"),
                                                             metadata={"format": "pt"}))


def write_lora_adapter(root: Path, adapter: LoraAdapter, version: int) -> Path:
    """`root/vNNNNNN/` holding `adapter_model.safetensors` and `adapter_config.json` (peft's format)."""
    tensors = {name: t.detach().to("cpu").contiguous() for name, t in adapter.state_dict.items()}

    def write(directory: Path) -> None:
        save_file(tensors, str(directory / "adapter_model.safetensors"), metadata={"format": "pt"})
        (directory / "adapter_config.json").write_text(json.dumps(adapter.config, indent=2))

    return _write_version(root, version, write)


def _write_version(root: Path, version: int, write: Any) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"v{version:06d}"
    tmp = root / f".v{version:06d}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    write(tmp)
    shutil.rmtree(target, ignore_errors=True)  # a leftover of an earlier run with the same version
    os.replace(tmp, target)
    for old in sorted(p for p in root.glob("v*") if p.is_dir())[:-KEEP_VERSIONS]:
        shutil.rmtree(old, ignore_errors=True)
    return target


def parse_sse_line(line: str) -> dict | str | None:
    """One server-sent-events line: a JSON chunk, "[DONE]", or None (blank, comment)."""
    line = line.strip()
    if not line.startswith("data:"):
        return None
    data = line[len("data:"):].strip()
    if data == "[DONE]":
        return data
    return json.loads(data)


async def sse_chunks(response) -> AsyncIterator[dict]:
    """The JSON chunks of a streamed HTTP response, up to "[DONE]"."""
    async for line in response.aiter_lines():
        chunk = parse_sse_line(line)
        if chunk == "[DONE]":
            return
        if chunk is not None:
            yield chunk
