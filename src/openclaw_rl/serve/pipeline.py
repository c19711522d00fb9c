"""The request path every API shares: a `TurnSpec` in, `n` turns in progress out.

    cheap limits -> the user's experience block -> render the prompt (off the event loop) -> context check
    -> session and the turn it continues -> record that turn's next state
    -> start n engine streams -> (the API formats deltas) -> commit each turn

With `--lesson-samples K` > 1 and a block whose lessons can be checked on an answer
(experience/checks.py), one sampled response is K streams decoded to their end; the one
that keeps the lessons best (with consensus on the final number: `checks.pick`; with
`--lesson-plain on`, one more answer decoded without the block is a candidate too) is replayed
to the API as if it had just been decoded, and committed with how it was picked
(`sampling.selected`); the others are dropped. With `--lesson-rewrites R` > 0, a picked
answer (or the one answer of a greedy request or of K = 1) that does not keep lessons asking
for less is rewritten R times to them (once when greedy; `rewriting.to_rewrite`: to the ones it
breaks by itself, when another lesson asks for more), and a rewrite that keeps them all better
is served instead, stored as the answer to the served prompt with log-probs re-scored there.
A block whose lessons ask for the mistake or for what was right carries what was checked of the
equations in the user's messages (`_with_checked_arithmetic`, experience/arithmetic.py).

Each API module (chat completions, Responses, Anthropic Messages, completions) only
translates its request into a `TurnSpec` and formats the events of `Opened`; pairing,
recording and limits live here once. Checks that cost nothing run before any that cost
something: a 4 MB prompt is refused by its length in characters before it is tokenized,
and tokenizing runs in a worker thread so one large prompt never stalls the loop.

(Over 400 lines: the one request path every API shares, from limits to commit; checked
sampling and rewriting start, decode and replay streams through the same starters
(`_started`, `_to_the_end`, `_rendered`), so apart they would import each other.)
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from dataclasses import dataclass, replace
from typing import AsyncIterator

from fastapi.concurrency import run_in_threadpool

from openclaw_rl.chat import content_text, render_prompt, user_text
from openclaw_rl.engine.base import (ContextLengthError, EngineError, Finished, Started, TokenIdError, scoring_adapter,
                                     weights_in_use)
from openclaw_rl.experience import place
from openclaw_rl.experience.arithmetic import note_for
from openclaw_rl.experience.checks import Check, checks, pick
from openclaw_rl.experience.rewriting import choose_rewrite, rewrite_request, to_rewrite
from openclaw_rl.serve.completion import ServedPrompt, TurnInProgress, TurnSpec
from openclaw_rl.serve.experience_block import experience_block, experience_on
from openclaw_rl.serve.schema import ApiError
from openclaw_rl.serve.server import Server
from openclaw_rl.serve.sessions import SessionRef, next_state_of, private_session_id, resolve_session, turn_to_pair
from openclaw_rl.store import StoreError
from openclaw_rl.types import Message, NextState, TokenStep

log = logging.getLogger(__name__)

@functools.lru_cache(maxsize=8)
def _longest_token_chars(tokenizer) -> int:
    """No token decodes to more characters than its vocabulary string has (byte-level and
    SentencePiece vocabularies spell each byte or character at least once)."""
    return max((len(token) for token in tokenizer.get_vocab()), default=1)


def _prompt_chars(spec: TurnSpec) -> int:
    return sum(len(content_text(m)) for m in spec.messages)


async def served_prompt(server: Server, spec: TurnSpec) -> ServedPrompt:
    """The ids the engine is given: the client's token ids as they are, or its messages with
    the user's experience block (serve/experience_block.py) rendered by the chat template."""
    context = server.engine.max_context
    if spec.prompt_ids is not None:  # a raw completion: the client rendered it; no block
        prompt = ServedPrompt(spec.prompt_ids)
    else:
        # A prompt of C characters has at least C / longest-token tokens: refuse it unread.
        chars, longest = _prompt_chars(spec), _longest_token_chars(server.tokenizer)
        if chars > context * longest:
            raise ApiError(400, f"the prompt has {chars} characters, more than the model's context of {context} "
                           "tokens can hold; shorten the conversation", param="messages",
                           code="context_length_exceeded")
        block, version, lessons = "", None, ()
        if experience_on(server.config, spec.caller):  # the store read (and a thread hop) only when it can serve
            block, version, lessons = await run_in_threadpool(experience_block, server.store, server.tokenizer,
                                                              server.config, spec.caller)
            block = _with_checked_arithmetic(block, lessons, spec)
        placement = server.config.experience_placement
        prompt = ServedPrompt(await _rendered(server, spec, place(spec.messages, block, placement)), block, version,
                              placement, lessons)
        if block and len(prompt.ids) + spec.params.max_new_tokens > context:
            prompt = await _within_context(server, spec, prompt)
    if not prompt.ids:
        raise ApiError(400, "the prompt is empty once tokenized; send some text or token ids", param="prompt")
    if len(prompt.ids) >= context:
        raise ApiError(400, f"the prompt is {len(prompt.ids)} tokens but the model's context is {context} tokens; "
                       "shorten the conversation", param="messages", code="context_length_exceeded")
    return prompt


