"""Prometheus metrics of one server (its own registry, so tests can run several)."""

from __future__ import annotations

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

    def render(self) -> bytes:
        return generate_latest(self.registry)
