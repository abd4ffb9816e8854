"""Hypothesis strategies and random workloads for the allocator model."""

from __future__ import annotations

import random

from hypothesis import strategies as st

from allocator.helpers import ctr, pod
from reconciler.allocator import ModelConfig
from reconciler.allocator.config import EXCLUSIVE_OPTIONS, MODELLED_OPTIONS
from reconciler.kube import ContainerSpec, PodSpec


@st.composite
def topologies(draw: st.DrawFn) -> tuple[str, int]:
    sockets = draw(st.integers(1, 2))
    cores = draw(st.sampled_from([2, 4, 6]))
    threads = draw(st.integers(1, 2))
    nps = draw(st.sampled_from([n for n in (1, 2) if cores % n == 0]))
    return f"{sockets}x{cores}x{threads}", nps


_INCOMPATIBLE = [set(pair) for pair in EXCLUSIVE_OPTIONS]


@st.composite
def configs(draw: st.DrawFn) -> ModelConfig:
    """Every configuration the kubelet starts with, over every modelled option."""
    options = draw(st.sets(st.sampled_from(MODELLED_OPTIONS)).filter(
        lambda o: not any(pair <= o for pair in _INCOMPATIBLE)))
    policies = ["none", "best-effort", "restricted", "single-numa-node"]
    if "align-by-socket" in options:
        policies.remove("single-numa-node")
    return ModelConfig(
        topology_policy=draw(st.sampled_from(policies)),
        scope=draw(st.sampled_from(["pod", "container"])),
        options=frozenset(options),
        reserved_cpu_m=draw(st.sampled_from([0, 1000, 2000])),
        memory_policy=draw(st.sampled_from(["Static", "None"])),
        pod_level=draw(st.booleans()),
    )


def random_pod(rng: random.Random, name: str, *, min_shared: int = 0,
               namespace: str = "default") -> PodSpec:
    """A random pod: legacy, pod-level with a budget, burstable, with sidecars and inits."""
    kind = rng.choice(["legacy", "budget", "budget", "burstable"])
    n_side = rng.randint(0, 2)
    n_app = rng.randint(1, 3)
    sidecars: list[ContainerSpec] = []
    apps: list[ContainerSpec] = []
    inits: list[ContainerSpec] = []
    if rng.random() < 0.2:
        inits.append(ctr("init", str(rng.randint(1, 2)), "256Mi", init=True))
    if kind == "burstable":
        apps = [ctr(f"app{i}", "500m", "256Mi", guaranteed=False) for i in range(n_app)]
        return pod(name, *apps, init=tuple(inits), namespace=namespace)
    if kind == "legacy":
        for i in range(n_side):
            sidecars.append(ctr(f"side{i}", rng.choice(["1", "250m"]), "128Mi", sidecar=True))
        for i in range(n_app):
            apps.append(ctr(f"app{i}", rng.choice(["1", "2", "3", "500m"]), "512Mi"))
        return pod(name, *apps, init=tuple(sidecars) + tuple(inits), namespace=namespace)
    # Pod-level budget: some exclusive app containers, some shared containers.
    exclusive = 0
    n_shared = max(min_shared, rng.randint(0, 2))
    for i in range(n_app):
        if rng.random() < 0.7:
            k = rng.randint(1, 3)
            exclusive += k
            apps.append(ctr(f"app{i}", str(k), "512Mi"))
        else:
            apps.append(ctr(f"app{i}"))
            n_shared = max(0, n_shared - 1)
            min_shared = max(0, min_shared - 1)
    for i in range(max(n_side, n_shared, min_shared)):
        sidecars.append(ctr(f"side{i}", sidecar=True))
    has_shared = any(not c.resources.is_set for c in apps + sidecars)
    budget = exclusive + (rng.randint(1, 2) if has_shared else rng.randint(0, 1))
    if budget == 0:
        budget = 1
    mem = f"{512 * len(apps) + 256}Mi"
    return pod(name, *apps, init=tuple(sidecars) + tuple(inits), budget=str(budget),
               budget_mem=mem, namespace=namespace)
