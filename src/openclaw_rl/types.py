"""The vocabulary of the online loop (see docs/method.md §1).

Small frozen records only: anything that needs behaviour lives next to the component
that owns it. Token ids and log-probs are plain lists so a record round-trips through
JSON and SQLite unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

TurnKind = Literal["main", "side"]
FinishReason = Literal["stop", "length", "tool_calls", "cancelled"]
Message = dict[str, Any]  # an OpenAI chat message, as the client sent it


@dataclass(frozen=True)
class Constraint:
    """What a response must match, token by token (engine/grammar.py; docs/structured-outputs.md).

    The text is `prefix`, then one JSON value valid under `schema`, then `suffix`, then the
    end of the response: a JSON schema response format is a bare schema; a forced tool call
    is `<tool_call>`, a call object under the tools' schemas, `</tool_call>`. Stored with
    the turn's sampling parameters, so the trainer and the teacher rebuild the same mask.
    """

    schema: dict[str, Any]
    prefix: str = ""
    suffix: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "prefix": self.prefix, "suffix": self.suffix}

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> Constraint | None:
        return None if d is None else cls(d["schema"], d.get("prefix", ""), d.get("suffix", ""))


@dataclass(frozen=True)
class SamplingParams:
    """How one response is sampled. temperature 0 means greedy decoding."""

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    top_logprobs: int = 0  # how many alternatives to report per token (0 = none)
    # who may reuse this request's cached prefix (engine/prefixes.py): the authenticated user; not
    # stored with the turn, since it says nothing about how the response was sampled
    cache_scope: str | None = None
    # whose personal LoRA adapter samples this request (docs/personal-adapters.md); None, or a user
    # without a loaded adapter: the shared model. Not stored with the turn (yet): the version that
    # answered is `Started.adapter_version`, sent to the client as X-Adapter-Version.
    adapter: str | None = None

    # the grammar each token is sampled under (a masked distribution; behaviour log-probs are of it)
    constraint: Constraint | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def logprob_temperature(self) -> float:
        """The temperature behaviour log-probs are measured at.

        A greedy pick has probability 1 under its own (degenerate) distribution, which
        carries no signal, so greedy turns record log-probs of the untempered model
        (T = 1, no top-p). Teacher and trainer use this same value.
        """
        return 1.0 if self.greedy else self.temperature

    @property
    def logprob_top_p(self) -> float:
        """The top-p behaviour log-probs are measured at: `top_p`, or 1 (none) for greedy turns."""
        return 1.0 if self.greedy else self.top_p

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "stop": list(self.stop),
            "seed": self.seed,
            "top_logprobs": self.top_logprobs,
            "constraint": self.constraint.to_dict() if self.constraint else None,
        }


@dataclass(frozen=True)
class TokenStep:
    """One sampled token as it leaves the decode loop."""

    token_id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # (token id, log-prob), best first


@dataclass(frozen=True)
class Generation:
    """A finished response: the exact sampled ids, their log-probs and who made them."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[tuple[tuple[int, float], ...]]
    finish_reason: FinishReason
    policy_version: int
    prompt_token_count: int


@dataclass(frozen=True)
class Score:
    """Log-probs of a given response under a prompt, with the top-k at each position."""

    logprobs: list[float]  # (T,)
    top_ids: list[list[int]]  # (T, k)
    top_logprobs: list[list[float]]  # (T, k)


@dataclass(frozen=True)
class NextState:
    """What followed a main turn: a user reply, tool results, feedback or an observation."""

    role: str  # user | tool | feedback | environment
    content: str
    messages: list[Message] = field(default_factory=list)
    at: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "content": self.content, "messages": self.messages, "at": self.at}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NextState:
        return cls(role=d["role"], content=d["content"], messages=d.get("messages", []), at=d.get("at", 0.0))


@dataclass(frozen=True)
class TurnRecord:
    """A turn as serving hands it to the store (`Store.record_turn`), before the store gives it
    an id, its index in the session and its time. The `Turn` it becomes keeps every field but
    `source`, which only says how to create the session if the store has none."""

    session_id: str
    kind: TurnKind
    policy_version: int
    prompt_messages: list[Message]
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    behaviour_logprobs: list[float]  # (T,): one per response id, under the sampling distribution
    response_text: str
    tool_calls: list[dict[str, Any]]
    sampling: dict[str, Any]
    finish_reason: str
    continuation_hash: str | None = None  # of prompt + response; None for side turns (serve/sessions.py)
    owner: str = "local"  # the user whose session it is: users.LOCAL's name when the server has no keys
    source: str = "new"  # how the session id was chosen, if the store has to create the session
    experience_version: int | None = None  # the owner's experience version served in the prompt; None: no block
    experience_block: str = ""  # the block served (in `prompt_token_ids`, not in `prompt_messages`); "" = none
    experience_placement: str = "system"  # where the block went (experience.place): "user" or "system"

    def __post_init__(self) -> None:
        if self.kind not in ("main", "side"):
            raise ValueError(f"a turn's kind is 'main' or 'side', got {self.kind!r} (turn of session "
                             f"{self.session_id!r}): a side turn is a call off the session's main line")
        if len(self.response_token_ids) != len(self.behaviour_logprobs):
            raise ValueError(
                f"{len(self.response_token_ids)} response ids but {len(self.behaviour_logprobs)} log-probs "
                f"(turn of session {self.session_id!r}): record one behaviour log-prob per sampled token"
            )


