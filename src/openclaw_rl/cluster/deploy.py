"""`openclaw-rl serve --ray [ADDRESS]`: place the parts on a Ray cluster and run them.

    connect (or start a local cluster) -> size the actors to the cluster's resources
    -> trainer, replicas, judges, env pools -> sync every replica to the trainer's version
    -> trainer and judges run -> gateway on --host/--port of this machine -> until stopped

Placement follows resources: with GPUs in the cluster every replica, judge and trainer
rank (`--train-nproc N`: N ranks of one sharded trainer, reserved together) takes one (`num_gpus=1`; a judge holds a copy of the policy for teacher
scoring), else each takes one CPU; env pools take a CPU, the gateway nothing (it relays
bytes). With `--personal-adapters on` the trainer is `PersonalTrainerActor` (one, on the
frozen base), and every replica and judge follows the users' adapters through the store. The gateway is pinned to the node this command runs on, so users call the
address they started it with. Ray places the rest.

A Ray address that does not answer makes `ray.init` retry for minutes, so the address is
checked with a plain TCP connect first and the error names it.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from dataclasses import dataclass, field, replace
from typing import Any

from openclaw_rl.cluster import actors
from openclaw_rl.config import ConfigError, JudgeConfig, RayConfig, ServeConfig, TrainConfig
from openclaw_rl.envs.pool import PoolConfig, resolve_token
from openclaw_rl.serve.server import check_exposure
from openclaw_rl.train.methods import get_method
from openclaw_rl.train.sharded import refuse_gate_when_sharded
from openclaw_rl.users import Users

log = logging.getLogger(__name__)

_READY_TIMEOUT_S = 600.0  # model loads on a busy node take minutes


def _ray():
    try:
        import ray  # an optional extra (`openclaw-rl[ray]`): imported where it is used, with the fix if missing
    except ImportError as error:
        raise ConfigError("--ray needs Ray: pip install 'openclaw-rl[ray]' (ray==2.60.0)") from error
    return ray


def connect(address: str, actors: int = 1) -> None:
    """Join the cluster at `address` ('local' starts one here, 'auto' finds this machine's).

    A local cluster counts at least one CPU per actor (`actors`) even on a machine with
    fewer cores: they share the cores, as the threads of one `serve` process do."""
    ray = _ray()
    if ray.is_initialized():
        return
    if address == "local":
        ray.init(include_dashboard=False, num_cpus=max(os.cpu_count() or 1, actors))
        return
    if address != "auto":
        host, _, port = address.removeprefix("ray://").rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"--ray {address!r} is not a Ray address: use HOST:PORT of the head node (its GCS "
                              "port, 6379 by default), 'auto', or --ray alone for a local cluster")
        try:
            socket.create_connection((host, int(port)), timeout=5.0).close()
        except OSError as error:
            why = (f"cannot reach the Ray cluster at {address!r}: {error}. Start its head with "
                   f"`ray start --head --port {port}` there, or use --ray alone for a local cluster")
            raise ConfigError(why) from error
    try:
        ray.init(address=address, include_dashboard=False)
    except ConnectionError as error:
        raise ConfigError(f"cannot join the Ray cluster at {address!r}: {error}") from error


def placement(role: str, resources: dict[str, float]) -> dict[str, Any]:
    """`ray.remote` options of one actor of `role` on a cluster with `resources`."""
    if role in ("replica", "trainer", "judge") and resources.get("GPU", 0) >= 1:  # each holds a model
        return {"num_gpus": 1, "num_cpus": 1}
    if role == "gateway":
        return {"num_cpus": 0}
    return {"num_cpus": 1}


def bundle(role: str, resources: dict[str, float]) -> dict[str, float]:
    """What one actor of `role` takes, by Ray's resource names ({"CPU": 1, "GPU": 1})."""
    return {key.removeprefix("num_").upper().replace("CPUS", "CPU").replace("GPUS", "GPU"): amount
            for key, amount in placement(role, resources).items()}


def check_fits(roles: list[str], resources: dict[str, float]) -> None:
    """Fail now, naming the shortfall, rather than leave actors pending forever."""
    want: dict[str, float] = {}
    for role in roles:
        for name, amount in bundle(role, resources).items():
            want[name] = want.get(name, 0) + amount
    for name, amount in want.items():
        if amount > resources.get(name, 0):
            raise ConfigError(f"the Ray cluster has {resources.get(name, 0):g} {name}s but the actors need "
                              f"{amount:g} ({', '.join(roles)}): add nodes, or lower --ray-replicas / --ray-judges")


def env_pools(spec: str) -> list[tuple[str, int]]:
    """'terminal:8,swe:4' -> [('terminal', 8), ('swe', 4)]."""
    pools = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        name, _, size = item.rpartition(":")
        if not name or not size.isdigit() or int(size) < 1:
            raise ConfigError(f"--ray-env-pools item {item!r} is invalid: use NAME:SIZE, e.g. terminal:8")
        pools.append((name, int(size)))
    return pools


def actor_roles(serve: ServeConfig, judge: JudgeConfig, cluster: RayConfig) -> list[str]:
    """One entry per actor to start."""
    return (["trainer"] * (serve.train_nproc if serve.train else 0) + ["replica"] * cluster.ray_replicas
            + ["judge"] * (cluster.ray_judges if judge.judge != "off" else 0)
            + ["env_pool"] * len(env_pools(cluster.ray_env_pools)) + ["gateway"])


@dataclass
class Deployment:
    """Handles of the running actors; `stop()` ends them in order (gateway first, trainer
    with a final checkpoint)."""

    gateway_url: str
    replica_urls: list[str]
    env_pool_urls: dict[str, str]
    env_pool_token: str
    gateway: Any
    replicas: list[Any]
    judges: list[Any]
    trainer: Any | None
    env_actors: list[Any]
    running: dict[str, Any] = field(default_factory=dict)  # "trainer", "trainer rank r", "judge i" -> its run()
    trainer_ranks: list[Any] = field(default_factory=list)  # a sharded trainer's ranks > 0

    def stop(self) -> None:
        ray = _ray()
        ray.get(self.gateway.stop.remote())
        # the trainer first: the step in progress may still publish to the judges and replicas
        stages = [{"trainer": self.trainer, **{f"trainer rank {r}": rank for r, rank in
                                               enumerate(self.trainer_ranks, 1)}}] if self.trainer else []
        stages.append({f"judge {i}": judge for i, judge in enumerate(self.judges)})
        for stage in stages:
            ray.get([actor.stop.remote() for actor in stage.values()])
            for name in stage:
                try:
                    ray.get(self.running[name], timeout=300)
                except Exception:  # a part that failed already said so; the rest still stop
                    log.exception("%s ended with an error", name)
        ray.get([part.stop.remote() for part in [*self.replicas, *self.env_actors]])
        for actor in [self.gateway, *self.replicas, *self.judges, *self.env_actors, *filter(None, [self.trainer]),
                      *self.trainer_ranks]:
            ray.kill(actor)


def deploy(serve: ServeConfig, judge: JudgeConfig, train: TrainConfig, cluster: RayConfig) -> Deployment:
    """Start every part on the connected cluster; returns once the gateway answers."""
    ray = _ray()
    pools = env_pools(cluster.ray_env_pools)
    resources = ray.cluster_resources()
    judging = judge.judge != "off"
    roles = actor_roles(serve, judge, cluster)
    check_fits(roles, resources)
    log.info("Ray cluster: %s; placing %s", {k: v for k, v in resources.items() if k in ("CPU", "GPU")},
             ", ".join(f"{roles.count(r)} {r}" for r in dict.fromkeys(roles)))

    def remote(cls: type, role: str, **options: Any):
        return ray.remote(cls).options(**placement(role, resources), **options)

    personal = serve.personal_adapters == "on"  # the base frozen; each user's adapter through the store
    trainer, followers = None, []
    if serve.train and personal:
        trainer = remote(actors.PersonalTrainerActor, "trainer").remote(serve, train)
    elif serve.train:
        trainer, followers = _trainer(serve, train, remote, resources)
    lora_rank = train.lora_rank if serve.train and train.lora else 0  # adapter slots for a vLLM replica
    replicas = [remote(actors.Replica, "replica").remote(serve, watch_weights=not serve.train and not personal,
                                                         index=i, lora_rank=lora_rank)
                for i in range(cluster.ray_replicas)]
    shards = cluster.ray_judges if judging else 0
    teacher_targets = get_method(train.method).reads_teacher or not serve.train  # as compose.build_stack decides
    if not (get_method(train.method).reads_experience or not serve.train):  # the experience pass, likewise
        judge = replace(judge, experience_targets=False)
    judges = [remote(actors.JudgeActor, "judge").remote(serve, judge, teacher_targets, i, shards,
                                                        watch_weights=not serve.train and not personal)
              for i in range(shards)]
    token, _ = resolve_token()  # $OPENCLAW_ENV_TOKEN, else a generated one (logged at start)
    env_actors = [remote(actors.EnvPoolActor, "env_pool").remote(PoolConfig(env=name, size=size), token)
                  for name, size in pools]
    replica_urls = ray.get([r.url.remote() for r in replicas], timeout=_READY_TIMEOUT_S)
    env_urls = dict(zip([name for name, _ in pools], ray.get([e.url.remote() for e in env_actors],
                                                            timeout=_READY_TIMEOUT_S)))
    running = {f"trainer rank {r}": rank.follow.remote() for r, rank in enumerate(followers, 1)}
    if trainer is not None and personal:  # nothing to catch up: each version is on disk and in the store
        running["trainer"] = trainer.run.remote()
    elif trainer is not None:
        subscribers = [*replicas, *judges]
        ray.get(trainer.catch_up.remote(subscribers))  # --resume: every replica and judge starts at its version
        running["trainer"] = trainer.run.remote(subscribers)
    running.update({f"judge {i}": j.run.remote() for i, j in enumerate(judges)})
    here = ray.get_runtime_context().get_node_id()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # ray is optional: see _ray

    gateway = remote(actors.GatewayActor, "gateway",
                     scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False)
                     ).remote(replica_urls, serve.host, serve.port, serve.request_timeout_s)
    gateway_url = ray.get(gateway.url.remote(), timeout=_READY_TIMEOUT_S)
    return Deployment(gateway_url, replica_urls, env_urls, token, gateway, replicas, judges, trainer, env_actors,
                      running, followers)


