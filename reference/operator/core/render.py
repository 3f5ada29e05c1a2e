"""The rendering core: resources, samples, remote records and a clock in; one overlay per gateway out.

Admission is evaluated once per provider per render, so several gateways of a network share one
decision and one sample is never counted twice. Identical inputs give identical revisions.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from reference.operator.core.admission import AdmissionMemory, Policy, observe
from reference.operator.core.candidates import ProviderState, build_candidates
from reference.operator.core.configmap import build_configmap
from reference.operator.core.consumer_config import ConsumerConfigOutput, render_consumer_config
from reference.operator.core.envelope import build_envelope, build_overlay, check, encode
from reference.operator.core.model import (
    Clock,
    GridNetworkSpec,
    MetricSample,
    ProviderSpec,
    RemoteProviderRecord,
    Resources,
)
from reference.operator.core.scoring import Signals, normalise_queue, normalise_ratio

_SIGNAL_NAME = {"queueDepth": "queueDepth", "kvCachePressure": "kvCacheUtilization"}


@dataclass(frozen=True)
class Rendered:
    network: str
    gateway: str
    namespace: str
    revision: str
    candidate_count: int
    envelope: dict[str, Any]
    configmap: dict[str, Any]
    consumer_config: ConsumerConfigOutput | None = None  # only for a gateway reference that enables one


def usable_signals(
    provider: ProviderSpec, sample: MetricSample | None, now: float
) -> tuple[Signals | None, int | None]:
    """A sample past its expiry is no sample; values are normalised and non-finite ones dropped."""
    if sample is None or (sample.expires_at is not None and now > sample.expires_at):
        return None, None
    signals = Signals(
        queue_depth=normalise_queue(sample.queue_depth, provider.queue_capacity),
        kv_cache_utilization=normalise_ratio(sample.kv_cache_utilization),
        healthy=bool(sample.healthy),
    )
    return signals, sample.revision


def memory_key(network: str, provider: ProviderSpec) -> str:
    return f"{network}/{provider.uid or provider.name}/{provider.name}"


def provider_states(
    network: GridNetworkSpec,
    providers: list[ProviderSpec],
    samples: Mapping[str, MetricSample],
    policy: Policy,
    memory: AdmissionMemory,
    now: float,
) -> dict[str, ProviderState]:
    states = {}
    for provider in providers:
        signals, revision = usable_signals(provider, samples.get(provider.name), now)
        signal = _SIGNAL_NAME.get(network.scoring_strategy)
        mapped = signal is not None and signal in provider.signal_names
        observation = observe(signals, revision, policy, mapped)
        state = memory.evaluate(memory_key(network.name, provider), observation, policy, now)
        states[provider.name] = ProviderState(signals=signals, admission_state=state)
    return states


def render(
    resources: Resources,
    samples: Iterable[MetricSample] = (),
    remote_records: Iterable[RemoteProviderRecord] = (),
    clock: Clock | None = None,
    memory: AdmissionMemory | None = None,
) -> list[Rendered]:
    """Render every gateway reference of every network; raises ResourceError on an unusable policy."""
    if clock is None:
        raise ValueError("render needs a clock")
    memory = memory if memory is not None else AdmissionMemory()
    now, wall = clock.now(), clock.wall()
    by_provider = {sample.provider: sample for sample in samples}
    records = list(remote_records)
    out: list[Rendered] = []
    keys: list[str] = []
    for network in sorted(resources.networks, key=lambda n: n.name):
        policy = Policy.from_spec(network.admission_policy, network.scoring_strategy)
        providers = sorted((p for p in resources.providers if p.network == network.name), key=lambda p: p.name)
        tools = sorted((t for t in resources.tool_providers if t.network == network.name), key=lambda t: t.name)
        sites = {s.name: s for s in resources.sites if s.network == network.name}
        states = provider_states(network, providers, by_provider, policy, memory, now)
        keys += [memory_key(network.name, p) for p in providers]
        for gateway in network.gateway_refs:
            candidates = build_candidates(network, gateway, providers, states, tools, records, policy, sites)
            overlay = build_overlay(network.name, gateway.local_site, candidates, network.selection_mode)
            envelope = build_envelope(
                overlay,
                gateway=gateway.name,
                namespace=gateway.namespace,
                uid=network.uid,
                generation=network.generation,
                rendered_at=wall,
            )
            text = encode(envelope)
            check(envelope, text)
            out.append(
                Rendered(
                    network=network.name,
                    gateway=gateway.name,
                    namespace=gateway.namespace,
                    revision=envelope["revision"]["value"],
                    candidate_count=len(candidates),
                    envelope=envelope,
                    configmap=build_configmap(envelope, text),
                    consumer_config=None if gateway.consumer_config is None else render_consumer_config(
                        overlay, gateway.consumer_config, network=network.name, gateway=gateway.name,
                        namespace=gateway.namespace),
                )
            )
    memory.retain(keys)
    return out