@dataclass(frozen=True)
class Turn:
    """One chat-completion call, exactly as it was sampled."""

    id: int
    session_id: str
    index: int  # position within the session, main and side turns together
    kind: TurnKind
    policy_version: int
    prompt_messages: list[Message]
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    behaviour_logprobs: list[float]
    response_text: str
    tool_calls: list[dict[str, Any]]
    sampling: dict[str, Any]
    finish_reason: str
    created_at: float
    next_state: NextState | None = None
    closed: bool = False  # no next state will come (session ended first)
    continuation_hash: str | None = None  # of prompt + the response as the client saw it (serve/sessions.py)
    owner: str | None = None  # the user whose session it is (users.py)
    # The owner's experience served with this turn (serve/pipeline.py): its version (None: no block) and the
    # block, which `prompt_token_ids` hold and `prompt_messages` (the client's own) do not;
    # `experience.place(prompt_messages, experience_block, experience_placement)` are the messages rendered.
    experience_version: int | None = None
    experience_block: str = ""
    experience_placement: str = "system"  # a turn stored before placements existed had its block there

    def public_dict(self) -> dict[str, Any]:
        """The view `GET /v1/sessions/{id}` shows (no token ids or log-probs)."""
        return {
            "index": self.index,
            "kind": self.kind,
            "policy_version": self.policy_version,
            "prompt_messages": self.prompt_messages,
            "response_text": self.response_text,
            "tool_calls": self.tool_calls or None,
            "response_token_count": len(self.response_token_ids),
            "finish_reason": self.finish_reason,
            "experience_version": self.experience_version,  # the owner's lessons it was served with; None: none
            "created_at": self.created_at,
            "next_state": (
                {"role": self.next_state.role, "content": self.next_state.content}
                if self.next_state
                else None
            ),
            "closed": self.closed,
            "verdict": None,
        }


@dataclass(frozen=True)
class Session:
    id: str
    created_at: float
    closed_at: float | None
    source: str  # how the id was chosen: header | response | inferred | new
    turn_count: int = 0
    owner: str | None = None  # the user it belongs to (users.py); None: stored before there were users


VerdictStatus = Literal["ok", "no_verdict"]


@dataclass(frozen=True)
class Verdict:
    """The judge's reading of (turn, next state).

    `status == "no_verdict"` means the judge failed (errors, timeouts, nothing parseable
    after retries): the turn carries no reward at all, which is not the same as 0.
    """

    turn_id: int
    status: VerdictStatus
    reward: int | None  # majority of the votes, in {+1, 0, -1}; None when no verdict
    votes: list[int]  # parsed evaluative votes; unparseable ones are dropped
    raw: list[str]  # every raw judge output, evaluative then directive
    hints: list[str]  # deduplicated candidate hints (at most 3)
    selected_hint: str | None
    overlap_scores: list[float]  # per candidate hint, from overlap-guided selection
    judge: str  # backend name
    latency_s: float
    reason: str | None = None  # why there is no verdict, or notes
    created_at: float = 0.0
    teacher_policy_version: int | None = None  # whose weights gave the teacher log-probs; None: no teacher

    def public_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reward": self.reward,
            "votes": self.votes,
            "hints": self.hints,
            "selected_hint": self.selected_hint,
            "overlap_scores": self.overlap_scores,
            "judge": self.judge,
            "latency_s": round(self.latency_s, 3),
            "reason": self.reason,
            "teacher_policy_version": self.teacher_policy_version,
        }


@dataclass(frozen=True)
class ExperienceTargets:
    """A turn served with its user's experience block, scored without it and with it (judge/teacher.py):
    what `consolidate` distils the block into the weights from (train/methods.py)."""

    prompt_token_ids: list[int]  # the client's messages rendered as serving rendered them, without the block
    student_logprobs: list[float]  # (T,) the response under those ids: consolidate's behaviour log-probs
    teacher_logprobs: list[float]  # (T,) the response under the ids served, block included
    policy_version: int  # the weights both passes ran on
    experience_version: int  # the user's experience the block rendered


@dataclass(frozen=True)
class Sample:
    """What the trainer consumes: the exact sampled tokens and every signal about them.

    A missing signal is None, never a stand-in: no reward is not reward 0, and no
    teacher is not the behaviour policy. The store holds one per turn with every signal
    the judge (or the agent driver) found; a training method (train/methods.py) keeps
    the signals it reads when its trainer claims the sample.
    """

    turn_id: int
    session_id: str
    policy_version: int  # the behaviour policy that sampled the response
    prompt_token_ids: list[int]
    response_token_ids: list[int]
    behaviour_logprobs: list[float]  # (T,)
    temperature: float  # the temperature behaviour and teacher log-probs are measured at
    top_p: float = 1.0  # and the top-p (after the temperature); payloads written before it existed had none
    reward: float | None = None
    teacher_logprobs: list[float] | None = None  # (T,) under prompt + selected hint
    teacher_top_ids: list[list[int]] | None = None  # (T, K), for top-k distillation
    teacher_top_logprobs: list[list[float]] | None = None  # (T, K)
    hint: str | None = None
    step_advantage: float | None = None  # a long-horizon agent step's standardized advantage (drivers/agent.py)
    constraint: dict[str, Any] | None = None  # the grammar the response was sampled under (Constraint.to_dict)
    experience: ExperienceTargets | None = None  # served with an experience block: scored without and with it

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        if self.experience is not None:
            d["experience"] = dict(self.experience.__dict__)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Sample:
        if isinstance(d.get("experience"), dict):
            d = {**d, "experience": ExperienceTargets(**d["experience"])}
        return cls(**d)