def _with_checked_arithmetic(block: str, lessons: tuple[str, ...], spec: TurnSpec) -> str:
    """The block, and when a lesson asks for the mistake or for what was right and the user's
    messages state equations, what was checked of them (`arithmetic.note_for`): the block of this
    request, recorded with its turn."""
    note = note_for({c.kind for c in _block_checks(lessons)}, user_text(spec.messages)) if block else ""
    return f"{block} {note}" if note else block


async def _rendered(server: Server, spec: TurnSpec, messages: list[Message]) -> list[int]:
    try:
        return await run_in_threadpool(render_prompt, server.tokenizer, messages, spec.tools, spec.tool_choice)
    except Exception as error:  # a template that rejects this conversation
        raise ApiError(400, f"messages cannot be rendered with the model's chat template: {error}",
                       param="messages") from error


async def _within_context(server: Server, spec: TurnSpec, prompt: ServedPrompt) -> ServedPrompt:
    """`prompt` if its experience block costs the request nothing, else the prompt without it.

    Near the end of the context the block would push a prompt that fits over it, or leave
    the response less room than it has without the block; the client's conversation comes
    first, so the block is dropped (and said in the log), never the request refused."""
    context = server.engine.max_context
    plain = await _rendered(server, spec, spec.messages)
    room = min(spec.params.max_new_tokens, context - len(plain))  # what the response may use without the block
    if len(prompt.ids) + room <= context:
        return prompt
    log.info("experience block of %r (v%s, %d tokens) left out: the prompt is %d tokens of a %d-token context "
             "and asks for up to %d new ones", spec.caller.name, prompt.experience_version,
             len(prompt.ids) - len(plain), len(plain), context, spec.params.max_new_tokens)
    return ServedPrompt(plain)


@dataclass
class Opened:
    """The turns of one request, started: the API streams or awaits them."""

    server: Server
    spec: TurnSpec
    ref: SessionRef
    turns: list[TurnInProgress]

    @property
    def served_version(self) -> int:
        """The version of the weights that answered, as X-Policy-Version and the body's `policy_version`
        name it: the caller's personal adapter version when their adapter answered (docs/personal-adapters.md),
        else the shared model's. The stored turn keeps both (`policy_version`, `sampling.adapter_version`)."""
        started = self.turns[0].started
        return started.policy_version if started.adapter_version is None else started.adapter_version

    @property
    def headers(self) -> dict[str, str]:
        started = self.turns[0].started
        headers = {"X-Policy-Version": str(self.served_version), "X-Session-Id": self.ref.shown_id}
        if started.adapter_version is not None:  # served under the caller's personal adapter
            headers["X-Adapter-Version"] = str(started.adapter_version)
        return headers

    def usage(self) -> dict[str, int]:
        """OpenAI usage over every choice: the prompt once, the completions summed."""
        prompt = len(self.turns[0].prompt_ids)
        completion = sum(len(turn.generation.token_ids) for turn in self.turns)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    async def run(self) -> None:
        """Decode every choice to its end and commit it (non-streaming)."""
        try:
            await _to_the_end(self.server, (turn.run() for turn in self.turns))
        finally:
            await self.aclose()
        await self._finish()

    async def events(self) -> AsyncIterator[tuple[int, str | None, list[TokenStep]]]:
        """(choice, text delta, its steps) as they decode; (choice, None, []) once that
        choice is committed. Raises TimeoutError or EngineError for the API to report."""
        if len(self.turns) == 1:  # the common case: no task or queue between the engine and the client
            source = self._one()
        else:
            source = self._merged()
        try:
            async with asyncio.timeout(self.server.config.request_timeout_s):
                async for item in source:
                    yield item
            await self._finish()
        finally:
            await source.aclose()
            await self.aclose()

    async def _one(self) -> AsyncIterator[tuple[int, str | None, list[TokenStep]]]:
        turn = self.turns[0]
        async for delta, steps in turn.deltas():
            yield 0, delta, steps
        await turn.commit()
        yield 0, None, []

    async def _merged(self) -> AsyncIterator[tuple[int, str | None, list[TokenStep]]]:
        """The choices' events interleaved as they decode, each choice pumped by a task of its own."""
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(i: int, turn: TurnInProgress) -> None:
            try:
                async for delta, steps in turn.deltas():
                    await queue.put((i, delta, steps))
                await turn.commit()
                await queue.put((i, None, []))
            except BaseException as error:  # noqa: BLE001 - handed to the consumer below
                await queue.put(error)

        tasks = [asyncio.create_task(pump(i, t)) for i, t in enumerate(self.turns)]
        try:
            open_choices = len(tasks)
            while open_choices:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                if item[1] is None:
                    open_choices -= 1
                yield item
        finally:
            for task in tasks:
                task.cancel()
            # a pump reads its turn's stream until its cancellation lands; `aclose` closing that
            # stream first raised "aclose(): asynchronous generator is already running"
            await _settled(tasks)

    async def _finish(self) -> None:
        if self.spec.done:
            await run_in_threadpool(self.server.store.close_session, self.ref.id)

    async def aclose(self) -> None:
        for turn in self.turns:
            await turn.stream.aclose()


