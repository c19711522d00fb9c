"""What every route of the serving app reads: the engine, the store, the config, metrics.

Its own module so that the API modules (chat, Responses, Messages, completions) and the
request path can name it without importing the app that imports them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from openclaw_rl.config import ServeConfig
from openclaw_rl.engine.base import Engine
from openclaw_rl.serve.metrics import Metrics
from openclaw_rl.store import Store


@dataclass
class Server:
    engine: Engine
    tokenizer: Any
    store: Store
    config: ServeConfig
    model_name: str
    metrics: Metrics


Background = Callable[[asyncio.Event], Awaitable[None]]  # a loop run beside the app until the event is set