def _trainer(serve: ServeConfig, train: TrainConfig, remote, resources: dict[str, float]) -> tuple[Any, list[Any]]:
    """The trainer actor, or with --train-nproc N its N ranks (rank 0, then the others): one
    placement group reserves them all at once (PACK: on as few nodes as fit, for the collectives),
    so no rank starts while another waits for resources, and they join rank 0's process group."""
    nproc = serve.train_nproc
    refuse_gate_when_sharded(train, nproc, "--train-nproc")  # before any actor starts
    ray = _ray()
    if nproc == 1:
        return remote(actors.TrainerActor, "trainer").remote(serve, train), []
    from ray.util.placement_group import placement_group  # ray is optional: see _ray
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # ray is optional: see _ray

    group = placement_group([bundle("trainer", resources)] * nproc, strategy="PACK")
    ray.get(group.ready(), timeout=_READY_TIMEOUT_S)
    ranks = [remote(actors.TrainerActor, "trainer", scheduling_strategy=PlacementGroupSchedulingStrategy(
        group, placement_group_bundle_index=r)).remote(serve, train, r, nproc) for r in range(nproc)]
    address = ray.get(ranks[0].address.remote(), timeout=_READY_TIMEOUT_S)
    ray.get([rank.join.remote(address) for rank in ranks], timeout=_READY_TIMEOUT_S)
    log.info("trainer: %d ranks (FSDP2), rank 0 at %s:%d", nproc, *address)
    return ranks[0], ranks[1:]