async def _settled(tasks: list[asyncio.Task]) -> None:
    """Wait until every task is done, also while this task is being cancelled (a client that
    went away: the server cancels it at every await until it ends); that cancellation is
    raised again once they are."""
    cancelled = False
    while not all(task.done() for task in tasks):
        try:
            await asyncio.wait(tasks)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError


async def open_turns(server: Server, spec: TurnSpec) -> Opened:
    """Everything before the first token: limits, prompt, session, pairing, engine admission."""
    prompt = await served_prompt(server, spec)
    prompt_ids = prompt.ids
    context = server.engine.max_context
    if spec.params.max_new_tokens > context:
        raise ApiError(400, f"max_tokens is {spec.params.max_new_tokens} but the model's context is {context} "
                       "tokens; ask for at most that many", param="max_tokens")
    params = replace(spec.params, max_new_tokens=min(spec.params.max_new_tokens, context - len(prompt_ids)),
                     cache_scope=spec.caller.name,  # a user's prefixes serve only that user's requests
                     adapter=spec.caller.name)  # their personal adapter where one is loaded (else the shared model)
    store = server.store
    ref = spec.previous or await run_in_threadpool(
        resolve_session, store, spec.messages, spec.session_header, spec.end_user, spec.caller.name)
    session = await run_in_threadpool(store.ensure_session, ref.id, ref.source, spec.caller.name)
    if not spec.caller.may_see(session.owner):  # an id another user chose first: neither confirmed nor touched
        ref = SessionRef(private_session_id(ref.id, spec.caller.name), ref.source, ref.continues, named=ref.id)
        session = await run_in_threadpool(store.ensure_session, ref.id, ref.source, spec.caller.name)
        if not spec.caller.may_see(session.owner):  # its private id too (taken on purpose): the old answer
            raise ApiError(404, f"X-Session-Id {ref.named!r} cannot be used; choose another id (a random one, such "
                           "as a UUID, never collides)", param="X-Session-Id", code="session_not_found")
    if spec.kind == "main":
        await run_in_threadpool(_record_next_state, server, ref, spec)
    group = uuid.uuid4().hex
    if found := _checkable(server, spec, prompt, params):
        return Opened(server, spec, ref, [await _checked(server, spec, ref, prompt, params, group, found)])
    return Opened(server, spec, ref, await _started(server, spec, ref, params, group,
                                                    [(prompt, choice) for choice in range(spec.n)]))


async def _started(server: Server, spec: TurnSpec, ref: SessionRef, params, group: str,
                   starts: list[tuple[ServedPrompt, int]]) -> list[TurnInProgress]:
    """One stream per (prompt, choice index) of `starts`, the i-th sampled with seed + i when the
    request has a seed, admitted together so the engine prefills them in one batch; if one cannot
    start, the others are closed and its error raised."""
    started = await asyncio.gather(*(
        _start(server, spec, ref, prompt, params if params.seed is None else replace(params, seed=params.seed + i),
               group, choice)
        for i, (prompt, choice) in enumerate(starts)), return_exceptions=True)
    turns = [t for t in started if isinstance(t, TurnInProgress)]
    if len(turns) < len(started):
        for turn in turns:
            await turn.stream.aclose()
        raise next(e for e in started if not isinstance(e, TurnInProgress))
    return turns


