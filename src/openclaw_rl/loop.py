"""The online loop, on one screen.

    client --chat--> serve --turn--> store --(turn, next state)--> judge --verdict--> store
                       ^                                                              |
                       +---- weights channel <---- trainer <---- samples -------------+

Today the loop runs the serving side: the engine samples, the app records every turn
and pairs it with its next state in the store. Judge and trainer attach to the same
store (in this process or their own) and hand weights back through the engine.
"""

from __future__ import annotations

import logging
from pathlib import Path

import uvicorn

from openclaw_rl.config import ServeConfig
from openclaw_rl.engine.loading import resolve_model_dir
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.serve.app import Server, create_app
from openclaw_rl.serve.metrics import Metrics
from openclaw_rl.store import Store

log = logging.getLogger(__name__)


def build_server(config: ServeConfig) -> Server:
    model_dir = resolve_model_dir(config.model or None)
    engine = LocalEngine(model_dir, threads=config.threads or None, max_batch_size=config.max_batch_size)
    store = Store(Path(config.data_dir))
    return Server(engine=engine, tokenizer=engine.tokenizer, store=store, config=config,
                  model_name=engine.model_name, metrics=Metrics())


def serve(config: ServeConfig) -> None:
    server = build_server(config)
    app = create_app(server)

    @app.on_event("shutdown")
    async def _close() -> None:
        await server.engine.aclose()
        server.store.close()

    log.info("serving %s (policy version %d) on http://%s:%d, data in %s", server.model_name,
             server.engine.policy_version, config.host, config.port, config.data_dir)
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning", timeout_graceful_shutdown=10)