def serve_on_ray(serve: ServeConfig, judge: JudgeConfig, train: TrainConfig, cluster: RayConfig) -> None:
    """The `serve --ray` command: deploy, report, run until Ctrl-C or SIGTERM, stop."""
    check_exposure(serve, Users(serve.data_dir, serve.api_key))  # the gateway's --host; replicas need the same keys
    ray = _ray()
    connect(cluster.ray, actors=len(actor_roles(serve, judge, cluster)) - 1)  # the gateway takes no CPU
    started = time.monotonic()
    try:
        deployment = deploy(serve, judge, train, cluster)
    except BaseException:
        ray.shutdown()  # ends the actors that did start
        raise
    log.info("gateway on %s -> %d replicas (%s); %d judges; training %s; ready in %.0f s", deployment.gateway_url,
             len(deployment.replicas), ", ".join(deployment.replica_urls), len(deployment.judges),
             f"on ({train.method}, batch {train.batch_size})" if deployment.trainer else "off",
             time.monotonic() - started)
    for name, url in deployment.env_pool_urls.items():
        log.info("env pool %s on %s (token %s)", name, url, deployment.env_pool_token)

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    pending = {ref: name for name, ref in deployment.running.items()}
    try:
        while True:
            if not pending:
                time.sleep(5.0)
                continue
            done, _ = ray.wait(list(pending), timeout=5.0)
            for ref in done:  # a judge or the trainer ended on its own: say why, keep serving
                name = pending.pop(ref)
                try:
                    ray.get(ref)
                    log.warning("%s stopped", name)
                except Exception:
                    log.exception("%s failed", name)
    except KeyboardInterrupt:
        log.info("stopping: gateway, trainer (final checkpoint), judges, replicas")
    finally:
        deployment.stop()
        ray.shutdown()