async def _to_the_end(server: Server, decoding) -> None:
    """Await every decode in `decoding` within request_timeout_s; a timeout or an engine error as the API's."""
    timeout = server.config.request_timeout_s
    try:
        async with asyncio.timeout(timeout):
            await asyncio.gather(*decoding)
    except TimeoutError as error:
        raise ApiError(504, f"generation took longer than request_timeout_s={timeout}", kind="server_error") from error
    except EngineError as error:
        raise ApiError(500, str(error), kind="server_error") from error


def _checkable(server: Server, spec: TurnSpec, prompt: ServedPrompt, params) -> tuple[Check, ...]:
    """The checks to pick or rewrite this request's answer by, or () to stream it as decoded: one
    main response in plain text, a block with a checkable lesson, and something to do with it:
    --lesson-samples > 1 for a sampled request, --lesson-plain on or --lesson-rewrites > 0 (a greedy
    one too)."""
    config = server.config
    nothing_to_do = ((config.lesson_samples < 2 or params.greedy) and not config.lesson_rewrites
                     and config.lesson_plain == "off")
    if (spec.n != 1 or spec.kind != "main" or params.constraint is not None or spec.tools_on
            or not prompt.experience_lessons or nothing_to_do):
        return ()
    return _block_checks(prompt.experience_lessons)


@functools.lru_cache(maxsize=1024)
def _block_checks(lessons: tuple[str, ...]) -> tuple[Check, ...]:
    """The checks of a block's lessons; cached, as a user's block changes only with their experience."""
    return tuple(checks(lessons))


async def _checked(server: Server, spec: TurnSpec, ref: SessionRef, prompt: ServedPrompt, params, group: str,
                   found: tuple[Check, ...]) -> TurnInProgress:
    """K answers decoded to their end (admitted together: one prefill batch; one when greedy) and,
    with --lesson-plain on, one more to the conversation without the block; the one that keeps the
    user's checkable lessons best (the first on a tie, so the plain answer only when it keeps them
    better), or a rewrite of it, as a turn whose stream replays it. A plain answer is stored as
    served, with the prompt it was decoded from and no block."""
    plain = ServedPrompt(await _rendered(server, spec, spec.messages)) if server.config.lesson_plain == "on" else None
    candidates = await _decoded(server, spec, ref, prompt, params, group, server.config.lesson_samples, plain)
    texts = [turn.text.finish()[0] for turn in candidates]
    said = user_text(spec.messages)  # whose numbers "use the numbers from the problem" counts
    best, kept = pick(texts, found, said)
    chosen = candidates[best]
    served, started, steps, reason = chosen.prompt, chosen.started, chosen.steps, chosen.finish_reason
    selection = {"of": len(candidates), "by": "lesson_checks", "picked": best, "scores": [round(x, 4) for x in kept],
                 "checks": sorted({c.kind + (f" {c.unit}" if c.unit else "") for c in found})}
    if plain is not None:
        selection["plain"] = len(candidates) - 1  # the index of the answer decoded without the block
    if server.config.lesson_rewrites and (asked := to_rewrite(texts, best, found, said)):
        rewritten = await _rewritten(server, spec, ref, served, chosen.params, texts[best], group, found, asked, said)
        if rewritten is not None:
            started, steps, reason, selection["rewrite"] = rewritten
    replay = TurnInProgress(server, spec, ref, served, chosen.params, started, _replayed(steps, reason), group, 0)
    replay.selection = selection
    return replay


async def _decoded(server: Server, spec: TurnSpec, ref: SessionRef, prompt: ServedPrompt, params, group: str,
                   k: int, plain: ServedPrompt | None = None) -> list[TurnInProgress]:
    """`k` answers to `prompt` decoded to their end (admitted together: one prefill batch; one
    when greedy, as k greedy answers would be k copies), then one to `plain` when given, their
    streams closed; nothing committed."""
    starts = [(prompt, 0)] * (1 if params.greedy else k) + ([(plain, 0)] if plain is not None else [])
    turns = await _started(server, spec, ref, params, group, starts)
    try:
        await _to_the_end(server, (turn.decode() for turn in turns))
    finally:
        for turn in turns:
            await turn.stream.aclose()
    return turns


