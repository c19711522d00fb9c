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

Weights reach a remote server through a directory it can read (`RemoteWeights`): a
Hugging Face safetensors file for full weights, peft's adapter format for LoRA, written
by the one atomic versioned writer (engine/weight_files.py), so a server never reads a
half-written file. A version the files channel already stored is handed over where it
lies: with a separate trainer the tensors go from the trainer's disk to the server, not
disk -> memory -> disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

from openclaw_rl.engine import weight_files
from openclaw_rl.engine.base import EngineError, LoraAdapter, StoredWeights, Weights

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


class RemoteWeights:
    """The remote engines' half of publishing: a version as a directory the server can read.

    `place` writes a version held in memory under `root/full` or `root/lora` (the newest
    KEEP_VERSIONS of each stay), and returns a stored version, files-channel ones as
    they are; the engine then tells its server to load that path, under its update gate.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    async def place(self, weights: Weights | StoredWeights, policy_version: int) -> StoredWeights:
        if isinstance(weights, StoredWeights):
            return weights
        kind = "lora" if isinstance(weights, LoraAdapter) else "full"
        return await asyncio.to_thread(weight_files.write_version, self.root / kind, policy_version, weights,
                                       keep=KEEP_VERSIONS)


LINE_END = re.compile(rb"\r\n|\r|\n")


def parse_sse_line(line: str) -> dict | str | None:
    """One server-sent-events line: a JSON chunk, "[DONE]", or None (blank, comment)."""
    line = line.strip()
    if not line.startswith("data:"):
        return None
    data = line[len("data:"):].strip()
    if data == "[DONE]":
        return data
    try:
        return json.loads(data)
    except json.JSONDecodeError as error:
        raise EngineError(f"the engine server sent a malformed stream chunk ({error}): {data[:200]!r}") from error


async def sse_lines(pieces: AsyncIterator[bytes]) -> AsyncIterator[str]:
    """The lines of a server-sent-events byte stream, split where the SSE format ends a
    line (LF, CRLF, CR) and nowhere else.

    httpx's `aiter_lines` splits like `str.splitlines`, at U+2028, U+0085, \\x1c and
    the like as well; a server writes those raw inside JSON strings, so a model that
    generates one (random LoRA weights did, under vLLM) cut a chunk in two.
    """
    buffer = b""
    async for piece in pieces:
        buffer += piece
        held = b"\r" if buffer.endswith(b"\r") else b""  # it may be the first half of a CRLF
        *lines, buffer = LINE_END.split(buffer[:len(buffer) - len(held)])
        buffer += held
        for line in lines:
            yield line.decode("utf-8")
    if buffer:
        yield buffer.decode("utf-8")


async def sse_chunks(response) -> AsyncIterator[dict]:
    """The JSON chunks of a streamed HTTP response, up to "[DONE]"."""
    async for line in sse_lines(response.aiter_bytes()):
        chunk = parse_sse_line(line)
        if chunk == "[DONE]":
            return
        if chunk is not None:
            yield chunk
