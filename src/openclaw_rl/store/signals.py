"""What the judge learns of each turn and what the trainers take of it: verdicts, samples, claims, quarantine.

The judge writes one sample per turn, with every signal it has; a trainer claims samples
as its method assembles them (train/methods.py), and `claims` records, per method, which
turns it used, dropped as stale or rejected and why. One judge thus serves trainers of
different methods from one store, and the judge never needs to know a method.

Why a second table and not the old key: `samples` was keyed (turn_id, method), one row
per method the judge was told to build for, so the judge had to know the trainer's
method. A database of that era keeps its rows: they stay readable and claimable by the
method they name (`method` is legacy: rows written now hold PER_TURN there), the same
primary key now holds one row per turn, and nothing is migrated or rewritten. The
per-method outcome needed a key of its own, (turn_id, method), which is `claims`.

Two trainers of one method never claim the same sample: on PostgreSQL a claim reads the
ready samples `FOR UPDATE SKIP LOCKED`, and the claim's primary key (turn, method)
settles the rest; on SQLite `BEGIN IMMEDIATE` serialises the claims.

A hint the judge's screen (judge/screen.py) held back waits in `quarantine` until a
person releases it (the turn is judged again, the hint now allowed to train) or drops it.

(Over 400 lines: verdicts, quarantine, samples and claims are one hand-off, each table's
writes checking the others' rows in the same transaction; the share rule is in share.py.)
"""

from __future__ import annotations

import collections
import json
import logging
import time
from collections.abc import Callable, Collection, Iterator
from typing import Any

from openclaw_rl.store.connection import StoreError, chunks, marks
from openclaw_rl.store.conversations import ConversationsMixin
from openclaw_rl.store.share import OwnerShare
from openclaw_rl.types import Sample, Turn, Verdict

log = logging.getLogger(__name__)

PER_TURN = ""  # `samples.method` of the one row per turn; rows of older databases name a method

# the turns the judge has yet to judge: a main turn whose next state arrived, with no verdict and no
# sample (a turn the judge passed over as stale has a dropped sample and no verdict: `drop_sample`)
_AWAITING_VERDICT = ("kind = 'main' AND next_state IS NOT NULL AND id NOT IN (SELECT turn_id FROM verdicts) "
                     "AND id NOT IN (SELECT turn_id FROM samples)")