async def _rewritten(server: Server, spec: TurnSpec, ref: SessionRef, prompt: ServedPrompt, params,
                     draft_text: str, group: str, found: tuple[Check, ...], asked: list[Check], said: str
                     ) -> tuple[Started, list[TokenStep], str, dict] | None:
    """The draft (sampled with `params`) rewritten to the lessons of `asked`, when one of
    --lesson-rewrites rewrites keeps them better than the draft and every lesson better as a whole
    (`rewriting.choose_rewrite`: the draft on a tie, and no rewrite that drops the draft's number):
    its `Started`, its steps with log-probs re-scored under the served prompt (what the answer's
    tokens have there, so training sees the distribution of the prompt it is stored with), how it
    ended, and what `sampling.selected.rewrite` records. None: the draft stays (no rewrite better,
    the rewrite prompt does not fit, or the weights changed before the re-score)."""
    request = [*spec.messages, {"role": "assistant", "content": draft_text},
               {"role": "user", "content": rewrite_request(asked, said)}]
    ids = await _rendered(server, spec, place(request, prompt.experience_block, prompt.experience_placement))
    if len(ids) + params.max_new_tokens > server.engine.max_context:
        return None
    rewrites = await _decoded(server, spec, ref, replace(prompt, ids=ids), params, group,
                              server.config.lesson_rewrites)
    best, totals = choose_rewrite(draft_text, [turn.text.finish()[0] for turn in rewrites], found, asked, said)
    if best is None:
        return None
    chosen = rewrites[best]
    engine, tokens = server.engine, [step.token_id for step in chosen.steps]
    try:
        score = await engine.score(prompt.ids, tokens, temperature=params.logprob_temperature,
                                   top_p=params.logprob_top_p, top_k=params.top_logprobs,
                                   **scoring_adapter(engine, params.adapter))
    except EngineError as error:
        log.warning("a rewrite could not be scored under the served prompt (%s); the draft is served", error)
        return None
    if weights_in_use(engine, params.adapter) != (chosen.started.policy_version, chosen.started.adapter_version):
        return None  # new weights since the rewrite was sampled: the log-probs would not be the sampler's
    steps = [TokenStep(token, logprob, tuple(zip(top_ids, top_logprobs))) for token, logprob, top_ids, top_logprobs
             in zip(tokens, score.logprobs, score.top_ids, score.top_logprobs)]
    started = Started(chosen.started.policy_version, len(prompt.ids), chosen.started.adapter_version)
    return started, steps, chosen.finish_reason, {"of": len(rewrites), "picked": best,
                                                   "scores": [round(x, 4) for x in totals[1:]],
                                                   "draft_score": round(totals[0], 4)}


async def _replayed(steps: list[TokenStep], reason: str) -> AsyncIterator[TokenStep | Finished]:
    """A finished stream again, after its `Started`: the same steps (a stop string ends it where it
    ended the first time), then how it ended."""
    for step in steps:
        yield step
    yield Finished(reason)


async def _start(server: Server, spec: TurnSpec, ref: SessionRef, prompt: ServedPrompt, params,
                 group: str, choice: int) -> TurnInProgress:
    stream = server.engine.stream(prompt.ids, params)
    try:
        started = await asyncio.wait_for(anext(stream), server.config.request_timeout_s)
    except ContextLengthError as error:
        await stream.aclose()
        raise ApiError(400, str(error), param="messages", code="context_length_exceeded") from error
    except TokenIdError as error:  # the request's fault, not the engine's: a 400 (engine/local.py refuses it)
        await stream.aclose()
        raise ApiError(400, str(error), param="prompt", code="invalid_token_id") from error
    except (EngineError, asyncio.TimeoutError) as error:
        await stream.aclose()
        raise ApiError(503, f"the engine could not start this request: {str(error) or 'timed out'}",
                       kind="server_error") from error
    assert isinstance(started, Started)
    return TurnInProgress(server, spec, ref, prompt, params, started, stream, group, choice)


def _record_next_state(server: Server, ref: SessionRef, spec: TurnSpec) -> None:
    store = server.store
    previous, siblings = turn_to_pair(store, ref)
    store.close_turns([t.id for t in siblings])
    if previous is None:
        return
    state = (_next_state_of_ids(server, previous, spec.prompt_ids) if spec.prompt_ids is not None
             else next_state_of(previous, spec.messages, spec.end_user or ""))
    if state is None:
        return
    try:
        store.set_next_state(previous.id, state)
        server.metrics.next_states.labels(state.role).inc()
    except StoreError:  # a concurrent request of the same session paired it first
        pass


def _next_state_of_ids(server: Server, previous, prompt_ids: list[int]) -> NextState | None:
    """A token-in client's next state: the ids it adds after the previous prompt and response."""
    history = [*previous.prompt_token_ids, *previous.response_token_ids]
    new = prompt_ids[len(history):] if prompt_ids[: len(history)] == history else prompt_ids
    text = server.tokenizer.decode(new, skip_special_tokens=True).strip()
    if not text:
        return None
    return NextState(role="user", content=text, messages=[{"role": "user", "content": text}], at=time.time())
