"""Prometheus metrics of one server (its own registry, so tests can run several)."""

from __future__ import annotations

import collections
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "openclaw_requests", "HTTP requests served", ["endpoint", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "openclaw_request_latency_seconds",
            "Latency of HTTP requests",
            ["endpoint"],
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=self.registry,
        )
        self.tokens_generated = Counter(
            "openclaw_tokens_generated", "Response tokens sampled", registry=self.registry
        )
        self.turns_recorded = Counter(
            "openclaw_turns_recorded", "Turns committed to the store", ["kind"], registry=self.registry
        )
        self.next_states = Counter(
            "openclaw_next_states_recorded", "Next states paired with a main turn", ["role"], registry=self.registry
        )
        self.policy_version = Gauge("openclaw_policy_version", "Policy version being served", registry=self.registry)
        self.verdicts = Counter("openclaw_verdicts", "Verdicts written by the judge", ["status"], registry=self.registry)
        self.experience_gate = Counter("openclaw_experience_gate_decisions", "New experience versions the experience "
                                       "gate passed or rejected", ["outcome"], registry=self.registry)
        self.samples_waiting = Gauge("openclaw_samples_waiting", "Ready samples not yet trained on",
                                     registry=self.registry)
        self.train_steps = Gauge("openclaw_train_steps", "Training steps taken", registry=self.registry)
        self.train = _gauges(self.registry, "openclaw_train_", {
            "loss": "Loss of the last training step",
            "kl": "KL to the behaviour policy (approx.) in the last step",
            "clip_fraction": "Fraction of tokens whose ratio was clipped in the last step",
            "mean_reward": "Mean reward of the last batch (samples with a reward)",
            "mean_abs_a_opd": "Mean |A_opd| of the last batch (tokens with a teacher)",
            "tokens_per_s": "Training throughput of the last step",
        })

        self.gate_candidate = Gauge("openclaw_gate_candidate_version",
                                    "Version the update gate is deciding on now (-1: none)", registry=self.registry)
        self.gate_candidate.set(-1)
        # the collapse detectors on the gate's last decision (train/collapse.py); NaN: none yet
        self.collapse = _gauges(self.registry, "openclaw_gate_", {
            "entropy_ratio": "Entropy of the last candidate's probe answers over the base's (alarm below 0.6)",
            "self_rouge_l": "Mean pairwise ROUGE-L of the last candidate's probe answers (alarm above 0.85)",
            "logprob_drift_nats": "Log-prob per token the served answers lose under the last candidate (alarm above 2)",
            "collapse_alarms": "Collapse alarms the last candidate raised",
        })
        # the same on everyone's newest served main turns (serve/collapse.py; no user label); NaN: none yet
        self.served_collapse = _gauges(self.registry, "openclaw_served_", {
            "entropy_ratio": "Mean -log p per token of the newest served answers over the earliest's (alarm below 0.6)",
            "self_rouge_l": "Mean pairwise ROUGE-L of the newest served answers (alarm above 0.85)",
            "entropy_nats": "Mean -log p per sampled token of the newest served answers",
            "mean_tokens": "Mean length in tokens of the newest served answers",
            "collapse_alarms": "Collapse alarms the newest served answers raise",
        })
        for gauge in (*self.collapse.values(), *self.served_collapse.values()):
            gauge.set(float("nan"))
        self.candidate: int | None = None  # the version the gate is deciding on now, if any
        self.last_train: dict[str, float] = {}
        self.train_history: collections.deque[dict[str, float]] = collections.deque(maxlen=10_000)

    def show_candidate(self, version: int | None) -> None:
        self.candidate = version
        self.gate_candidate.set(-1 if version is None else version)

    def record_gate_decision(self, decision: Any) -> None:
        """The collapse detectors' values of a gate decision (`Decision.checks["collapse"]`)."""
        collapse = decision.checks.get("collapse") or {}
        for name, gauge in self.collapse.items():
            value = len(collapse.get("alarms", [])) if name == "collapse_alarms" else collapse.get(name)
            gauge.set(float("nan") if value is None or not collapse else float(value))

    def record_served_collapse(self, found: dict[str, Any]) -> None:
        """The served-traffic detectors' overall numbers (serve/collapse.py's `ServedCollapse.of`;
        an empty dict: not measured, NaN)."""
        for name, gauge in self.served_collapse.items():
            value = len(found["alarms"]) if name == "collapse_alarms" and found else found.get(name)
            gauge.set(float("nan") if value is None else float(value))

    def totals(self, endpoints: frozenset[str]) -> dict[str, float]:
        """Requests answered and their summed latency over `endpoints`, since the start (a
        reader takes differences between two readings for a rate and a mean latency)."""
        requests = latency_s = 0.0
        for metric in self.latency.collect():
            for sample in metric.samples:
                if sample.labels.get("endpoint") not in endpoints:
                    continue
                if sample.name.endswith("_count"):
                    requests += sample.value
                elif sample.name.endswith("_sum"):
                    latency_s += sample.value
        return {"requests": requests, "latency_s": latency_s}

    def record_train_step(self, stats: dict) -> None:
        self.last_train = {name: stats[name] for name in self.train if isinstance(stats.get(name), (int, float))}
        self.train_history.append({k: float(v) for k, v in stats.items() if isinstance(v, (int, float))})
        for name, gauge in self.train.items():
            if isinstance(stats.get(name), (int, float)):
                gauge.set(stats[name])

    def render(self) -> bytes:
        return generate_latest(self.registry)


def _gauges(registry: CollectorRegistry, prefix: str, texts: dict[str, str]) -> dict[str, Gauge]:
    """One gauge per name, `prefix + name`, with its help text."""
    return {name: Gauge(prefix + name, text, registry=registry) for name, text in texts.items()}
