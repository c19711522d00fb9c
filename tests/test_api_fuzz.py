"""schemathesis against the server's own /openapi.json: no 5xx, every 4xx in the OpenAI
error format. Bounded: a few dozen examples per operation and route, valid and invalid
bodies both, within a time budget; run with `-s` to see the request rate and latency."""

from __future__ import annotations

import statistics
import time

import httpx
import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis.errors import Unsatisfiable  # noqa: E402
from schemathesis.generation import GenerationMode  # noqa: E402

EXAMPLES_PER_OPERATION = 25
BUDGET_S = 240.0


def _check(response: httpx.Response, label: str) -> None:
    assert response.status_code < 500, f"{label}: {response.status_code} {response.text[:500]}"
    if 400 <= response.status_code < 500:
        error = response.json().get("error")
        assert isinstance(error, dict) and isinstance(error.get("message"), str) and error["message"], \
            f"{label}: a {response.status_code} not in the OpenAI error format: {response.text[:300]}"
        assert {"type", "param", "code"} <= error.keys(), f"{label}: {error}"


def test_fuzz_the_openapi_document(make_server):
    server = make_server(default_max_tokens=8, request_timeout_s=60.0)
    schema = schemathesis.openapi.from_url(server.base_url + "/openapi.json")
    latencies: list[float] = []
    statuses: dict[tuple[str, int], int] = {}
    deadline = time.monotonic() + BUDGET_S
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {"/v1/chat/completions", "/v1/completions", "/v1/sessions"} <= {op.path for op in operations}
    with httpx.Client(base_url=server.base_url, timeout=120) as http:
        for operation in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                label = f"{operation.method.upper()} {operation.path} ({mode.value})"

                @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None, derandomize=True,
                          suppress_health_check=list(HealthCheck))
                @given(case=operation.as_strategy(generation_mode=mode))
                def run(case) -> None:
                    if time.monotonic() > deadline:
                        return
                    kwargs = case.as_transport_kwargs(base_url=server.base_url)
                    started = time.perf_counter()
                    response = http.request(kwargs["method"], kwargs["url"], headers=kwargs.get("headers"),
                                            params=kwargs.get("params"), json=kwargs.get("json"),
                                            content=kwargs.get("data") if isinstance(kwargs.get("data"), (bytes, str)) else None)
                    latencies.append(time.perf_counter() - started)
                    statuses[(label, response.status_code)] = statuses.get((label, response.status_code), 0) + 1
                    _check(response, label)

                if time.monotonic() > deadline:  # drawing a case costs time too: past the budget, draw none
                    continue
                try:
                    run()
                except Unsatisfiable:  # nothing about this operation can be made invalid (e.g. GET /healthz)
                    assert mode is GenerationMode.NEGATIVE, label
    assert httpx.get(server.base_url + "/healthz").status_code == 200
    elapsed = sum(latencies)
    quantiles = statistics.quantiles(latencies, n=20)
    print(f"\nfuzz: {len(latencies)} requests, {len(latencies) / elapsed:.1f} req/s, "
          f"p50 {statistics.median(latencies) * 1000:.1f} ms, p95 {quantiles[18] * 1000:.1f} ms")
    print("\n".join(f"  {label}: {status} x{n}" for (label, status), n in sorted(statuses.items())))
    assert len(latencies) >= 2 * len(operations)
    generated = sum(n for (label, status), n in statuses.items() if status == 200 and "completions" in label)
    assert generated >= 5, "valid bodies never reached the engine: the published schema does not describe them"
