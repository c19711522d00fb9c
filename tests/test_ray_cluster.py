"""`serve --ray`: the online loop as Ray actors on a local cluster, end to end.

A real local Ray cluster (started here, shut down at the end) runs the gateway, two
local-engine replicas, two judge actors, a trainer actor and a toolcall environment pool,
on the tiny model. Sessions with feedback go through the OpenAI client to the gateway
until every replica serves policy version 2; no request may fail. The cluster takes
about 15 s to start and 0.6 GB beside the actors, so this module is `slow`.

The gateway's routing and the placement rules are also checked without Ray (fast).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import httpx
import pytest

from openclaw_rl.cluster.deploy import check_fits, connect, env_pools, placement
from openclaw_rl.cluster.gateway import Router, preference, session_key
from openclaw_rl.config import ConfigError, JudgeConfig, RayConfig, ServeConfig, TrainConfig
from openclaw_rl.serve.background import free_port
from openclaw_rl.store import Store

REPLIES = ["No, that's wrong. Don't use bullet points; write plain sentences.", "Thanks, that's exactly right!",
           "Too long. Make it shorter, one sentence please."]


# -- without Ray ------------------------------------------------------------------------


def test_a_conversation_keeps_its_replica_from_turn_to_turn():
    opening = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]
    later = [*opening, {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3 + 3?"}]
    assert session_key({}, {"messages": opening}) == session_key({}, {"messages": later})
    assert session_key({}, {"messages": opening}) != session_key({}, {"messages": [opening[1]]})
    # an explicit session wins; an end user keeps their conversations on one replica (not one session)
    assert session_key({"x-session-id": "s1"}, {"messages": opening}) == "session:s1"
    assert session_key({}, {"messages": opening, "user": "u1"}) == "user:u1"
    assert session_key({}, {"messages": later, "metadata": {"user_id": "u1"}}) == "user:u1"
    # the Responses API's input and a chain of responses have keys of their own
    assert session_key({}, {"input": opening}) == session_key({}, {"input": later})
    assert session_key({}, {"input": "hi", "previous_response_id": "resp_1"}) == "response:resp_1"


def test_rendezvous_hashing_spreads_sessions_and_moves_only_those_of_a_lost_replica():
    keys = [f"session:s{i}" for i in range(400)]
    first = [preference(k, 3)[0] for k in keys]
    assert all(sorted(preference(k, 3)) == [0, 1, 2] for k in keys)
    assert all(80 <= first.count(r) <= 190 for r in range(3)), [first.count(r) for r in range(3)]
    # with replica 2 unreachable, its sessions go to their second choice; the others stay put
    for key, replica in zip(keys, first):
        fallback = [r for r in preference(key, 3) if r != 2][0]
        assert fallback == replica or replica == 2


def test_a_session_id_learned_from_a_reply_routes_its_feedback_to_the_same_replica():
    router = Router(["http://a", "http://b", "http://c"])
    chosen = router.order("opening:abc")[0]
    router.learn("sess-42", chosen)
    assert router.order("session:sess-42")[0] == chosen


def test_placement_follows_gpus_and_a_shortfall_is_named():
    gpu_cluster = {"CPU": 16.0, "GPU": 4.0}
    assert placement("replica", gpu_cluster) == {"num_gpus": 1, "num_cpus": 1}
    assert placement("trainer", gpu_cluster) == {"num_gpus": 1, "num_cpus": 1}
    assert placement("judge", gpu_cluster) == {"num_gpus": 1, "num_cpus": 1}
    assert placement("replica", {"CPU": 16.0}) == {"num_cpus": 1}
    assert placement("env_pool", gpu_cluster) == {"num_cpus": 1}
    assert placement("gateway", gpu_cluster) == {"num_cpus": 0}
    check_fits(["trainer", "replica", "replica", "judge", "env_pool", "gateway"], gpu_cluster)
    with pytest.raises(ConfigError, match="has 2 GPUs but the actors need 3"):
        check_fits(["trainer", "replica", "replica", "gateway"], {"CPU": 16.0, "GPU": 2.0})
    with pytest.raises(ConfigError, match="has 2 CPUs but the actors need 4"):
        check_fits(["trainer", "replica", "replica", "judge", "gateway"], {"CPU": 2.0})
    assert env_pools("terminal:8, swe:2") == [("terminal", 8), ("swe", 2)]
    with pytest.raises(ConfigError, match="'terminal' is invalid"):
        env_pools("terminal")


def test_an_unreachable_ray_address_fails_fast_and_names_it(tmp_path):
    started = time.monotonic()
    with pytest.raises(ConfigError, match=r"cannot reach the Ray cluster at '127\.0\.0\.1:1'"):
        connect("127.0.0.1:1")
    with pytest.raises(ConfigError, match="is not a Ray address"):
        connect("no-port-here")
    proc = subprocess.run([sys.executable, "-m", "openclaw_rl.cli", "serve", "--ray", "127.0.0.1:1"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "cannot reach the Ray cluster at '127.0.0.1:1'" in proc.stderr, proc.stderr
    (tmp_path / "cluster.toml").write_text('[ray]\nray = "127.0.0.1:2"\nray_replicas = 3\n')
    proc = subprocess.run([sys.executable, "-m", "openclaw_rl.cli", "serve", "--config", str(tmp_path / "cluster.toml")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "cannot reach the Ray cluster at '127.0.0.1:2'" in proc.stderr, proc.stderr
    assert time.monotonic() - started < 60  # ray.init alone would retry for minutes


def test_ray_flags_parse():
    from openclaw_rl.cli import _parser
    from openclaw_rl.config import build

    assert build(RayConfig, {}, _parser().parse_args(["serve"])).ray == ""
    assert build(RayConfig, {}, _parser().parse_args(["serve", "--ray"])).ray == "local"
    args = _parser().parse_args(["serve", "--ray", "10.0.0.1:6379", "--ray-replicas", "4", "--ray-judges", "2"])
    assert build(RayConfig, {}, args) == RayConfig(ray="10.0.0.1:6379", ray_replicas=4, ray_judges=2)
    with pytest.raises(ConfigError, match="ray_replicas"):
        RayConfig(ray_replicas=0)


# -- on a local Ray cluster -------------------------------------------------------------


def _session(client, gateway: str, i: int, results: list) -> None:
    """Two turns; sessions with even i name themselves and end with explicit feedback, the
    others are inferred from the resent history and get a user reply as next state."""
    import openai

    headers = {"X-Session-Id": f"ray-session-{i}"} if i % 2 == 0 else {}
    messages = [{"role": "user", "content": f"Question number {i}: what is {i} + {i}?"}]
    for turn in range(2):
        try:
            raw = client.chat.completions.with_raw_response.create(
                model="tiny", messages=messages, max_tokens=8, temperature=1.0, extra_headers=headers)
        except openai.OpenAIError as error:
            results.append({"ok": False, "error": repr(error)})
            return
        reply = raw.parse().choices[0].message.content
        results.append({"ok": True, "version": int(raw.headers["x-policy-version"]), "text": reply,
                        "replica": raw.headers["x-replica"], "session": raw.headers["x-session-id"], "i": i})
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": REPLIES[(i + turn) % 3]}]
    if headers:
        r = httpx.post(f"{gateway}/v1/sessions/{headers['X-Session-Id']}/feedback",
                       json={"text": "Wrong: show every step, in plain sentences."}, timeout=60)
        results.append({"ok": r.status_code == 200, "feedback": r.status_code, "replica": r.headers.get("x-replica"),
                        "session": headers["X-Session-Id"], "error": r.text})


def _play_until(client, gateway: str, version: int, within_s: float) -> list[dict]:
    """Sessions, four at a time, until the gateway serves `version` (or time runs out); their results."""
    results: list[dict] = []
    deadline, i = time.monotonic() + within_s, 0
    while httpx.get(f"{gateway}/healthz").json()["policy_version"] < version and time.monotonic() < deadline:
        threads = [threading.Thread(target=_session, args=(client, gateway, i + k, results)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        i += 4
    return results


@pytest.fixture(scope="module")
def on_ray(tiny_model_dir, tmp_path_factory):
    import ray
    from openai import OpenAI

    from openclaw_rl.cluster.deploy import deploy

    os.environ["RAY_AUTH_MODE"] = "disabled"
    started = time.monotonic()
    ray.init(num_cpus=6, include_dashboard=False, object_store_memory=200 * 2**20)
    ray_start_s = time.monotonic() - started
    data_dir = tmp_path_factory.mktemp("ray-loop")
    serve = ServeConfig(model=str(tiny_model_dir), data_dir=str(data_dir), port=free_port(), status_interval_s=0.0)
    try:
        deployment = deploy(serve, JudgeConfig(judge="embedding", poll_interval_s=0.1),
                            TrainConfig(method="combined", batch_size=2, catch_up=1, lr=1e-3, train_poll_interval_s=0.1,
                                        checkpoint_every=100),
                            RayConfig(ray="local", ray_replicas=2, ray_judges=2, ray_env_pools="toolcall:1"))
        deploy_s = time.monotonic() - started - ray_start_s
        gateway = deployment.gateway_url
        client = OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0, timeout=120)
        results = _play_until(client, gateway, version=2, within_s=420)
        streamed = client.chat.completions.with_raw_response.create(
            model="tiny", messages=[{"role": "user", "content": "Count to three."}], max_tokens=6, stream=True)
        stream = {"version": int(streamed.headers["x-policy-version"]), "chunks": list(streamed.parse())}
        health = httpx.get(f"{gateway}/healthz").json()
        store, waited = Store(data_dir), time.monotonic() + 120
        while (unjudged := len(store.turns_awaiting_verdict(1000))) and time.monotonic() < waited:
            time.sleep(0.5)
        store.close()
        pools = {name: (url, deployment.env_pool_token) for name, url in deployment.env_pool_urls.items()}
        pool_check = _lease_a_toolcall_env(*pools["toolcall"])
        loop_s = time.monotonic() - started - ray_start_s - deploy_s
        deployment.stop()
    finally:
        ray.shutdown()
    print(f"\nray start {ray_start_s:.1f} s, deploy {deploy_s:.1f} s, loop to v2 {loop_s:.1f} s, "
          f"{len(results)} requests")
    return {"data_dir": data_dir, "results": results, "health": health, "pool": pool_check, "stream": stream,
            "unjudged": unjudged}


def _lease_a_toolcall_env(url: str, token: str) -> dict:
    from openclaw_rl.envs.client import PoolClient

    with PoolClient(url, token) as pool:
        tasks = pool.tasks("train")
        with pool.lease(heartbeat=False) as env:
            observation = env.reset(tasks[0].id)
        return {"tasks": len(tasks), "observation": observation, "status": pool.status()}


@pytest.mark.slow
def test_sessions_reach_policy_version_2_on_every_replica_without_a_failed_request(on_ray):
    results = on_ray["results"]
    assert results and all(r["ok"] for r in results), [r for r in results if not r["ok"]]
    replicas = on_ray["health"]["replicas"]
    assert len(replicas) == 2 and all(r["policy_version"] >= 2 for r in replicas), on_ray["health"]
    versions = {r["version"] for r in results if "version" in r}
    assert 0 in versions and len(versions) >= 2, versions


@pytest.mark.slow
def test_a_streamed_reply_is_relayed_with_its_policy_version(on_ray):
    stream = on_ray["stream"]
    assert stream["version"] >= 2 and len(stream["chunks"]) >= 2
    assert [c.choices[0].finish_reason for c in stream["chunks"] if c.choices][-1] in ("stop", "length")


@pytest.mark.slow
def test_each_session_stays_on_one_replica_and_both_replicas_serve(on_ray):
    by_session: dict[str, set[str]] = {}
    for r in on_ray["results"]:
        by_session.setdefault(r["session"], set()).add(r["replica"])
    assert all(len(replicas) == 1 for replicas in by_session.values()), by_session
    assert {next(iter(r)) for r in by_session.values()} == {"0", "1"}


@pytest.mark.slow
def test_the_shared_store_holds_every_turn_with_the_version_that_served_it(on_ray):
    from openclaw_rl.train.weights import FilesChannel

    store = Store(on_ray["data_dir"])
    try:
        for r in (r for r in on_ray["results"] if "version" in r):
            turns = [t for t in store.turns(r["session"]) if t.response_text == r["text"]]
            assert turns and turns[0].policy_version == r["version"], r
        feedback = [r for r in on_ray["results"] if "feedback" in r]
        assert feedback and all(store.last_main_turn(r["session"]).next_state.role == "feedback" for r in feedback)
        assert store.policy_version() >= 2 and store.sample_counts()["used"] >= 4
    finally:
        store.close()
    assert FilesChannel(on_ray["data_dir"]).latest_version() >= 2  # the files channel, for restarts


@pytest.mark.slow
def test_two_judges_share_the_turns_and_leave_none_unjudged(on_ray):
    assert on_ray["unjudged"] == 0


@pytest.mark.slow
def test_an_environment_pool_runs_as_an_actor(on_ray):
    pool = on_ray["pool"]
    assert pool["tasks"] >= 1 and pool["observation"] and pool["status"]["size"] == 1


@pytest.mark.slow
def test_a_sharded_trainer_runs_one_actor_per_rank_and_serves_its_versions(tiny_model_dir, tmp_path):
    """`serve --ray --train-nproc 2`: two trainer actors, reserved together by a placement group,
    form one FSDP2 process group (gloo here); rank 0 runs the loop and publishes, rank 1 trains
    its share of every step, and the replica serves the versions they make."""
    import ray
    from openai import OpenAI

    from openclaw_rl.cluster.deploy import actor_roles, deploy

    os.environ["RAY_AUTH_MODE"] = "disabled"
    ray.init(num_cpus=5, include_dashboard=False, object_store_memory=200 * 2**20)
    serve = ServeConfig(model=str(tiny_model_dir), data_dir=str(tmp_path), port=free_port(), status_interval_s=0.0,
                        train_nproc=2)
    judge, cluster = JudgeConfig(judge="embedding", poll_interval_s=0.1), RayConfig(ray="local", ray_replicas=1,
                                                                                    ray_judges=1)
    assert actor_roles(serve, judge, cluster).count("trainer") == 2
    try:
        deployment = deploy(serve, judge, TrainConfig(method="binary", batch_size=2, catch_up=1, lr=1e-3,
                                                      train_poll_interval_s=0.1, checkpoint_every=100), cluster)
        gateway = deployment.gateway_url
        client = OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0, timeout=120)
        results = _play_until(client, gateway, version=1, within_s=300)
        version = httpx.get(f"{gateway}/healthz").json()["policy_version"]
        deployment.stop()
        follower_steps = ray.get(deployment.running["trainer rank 1"])
        leader_steps = ray.get(deployment.running["trainer"])
    finally:
        ray.shutdown()
    assert results and all(r["ok"] for r in results), [r for r in results if not r["ok"]]
    assert version >= 1 and leader_steps >= 1 and follower_steps == leader_steps  # every step on both ranks


def test_a_sharded_trainer_with_the_gate_is_refused_before_any_actor_starts():
    from openclaw_rl.cluster.deploy import _trainer

    serve = ServeConfig(train_nproc=2)
    with pytest.raises(ConfigError, match="--gate on is not supported with --train-nproc > 1"):
        _trainer(serve, TrainConfig(gate="on"), remote=None, resources={"CPU": 4})


@pytest.mark.slow
def test_personal_adapters_on_ray_each_replica_serves_each_users_own_version(tiny_model_dir, tmp_path):
    """`serve --ray --personal-adapters on`: a personal trainer actor steps alice's and bob's adapters
    from their feedback (judged by a judge actor), both replicas serve each of them their own version
    and carol the base exactly; a rollback made through the gateway (so by one replica) is served by
    the other replica too, from the store. Every wait is on what the replicas serve."""
    import ray

    from openclaw_rl.cluster.deploy import deploy
    from openclaw_rl.users import Users
    from test_personal_serving import _same

    os.environ["RAY_AUTH_MODE"] = "disabled"
    users = Users(tmp_path)
    keys = {name: {"Authorization": f"Bearer {users.add(name, admin=name == 'root')}"}
            for name in ("alice", "bob", "carol", "root")}
    serve = ServeConfig(model=str(tiny_model_dir), data_dir=str(tmp_path), port=free_port(), status_interval_s=0.0,
                        personal_adapters="on")
    train = TrainConfig(method="binary", batch_size=4, personal_lr=1e-2, gate="off", train_poll_interval_s=0.1)

    def greedy(url: str, user: str) -> tuple[str | None, list[tuple[str, float]]]:
        r = httpx.post(f"{url}/v1/chat/completions", headers=keys[user], timeout=120,
                       json={"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 6,
                             "temperature": 0, "logprobs": True})
        assert r.status_code == 200, r.text
        return r.headers.get("x-adapter-version"), [(s["token"], s["logprob"])
                                                    for s in r.json()["choices"][0]["logprobs"]["content"]]

    def feedback(gateway: str, user: str, sessions: range) -> None:
        for i in sessions:
            r = httpx.post(f"{gateway}/v1/chat/completions", headers=keys[user], timeout=120,
                           json={"messages": [{"role": "user", "content": f"{user}'s question {i}: 2 + {i}?"}],
                                 "max_tokens": 4, "temperature": 1.0})
            assert r.status_code == 200, r.text
            assert httpx.post(f"{gateway}/v1/sessions/{r.headers['x-session-id']}/feedback", headers=keys[user],
                              timeout=60, json={"text": REPLIES[0]}).status_code == 200

    def until(deployment, want: dict[str, int], what: str) -> None:
        deadline = time.monotonic() + 240
        while True:
            served = ray.get([r.adapter_versions.remote() for r in deployment.replicas])
            if all(all(s.get(user) == v for user, v in want.items()) for s in served):
                return
            assert time.monotonic() < deadline, f"timed out waiting for {what}: replicas serve {served}"
            time.sleep(0.2)

    ray.init(num_cpus=4, include_dashboard=False, object_store_memory=200 * 2**20)
    try:
        deployment = deploy(serve, JudgeConfig(judge="embedding", poll_interval_s=0.1), train,
                            RayConfig(ray="local", ray_replicas=2, ray_judges=1))
        gateway, urls = deployment.gateway_url, deployment.replica_urls
        base = {url: greedy(url, "carol") for url in urls}
        feedback(gateway, "alice", range(4))
        feedback(gateway, "bob", range(4))
        until(deployment, {"alice": 1, "bob": 1}, "v1 of both on both replicas")
        v1 = {url: {user: greedy(url, user) for user in ("alice", "bob", "carol")} for url in urls}
        feedback(gateway, "alice", range(10, 14))
        until(deployment, {"alice": 2}, "alice's v2 on both replicas")
        rolled = httpx.post(f"{gateway}/v1/adapters/rollback", headers=keys["alice"], json={"to": 1}, timeout=60)
        until(deployment, {"alice": 3}, "alice's rollback on both replicas")
        after = {url: {user: greedy(url, user) for user in ("alice", "bob", "carol")} for url in urls}
        deployment.stop()
        steps = ray.get(deployment.running["trainer"])
    finally:
        ray.shutdown()
    assert rolled.status_code == 200 and rolled.json()["version"] == 3, rolled.text
    first, second = urls
    for url in urls:
        assert v1[url]["alice"][0] == "1" and v1[url]["bob"][0] == "1" and v1[url]["carol"][0] is None
        assert _same(v1[url]["carol"], base[url]) and v1[url]["alice"][1] != base[url][1]
        assert _same(after[url]["alice"], ("3", v1[url]["alice"][1]))  # v1's weights under a new number
        assert _same(after[url]["bob"], v1[url]["bob"]) and _same(after[url]["carol"], base[url])
    assert _same(v1[first]["alice"], v1[second]["alice"]) and _same(v1[first]["bob"], v1[second]["bob"])
    assert steps == 3  # alice twice, bob once: the rollback is the server's, not a step