class SignalsMixin(ConversationsMixin):
    """Verdicts, quarantined hints, samples and the claims of each method's trainer."""

    # -- verdicts ---------------------------------------------------------------------

    def turns_awaiting_verdict(self, limit: int = 32) -> list[Turn]:
        """Main turns whose next state has arrived and that have no verdict yet, oldest first."""
        return self._turn_where(f"{_AWAITING_VERDICT} ORDER BY id LIMIT ?", (limit,))

    def labelled_turns(self, owner: str, reward: int, limit: int) -> list[Turn]:
        """`owner`'s latest `limit` main turns with a response and a verdict of `reward` (+1, -1),
        newest first: what the experience gate scores (judge/experience_gate.py). Only `owner`'s."""
        return self._turn_where(
            "owner = ? AND kind = 'main' AND response_token_ids != '[]' AND id IN "
            "(SELECT turn_id FROM verdicts WHERE status = 'ok' AND reward = ?) ORDER BY id DESC LIMIT ?",
            (owner, reward, limit))

    def write_verdict(self, verdict: Verdict) -> bool:
        """Record a turn's verdict; False (nothing written) if the turn was deleted meanwhile."""
        now = time.time()
        with self._write():
            found = self._owner_of_live_turn(verdict.turn_id)
            if found is None:
                return False
            self._replace("verdicts", "turn_id", {
                "turn_id": verdict.turn_id, "status": verdict.status, "reward": verdict.reward,
                "votes": json.dumps(verdict.votes), "raw": json.dumps(verdict.raw), "hints": json.dumps(verdict.hints),
                "selected_hint": verdict.selected_hint, "overlap_scores": json.dumps(verdict.overlap_scores),
                "judge": verdict.judge, "latency_s": verdict.latency_s, "reason": verdict.reason, "created_at": now,
                "teacher_policy_version": verdict.teacher_policy_version, "owner": found[0],
            })
        turn = self.get_turn(verdict.turn_id)
        if turn is not None:
            self._append_log(turn.policy_version, turn.id, {
                "event": "verdict", "at": now, "session_id": turn.session_id, "index": turn.index,
                **verdict.public_dict(),
            })
        return True

    def _owner_of_live_turn(self, turn_id: int) -> tuple[str | None] | None:
        """(owner,) of a turn, locked until the transaction ends so that a deletion waits; None if
        there is no such turn (a session deleted while the judge read it)."""
        row = self._execute(f"SELECT owner FROM turns WHERE id = ?{self._sql.lock_rows}", (turn_id,)).fetchone()
        if row is None:
            log.info("turn %d is gone (its session was deleted); nothing recorded for it", turn_id)
        return row

    def verdicts(self, turn_ids: list[int]) -> dict[int, Verdict]:
        if not turn_ids:
            return {}
        with self._lock:
            rows = self._execute(
                "SELECT turn_id, status, reward, votes, raw, hints, selected_hint, overlap_scores, judge, "
                "latency_s, reason, created_at, teacher_policy_version FROM verdicts "
                f"WHERE turn_id IN ({marks(turn_ids)})",
                tuple(turn_ids),
            ).fetchall()
        return {
            r[0]: Verdict(
                turn_id=r[0], status=r[1], reward=r[2], votes=json.loads(r[3]), raw=json.loads(r[4]),
                hints=json.loads(r[5]), selected_hint=r[6], overlap_scores=json.loads(r[7]), judge=r[8],
                latency_s=r[9], reason=r[10], created_at=r[11], teacher_policy_version=r[12],
            )
            for r in rows
        }

    def hinted_turns(self, limit: int = 32, owner: str | None = None) -> list[tuple[Turn, Verdict]]:
        """The newest `limit` judged turns whose verdict kept a hint (only `owner`'s when given),
        oldest first, each with its verdict (the hint check reads them: judge/hint_check.py)."""
        where, args = ("AND owner = ? ", (owner,)) if owner is not None else ("", ())
        with self._lock:
            rows = self._execute(f"SELECT turn_id FROM verdicts WHERE status = 'ok' AND hints != '[]' {where}"
                                 "ORDER BY turn_id DESC LIMIT ?", (*args, limit)).fetchall()
        ids = sorted(r[0] for r in rows)
        if not ids:
            return []
        verdicts = self.verdicts(ids)
        turns = self._turn_where(f"id IN ({marks(ids)}) ORDER BY id", tuple(ids))
        return [(t, verdicts[t.id]) for t in turns if t.id in verdicts]

    def verdicts_noting(self, text: str) -> int:
        """How many verdicts' notes (`reason`) contain `text`."""
        with self._lock:
            (count,) = self._execute("SELECT COUNT(*) FROM verdicts WHERE reason LIKE ?",
                                     (f"%{text}%",)).fetchone()
        return int(count)

    def judge_backlog(self) -> int:
        """Main turns whose next state arrived and that the judge has not judged yet."""
        with self._lock:
            (count,) = self._execute(f"SELECT COUNT(*) FROM turns WHERE {_AWAITING_VERDICT}").fetchone()
        return int(count)

    def judged_turns(self, limit: int = 5000, owner: str | None = None) -> list[dict[str, Any]]:
        """The newest `limit` turns with a reward (only `owner`'s when given), oldest first: session,
        its start, the turn's index and policy version, the reward and when it was judged."""
        where, args = ("AND t.owner = ? ", (owner,)) if owner is not None else ("", ())
        with self._lock:
            rows = self._execute(
                "SELECT t.session_id, s.created_at, t.idx, t.policy_version, v.reward, v.created_at FROM verdicts v "
                "JOIN turns t ON t.id = v.turn_id JOIN sessions s ON s.id = t.session_id "
                f"WHERE v.status = 'ok' AND v.reward IS NOT NULL {where}ORDER BY v.created_at DESC, v.turn_id DESC "
                "LIMIT ?", (*args, limit)).fetchall()
        names = ("session_id", "session_created_at", "index", "policy_version", "reward", "judged_at")
        return [dict(zip(names, row)) for row in reversed(rows)]

    def recent_rewards(self, count: int) -> list[int]:
        """The rewards of the newest `count` verdicts that have one (newest first): +1 the judge
        approved the turn, -1 it read a correction, 0 neither."""
        with self._lock:
            rows = self._execute("SELECT reward FROM verdicts WHERE status = 'ok' AND reward IS NOT NULL "
                                 "ORDER BY created_at DESC, turn_id DESC LIMIT ?", (count,)).fetchall()
        return [int(reward) for (reward,) in rows]

    # -- quarantined hints: what the judge's screen (judge/screen.py) held back ----------

    def quarantine_hint(self, turn_id: int, hint: str, reason: str) -> bool:
        """Hold a hint back from training, with why; False if the turn was deleted meanwhile."""
        with self._write():
            found = self._owner_of_live_turn(turn_id)
            if found is None:
                return False
            self._execute("INSERT INTO quarantine (turn_id, hint, reason, status, owner, created_at) "
                          "VALUES (?, ?, ?, 'held', ?, ?)", (turn_id, hint, reason, found[0], time.time()))
        return True

    def quarantined(self, status: str | None = "held", limit: int = 100,
                    quarantine_id: int | None = None) -> list[dict[str, Any]]:
        """Quarantined hints, newest first: of one `status` (None: all), or the one `quarantine_id`."""
        where, args = ("WHERE q.status = ? ", (status,)) if status else ("", ())
        if quarantine_id is not None:
            where, args = "WHERE q.id = ? ", (quarantine_id,)
        with self._lock:
            rows = self._execute(
                "SELECT q.id, q.turn_id, t.session_id, q.owner, q.hint, q.reason, q.status, q.created_at, "
                f"q.decided_at, q.decided_by FROM quarantine q JOIN turns t ON t.id = q.turn_id {where}"
                "ORDER BY q.id DESC LIMIT ?", (*args, limit)).fetchall()
        names = ("id", "turn_id", "session_id", "owner", "hint", "reason", "status", "created_at", "decided_at",
                 "decided_by")
        return [dict(zip(names, row)) for row in rows]

    def released_hints(self, turn_id: int) -> set[str]:
        with self._lock:
            return {r[0] for r in self._execute("SELECT hint FROM quarantine WHERE turn_id = ? AND status = 'released'",
                                                (turn_id,)).fetchall()}

    def decide_quarantine(self, quarantine_id: int, status: str, decided_by: str) -> dict[str, Any]:
        """Release a held hint (its turn is judged again, the hint now allowed to train) or drop it."""
        if status not in ("released", "dropped"):
            raise ValueError(f"a quarantined hint is released or dropped, not {status!r}")
        with self._write():
            row = self._execute(f"SELECT turn_id, status FROM quarantine WHERE id = ?{self._sql.lock_rows}",
                                (quarantine_id,)).fetchone()
            if row is None or row[1] != "held":
                raise StoreError(f"there is no held hint {quarantine_id} in quarantine" +
                                 (f" (it was {row[1]})" if row else ""))
            self._execute("UPDATE quarantine SET status = ?, decided_at = ?, decided_by = ? WHERE id = ?",
                          (status, time.time(), decided_by, quarantine_id))
            if status == "released":  # judged again: the verdict, sample and claims of before go
                for table in ("claims", "samples", "verdicts"):
                    self._execute(f"DELETE FROM {table} WHERE turn_id = ?", (row[0],))
        return self.quarantined(None, limit=1, quarantine_id=quarantine_id)[0]

    def quarantine_of(self, turn_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
        """The quarantined hints of each turn (held, released or dropped), oldest first."""
        found: dict[int, list[dict[str, Any]]] = collections.defaultdict(list)
        with self._lock:
            for chunk in chunks(turn_ids):
                for qid, turn_id, hint, reason, status in self._execute(
                        f"SELECT id, turn_id, hint, reason, status FROM quarantine WHERE turn_id IN ({marks(chunk)}) "
                        "ORDER BY id", tuple(chunk)).fetchall():
                    found[turn_id].append({"id": qid, "hint": hint, "reason": reason, "status": status})
        return dict(found)

    # -- samples: one row per turn, for any method; `claims`: what each method did with it --

    def add_sample(self, sample: Sample) -> bool:
        """Record a turn's sample, ready for every method (a turn judged again is replaced);
        False if the turn was deleted meanwhile."""
        return self._write_sample(sample.turn_id, sample.policy_version, "ready", None, json.dumps(sample.to_dict()))

    def reject_sample(self, turn_id: int, policy_version: int, reason: str) -> bool:
        """Record that a turn gives no method anything to learn (a side turn, an empty response)."""
        return self._write_sample(turn_id, policy_version, "rejected", reason, None)

    def drop_sample(self, turn_id: int, policy_version: int, reason: str) -> bool:
        """Record that a turn was passed over unjudged (its sample would be stale: judge/worker.py);
        it no longer awaits a verdict."""
        return self._write_sample(turn_id, policy_version, "dropped", reason, None)

    def _write_sample(self, turn_id: int, policy_version: int, status: str, reason: str | None,
                      payload: str | None) -> bool:
        with self._write():
            found = self._owner_of_live_turn(turn_id)
            if found is None:
                return False
            self._replace("samples", "turn_id, method", {
                "turn_id": turn_id, "method": PER_TURN, "status": status, "reason": reason,
                "policy_version": policy_version, "payload": payload, "created_at": time.time(), "used_at": None,
                "train_step": None, "owner": found[0],
            })
        return True

    def claim_samples(self, method: str, batch_size: int, current_version: int, max_staleness: int,
                      train_step: int | None, min_size: int | None = None,
                      assemble: Callable[[Sample], Sample | str] | None = None,
                      max_owner_share: float | None = None, owner: str | None = None,
                      owners: Collection[str] | None = None,
                      ) -> tuple[list[Sample], list[tuple[int, str]]]:
        """Take, for `method`, the oldest `batch_size` samples it has not seen yet, if at least
        `min_size` (default: `batch_size`) are fresh enough and usable; a smaller `min_size` lets
        a finished run train its last, partial batch.

        `assemble` turns a turn's sample into the method's (train/methods.py), or returns why
        the turn gives the method nothing: that turn is rejected for `method`, with the reason,
        and stays there for every other method. None takes samples as written. Samples more than
        `max_staleness` versions behind the current policy are dropped for `method`, each with
        its reason. No user's samples fill more than `max_owner_share` of what `method` trains
        (`OwnerShare`: the rest wait for later batches), so no single user's feedback steers a
        step. With `owner`, only that user's samples (a personal adapter's step: train/personal.py,
        which passes `train_step` None: its claims name no step of the shared trainer); with
        `owners`, only theirs (a promotion of their samples into the shared model: processes.promote).
        Returns (claimed samples, dropped (turn id, reason)). Atomic across processes: no
        two claims of one method ever take the same turn.
        """
        if owner is not None and owners is not None:
            raise ValueError("claim_samples takes `owner` or `owners`, not both")
        need = batch_size if min_size is None else max(1, min_size)
        taken: list[Sample] = []
        outcomes: list[tuple[int, str, str | None]] = []  # (turn id, status, reason) of turns passed over
        with self._write():
            share = None if max_owner_share is None else OwnerShare(
                max_owner_share, batch_size,
                self._trained_owners(method, OwnerShare.earlier(max_owner_share, batch_size)))
            for turn_id, version, payload, whose in self._unclaimed(
                    method, batch_size, (owner,) if owner is not None else owners):
                if share is not None and not share.admits(whose):
                    continue  # stays ready for a later batch
                if version < current_version - max_staleness:
                    outcomes.append((turn_id, "dropped", f"stale: sampled by policy v{version}, current "
                                                         f"v{current_version}, max_staleness {max_staleness}"))
                    continue
                sample = Sample.from_dict(json.loads(payload))
                sample = assemble(sample) if assemble is not None else sample
                if isinstance(sample, str):
                    outcomes.append((turn_id, "rejected", sample))
                    continue
                taken.append(sample)
                if share is not None:
                    share.add(whose)
                if len(taken) == batch_size:
                    break
            if len(taken) < need:
                taken = []
            self._claim(method, outcomes, "", train_step)
            won = self._claim(method, [(s.turn_id, "used", None) for s in taken], " RETURNING turn_id", train_step)
        taken = [s for s in taken if s.turn_id in won]  # a concurrent claim of the same method won the rest
        dropped = [(turn_id, reason) for turn_id, status, reason in outcomes if status == "dropped"]
        for turn_id, status, reason in outcomes:
            log.log(logging.INFO if status == "dropped" else logging.DEBUG, "%s sample of turn %d for %s: %s",
                    status, turn_id, method, reason)
        return taken, dropped

    def release_lost_claims(self, method: str, after_step: int) -> int:
        """Make the samples `method` used in training steps after `after_step` claimable again:
        steps a crash lost (their version was neither published nor checkpointed), so that they
        train again. A step whose version the gate rejected keeps its claims: those samples did
        train, and the gate turned the result down. Returns how many samples were released."""
        with self._write():
            cursor = self._execute(
                "DELETE FROM claims WHERE method = ? AND status = 'used' AND train_step > ? AND train_step NOT IN "
                "(SELECT train_step FROM versions WHERE gate = 'rejected' AND train_step IS NOT NULL)",
                (method, after_step))
            return max(cursor.rowcount, 0)

    def _trained_owners(self, method: str, count: int) -> list[str | None]:
        """The owners of the last `count` samples `method` trained, newest first."""
        if count <= 0:
            return []
        rows = self._execute(
            "SELECT t.owner FROM claims c JOIN turns t ON t.id = c.turn_id WHERE c.method = ? AND c.status = 'used' "
            "ORDER BY c.train_step DESC, c.created_at DESC, c.turn_id DESC LIMIT ?", (method, count)).fetchall()
        return [owner for (owner,) in rows]

    def ready_owners(self, method: str) -> dict[str, int]:
        """How many ready samples `method` has no claim on, per owner (who has enough for a
        personal adapter's step: train/personal.py); samples without an owner are not counted."""
        with self._lock:
            rows = self._execute(
                "SELECT s.owner, COUNT(*) FROM samples s WHERE s.status = 'ready' AND s.method IN (?, ?) "
                "AND s.owner IS NOT NULL AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.turn_id = s.turn_id "
                "AND c.method = ?) GROUP BY s.owner", (PER_TURN, method, method)).fetchall()
        return {owner: int(count) for owner, count in rows}

    def claims_by_owner(self, method: str, since: float, owners: Collection[str]) -> dict[str, dict[str, int]]:
        """How many of `owners`' samples `method` claimed from time `since` on, per owner and
        claim status (used, dropped, rejected): what a promotion took of each user."""
        found: dict[str, dict[str, int]] = {owner: {"used": 0, "dropped": 0, "rejected": 0} for owner in owners}
        if not found:
            return found
        with self._lock:
            rows = self._execute(
                "SELECT t.owner, c.status, COUNT(*) FROM claims c JOIN turns t ON t.id = c.turn_id WHERE c.method = ? "
                f"AND c.created_at >= ? AND t.owner IN ({marks(list(found))}) GROUP BY t.owner, c.status",
                (method, since, *found)).fetchall()
        for owner, status, count in rows:
            found[owner][status] = int(count)
        return found

    def _unclaimed(self, method: str, batch_size: int,
                   owners: Collection[str] | None = None) -> Iterator[tuple[int, int, str, str | None]]:
        """(turn id, policy version, payload, owner) of the ready samples `method` has no claim on
        (only `owners`', when given), oldest first, a page at a time (a method may reject many
        before it has a batch)."""
        mine = tuple(owners) if owners is not None else ()
        whose = f"AND s.owner IN ({marks(mine) if mine else 'NULL'}) " if owners is not None else ""
        page = max(batch_size, 64)
        after: tuple[float, int] = (-1.0, -1)
        seen: set[int] = set()  # a database of the per-method era may hold a turn twice
        while True:
            rows = self._execute(
                "SELECT s.turn_id, s.policy_version, s.payload, s.created_at, s.owner FROM samples s "
                "WHERE s.status = 'ready' AND s.method IN (?, ?) AND (s.created_at, s.turn_id) > (?, ?) "
                f"AND NOT EXISTS (SELECT 1 FROM claims c WHERE c.turn_id = s.turn_id AND c.method = ?) {whose}"
                f"ORDER BY s.created_at, s.turn_id LIMIT ?{self._sql.skip_locked}",
                (PER_TURN, method, *after, method, *mine, page),
            ).fetchall()
            for turn_id, version, payload, created_at, owner in rows:
                after = (created_at, turn_id)
                if turn_id not in seen:
                    seen.add(turn_id)
                    yield turn_id, version, payload, owner
            if len(rows) < page:
                return

    def _claim(self, method: str, outcomes: list[tuple[int, str, str | None]], returning: str,
               train_step: int) -> set[int]:
        """Insert `method`'s claims in one statement (each is a round trip to a PostgreSQL server);
        a turn another claim of `method` recorded first is left as it is. With `returning`, the
        turn ids this call recorded."""
        if not outcomes:
            return set()
        now = time.time()
        values = ", ".join("(?, ?, ?, ?, ?, ?)" for _ in outcomes)
        args = [x for turn_id, status, reason in outcomes
                for x in (turn_id, method, status, reason, train_step if status == "used" else None, now)]
        cursor = self._execute(
            f"INSERT INTO claims (turn_id, method, status, reason, train_step, created_at) VALUES {values} "
            f"ON CONFLICT (turn_id, method) DO NOTHING{returning}", tuple(args))
        return {row[0] for row in cursor.fetchall()} if returning else set()

    def sample_counts(self, method: str | None = None) -> dict[str, int]:
        """How many turns are ready, used, dropped and rejected for `method`: each turn counted
        once, under its claim if `method` has one. Without a method: the ready turns no method
        has claimed yet, and every claim and rejection of every method."""
        with self._lock:
            if method is not None:
                rows = self._execute(
                    "SELECT COALESCE(c.status, s.status), COUNT(*) FROM samples s LEFT JOIN claims c "
                    "ON c.turn_id = s.turn_id AND c.method = ? WHERE s.method IN (?, ?) GROUP BY 1",
                    (method, PER_TURN, method),
                ).fetchall()
            else:
                rows = self._execute(
                    "SELECT s.status, COUNT(*) FROM samples s WHERE NOT EXISTS (SELECT 1 FROM claims c "
                    "WHERE c.turn_id = s.turn_id AND (s.method = ? OR c.method = s.method)) GROUP BY s.status "
                    "UNION ALL SELECT status, COUNT(*) FROM claims GROUP BY status",
                    (PER_TURN,),
                ).fetchall()
        counts = {"ready": 0, "used": 0, "dropped": 0, "rejected": 0}
        for status, count in rows:
            counts[status] += count
        return counts

    def sample_states(self, turn_ids: list[int]) -> dict[int, dict[str, Any]]:
        """What became of each turn's sample (turns without one are absent): `status` (ready,
        used, dropped, rejected) and `reason`, the sample's own or, once a method claimed it,
        that claim's (a used claim wins over the others, then dropped, then rejected), the
        `train_step` that used it, and every method's `claims`."""
        found: dict[int, dict[str, Any]] = {}
        with self._lock:
            for chunk in chunks(turn_ids):
                for turn_id, status, reason in self._execute(
                        f"SELECT turn_id, status, reason FROM samples WHERE turn_id IN ({marks(chunk)})",
                        tuple(chunk)).fetchall():
                    found[turn_id] = {"status": status, "reason": reason, "train_step": None, "claims": []}
                for turn_id, method, status, reason, step in self._execute(
                        f"SELECT turn_id, method, status, reason, train_step FROM claims WHERE turn_id IN "
                        f"({marks(chunk)}) ORDER BY created_at", tuple(chunk)).fetchall():
                    state = found.setdefault(turn_id, {"status": status, "reason": reason, "train_step": None,
                                                       "claims": []})
                    state["claims"].append({"method": method, "status": status, "reason": reason, "train_step": step})
        for state in found.values():
            for wanted in ("used", "dropped", "rejected"):
                claim = next((c for c in state["claims"] if c["status"] == wanted), None)
                if claim is not None:
                    state.update(status=wanted, reason=claim["reason"], train_step=claim["train_step"])
                    break
        return found

