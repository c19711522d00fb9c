"""The online loop, on one screen.

    client --chat--> serve --turn--> store --(turn, next state)--> judge --sample--> store
                       ^                                                              |
                       +---- engine.load_weights <---- trainer <---- claim samples ---+

`serve` runs all three in one process: the HTTP app answers, the judge worker and the
trainer loop run beside it as background tasks and talk to it only through the store
and the engine's weights hand-off. `openclaw-rl judge` and `openclaw-rl train` run the
same loops as their own processes against the same store.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import uvicorn

from openclaw_rl.config import JudgeConfig, ServeConfig
from openclaw_rl.engine.loading import resolve_model_dir
from openclaw_rl.engine.local import LocalEngine
from openclaw_rl.judge.worker import Judge, JudgeWorker
from openclaw_rl.serve.app import Background, Server, create_app
from openclaw_rl.serve.metrics import Metrics
from openclaw_rl.store import Store

log = logging.getLogger(__name__)


def build_server(config: ServeConfig) -> Server:
    model_dir = resolve_model_dir(config.model or None)
    engine = LocalEngine(model_dir, threads=config.threads or None, max_batch_size=config.max_batch_size)
    store = Store(Path(config.data_dir))
    return Server(engine=engine, tokenizer=engine.tokenizer, store=store, config=config,
                  model_name=engine.model_name, metrics=Metrics())


def build_judge(config: JudgeConfig, model_dir: Path, policy_engine: LocalEngine) -> Judge | None:
    """The judge the config names; `policy_engine` serves `--local-weights current`."""
    from openclaw_rl.judge.backends import LocalChatBackend, OpenAIChatBackend
    from openclaw_rl.judge.worker import EmbeddingJudge, LLMJudge

    if config.judge == "off":
        return None
    if config.judge == "embedding":
        return EmbeddingJudge()
    if config.judge == "openai":
        backend = OpenAIChatBackend(config.openai_base_url, config.openai_model, config.openai_api_key_env,
                                    config.call_timeout_s)
        return LLMJudge(backend, config, count_tokens=lambda text: len(text) // 4)
    engine = policy_engine
    if config.local_weights == "initial":  # a frozen copy, as in the paper, on one thread of its own
        engine = LocalEngine(model_dir, threads=1, max_batch_size=8)
    tokenizer = engine.tokenizer
    return LLMJudge(LocalChatBackend(engine, tokenizer, name=f"local:{config.local_weights}"), config,
                    count_tokens=lambda text: len(tokenizer.encode(text)))


def judge_loop(server: Server, config: JudgeConfig, method: str) -> Background | None:
    judge = build_judge(config, server.engine.model_dir, server.engine)
    if judge is None:
        return None
    worker = JudgeWorker(server.store, judge, config, method, teacher_engine=server.engine,
                         tokenizer=server.tokenizer)
    log.info("judge: %s (m = %d votes), samples for method %s", judge.name, config.votes, method)
    return worker.run


def serve(config: ServeConfig, judge: JudgeConfig, method: str = "combined") -> None:
    server = build_server(config)
    loops = [loop for loop in (judge_loop(server, judge, method),) if loop is not None]
    app = create_app(server, loops)

    @app.on_event("shutdown")
    async def _close() -> None:
        await server.engine.aclose()
        server.store.close()

    log.info("serving %s (policy version %d) on http://%s:%d, data in %s", server.model_name,
             server.engine.policy_version, config.host, config.port, config.data_dir)
    uvicorn.run(app, host=config.host, port=config.port, log_level="warning", timeout_graceful_shutdown=10)


def judge_process(data_dir: str, model: str, config: JudgeConfig, method: str, once: bool = False) -> int:
    """`openclaw-rl judge`: the worker as its own process against an existing store."""
    store = Store(Path(data_dir))
    model_dir = resolve_model_dir(model or None)
    engine = LocalEngine(model_dir)
    judge = build_judge(config, model_dir, engine)
    if judge is None:
        raise SystemExit("--judge off: nothing to run")
    worker = JudgeWorker(store, judge, config, method, teacher_engine=engine, tokenizer=engine.tokenizer)

    async def main() -> int:
        try:
            if once:
                return await worker.drain()
            await worker.run(asyncio.Event())
            return worker.judged
        finally:
            await engine.aclose()

    return asyncio.run(main())
