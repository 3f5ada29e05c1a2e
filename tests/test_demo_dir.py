"""Demo folders as scenario inputs: what is taken from them, and every key that is not, by file and key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from harness.demo_dir import DemoDirError, read_demo_dir

SITES = ("west", "east")
SHARED_DEMO = Path(__file__).resolve().parents[2] / "shared" / "demos" / "grid-combined-site"


def _write(root: Path, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


def _folder(root: Path, *, east_network: str = "demo-net", sites: tuple[str, ...] = SITES) -> Path:
    for site in sites:
        network = east_network if site == "east" else "demo-net"
        _write(root, f"resources/{site}/network.yaml", f"""
            apiVersion: grid.praxis-proxy.io/v1alpha1
            kind: GridNetwork
            metadata: {{name: {network}, labels: {{a: b}}}}
            spec:
              gridId: g1
              seeds: ["{{{{ captures.{site}.swim-lb-ip }}}}:7946"]
              swim: {{probeInterval: 5s}}
            """)
        _write(root, f"resources/{site}/provider.yaml", f"""
            apiVersion: grid.praxis-proxy.io/v1alpha1
            kind: InferenceProvider
            metadata: {{name: provider-{site}}}
            spec:
              gridNetworkRef: {network}
              endpoint: http://model-{site}:8000
              models: [{{name: Org/Model-1, contextWindow: 4096}}]
              accessPolicy: {{siteSelector: {{matchLabels: {{}}}}}}
              futureField: 1
            ---
            apiVersion: grid.praxis-proxy.io/v1alpha1
            kind: GridSite
            metadata: {{name: {site}}}
            spec: {{gridNetworkRef: {network}, region: r-{site}, zone: z-{site}}}
            """)
    _write(root, "resources/common/policy.yaml", """
        apiVersion: networking.k8s.io/v1
        kind: NetworkPolicy
        metadata: {name: backend-only}
        """)
    _write(root, "configs/consumer/praxis.yaml", """
        listeners: [{name: proxy, address: "0.0.0.0:8080"}]
        filter_chains:
          - name: main
            filters:
              - {filter: intelligent_route, overlay_file: /x}
              - {filter: load_balancer, clusters: []}
        """)
    _write(root, "forge.yaml", "clusters: []\n")
    return root


def test_a_folder_gives_model_network_providers_and_geography_and_reports_every_other_key(tmp_path: Path) -> None:
    inputs = read_demo_dir(_folder(tmp_path), SITES)
    assert (inputs.network, inputs.model, inputs.scoring, inputs.routing) == ("demo-net", "Org/Model-1", None, None)
    assert inputs.providers == {"west": "provider-west", "east": "provider-east"}
    assert inputs.geography == {"west": ("r-west", "z-west"), "east": ("r-east", "z-east")}
    unused = {(u.file, u.key): u.reason for u in inputs.unused}
    network = "resources/west/network.yaml"
    assert unused[(network, "spec.seeds")].startswith("the harness joins the sites' operators")
    assert (network, "spec.swim") in unused and (network, "metadata.labels") in unused
    provider = "resources/west/provider.yaml"
    assert unused[(provider, "spec.endpoint")] == "a fake backend replaces the demo's model server"
    assert unused[(provider, "spec.futureField")] == "not used by this scenario", "an unknown key is reported too"
    assert (provider, "spec.models.0.contextWindow") in unused
    assert unused[("resources/common/policy.yaml", "NetworkPolicy/backend-only")].startswith("Kubernetes network")
    assert ("configs/consumer/praxis.yaml", "filter_chains.main.filters.0 (intelligent_route)") in unused
    assert ("configs/consumer/praxis.yaml", "listeners") in unused and ("forge.yaml", "*") in unused
    assert f"{provider}: spec.models.0.name" in inputs.used
    assert f"{network}: spec.scoringPolicy (omitted: the default)" in inputs.used
    assert not any(key == f"{provider}: spec.endpoint" for key in inputs.used)
    record = inputs.as_record()
    assert record["source"] == str(tmp_path) and {"file", "key", "reason"} == set(record["unused"][0])


def test_a_folder_of_two_minds_keeps_the_scenarios_own_and_what_is_not_a_folder_is_refused(tmp_path: Path) -> None:
    assert read_demo_dir(_folder(tmp_path / "good"), SITES).network == "demo-net"  # the twin: same shape, one network
    split = read_demo_dir(_folder(tmp_path / "two-networks", east_network="other-net"), SITES)
    assert split.network is None and split.model == "Org/Model-1", "two networks: neither is taken"
    conflict = next(u for u in split.unused if u.key == "GridNetwork name")
    assert "demo-net in resources/west/" in conflict.reason and "other-net in resources/east/" in conflict.reason
    with pytest.raises(DemoDirError, match="not a directory"):
        read_demo_dir(tmp_path / "absent", SITES)
    bad = _folder(tmp_path / "bad-yaml")
    (bad / "resources" / "west" / "network.yaml").write_text("kind: [unclosed\n")
    (bad / "charts" / "templates").mkdir(parents=True)
    (bad / "charts" / "templates" / "deployment.yaml").write_text("{{- if .Values.on }}\nkind: {{ .Kind }}: x\n")
    read = read_demo_dir(bad, SITES)  # read for what it gives: files it cannot parse are reported, not fatal
    unused = {(u.file, u.key): u.reason for u in read.unused}
    assert unused[("resources/west/network.yaml", "*")].startswith("not YAML")
    assert unused[("charts/templates/deployment.yaml", "*")].startswith("not YAML")
    assert read.providers == {"west": "provider-west", "east": "provider-east"}


@pytest.mark.skipif(not SHARED_DEMO.is_dir(), reason="the public demo folder (../shared/demos) is not on this machine")
def test_the_public_combined_site_folder_is_read_as_published() -> None:
    inputs = read_demo_dir(SHARED_DEMO, ("west", "central", "east"))
    assert inputs.model and inputs.network and set(inputs.providers) == {"west", "central", "east"}
    assert any(u.key.startswith("NetworkPolicy/") for u in inputs.unused)
    assert all(u.reason for u in inputs.unused)


def test_a_site_the_folder_has_nothing_for_keeps_the_scenarios_own_and_says_so(tmp_path: Path) -> None:
    inputs = read_demo_dir(_folder(tmp_path, sites=("west",)), SITES)
    assert inputs.providers == {"west": "provider-west"}, "east keeps the scenario's own provider"
    record = inputs.as_record()
    assert record["sites"]["west"] == ["resources/west/network.yaml", "resources/west/provider.yaml"]
    assert record["sites"]["east"] == "none in the folder: the scenario's own resources"


def test_flat_resources_are_placed_by_file_name_the_longest_site_first(tmp_path: Path) -> None:
    """A flat layout (resources/<kind>-<site>.yaml, as the GLB demo publishes) with sites whose names
    contain each other's: each resource goes to the longest site its file names; two providers of one
    site are both kept; a resource naming no site is reported, not dropped."""
    sites = ("east", "east-provider", "west-provider")
    for site in ("east-provider", "west-provider"):
        _write(tmp_path, f"resources/inference-{site}.yaml", f"""
            apiVersion: grid.praxis-proxy.io/v1alpha1
            kind: InferenceProvider
            metadata: {{name: vcr-{site}}}
            spec: {{gridNetworkRef: glb, models: [{{name: Org/M}}]}}
            """)
    _write(tmp_path, "resources/inference-east-provider-secondary.yaml", """
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: InferenceProvider
        metadata: {name: vcr-east-secondary}
        spec: {gridNetworkRef: glb, models: [{name: Org/M}]}
        """)
    _write(tmp_path, "resources/gridnetwork-elsewhere.yaml", """
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: GridNetwork
        metadata: {name: glb}
        """)
    _write(tmp_path, "fixtures/requests/shared-model.json", "{}")
    inputs = read_demo_dir(tmp_path, sites)
    assert inputs.providers == {"east-provider": "vcr-east-provider", "west-provider": "vcr-west-provider"}
    assert inputs.providers_of("east-provider") == ("vcr-east-provider", "vcr-east-secondary")
    assert inputs.model == "Org/M" and inputs.network == "glb"
    assert "resources/gridnetwork-elsewhere.yaml: metadata.name" in inputs.used, "a network is no one site's"
    unused = {(u.file, u.key): u.reason for u in inputs.unused}
    assert ("fixtures/requests/shared-model.json", "*") in unused


def test_a_resource_placed_at_no_site_gives_what_is_no_one_sites_and_reports_the_rest(tmp_path: Path) -> None:
    """Flat manifests templated per site (a `__SITE__` placeholder for a script to fill) name no site of the
    scenario: their network and model are still taken, their provider names and geography are reported as
    placed nowhere, never given to a site they may not belong to."""
    _write(tmp_path, "example-manifests/02-gridnetwork.yaml", """
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: GridNetwork
        metadata: {name: burst-grid}
        spec: {routingPolicy: geographyFirst}
        """)
    _write(tmp_path, "example-manifests/03-sites-and-providers.yaml", """
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: GridSite
        metadata: {name: static-__SITE__}
        spec: {gridNetworkRef: burst-grid, region: west, zone: west-1}
        ---
        apiVersion: grid.praxis-proxy.io/v1alpha1
        kind: InferenceProvider
        metadata: {name: static-__SITE__}
        spec: {gridNetworkRef: burst-grid, models: [{name: Org/Burst}]}
        """)
    inputs = read_demo_dir(tmp_path, SITES)
    assert (inputs.network, inputs.model, inputs.routing) == ("burst-grid", "Org/Burst", "geographyFirst")
    assert inputs.providers == {} and inputs.geography == {}
    record = inputs.as_record()
    assert record["sites"] == {site: "none in the folder: the scenario's own resources" for site in SITES}
    assert record["taken"] == {"network": "burst-grid", "model": "Org/Burst", "routingPolicy": "geographyFirst"}
    unused = {(u.file, u.key): u.reason for u in inputs.unused}
    templated = "example-manifests/03-sites-and-providers.yaml"
    for key in ("metadata.name", "spec.region", "spec.zone"):
        assert unused[(templated, key)] == "placed at no site of the scenario (its sites: west, east)", key
    assert f"{templated}: spec.models.0.name" in inputs.used


def test_a_scenario_that_takes_less_reports_what_it_declines(tmp_path: Path) -> None:
    """A scenario whose claims rest on its own policies and names takes only the model: the providers'
    names and the sites' geography are reported as declined, naming the scenario; the model is used."""
    inputs = read_demo_dir(_folder(tmp_path), SITES, takes=frozenset({"model"}), scenario="the burst scenario")
    assert inputs.model == "Org/Model-1" and inputs.providers == {} and inputs.geography == {}
    assert inputs.network is None
    unused = {(u.file, u.key): u.reason for u in inputs.unused}
    provider = "resources/west/provider.yaml"
    assert unused[(provider, "metadata.name")].startswith("the burst scenario sets its own provider names")
    assert unused[(provider, "spec.region")].startswith("the burst scenario sets its own site geography")
    assert f"{provider}: spec.models.0.name" in inputs.used
    with pytest.raises(ValueError, match="unknown demo inputs"):
        read_demo_dir(tmp_path, SITES, takes=frozenset({"everything"}))


def test_grid_resources_in_a_forge_files_chart_values_are_read_at_the_sites_their_stacks_name(tmp_path: Path) -> None:
    """Demos that install grid resources through a chart (Forge stacks with gridNetwork, gridSite and
    inferenceProviders values) are read like manifests, at the scenario site whose demo name the stack
    names (`aliases`); keys the scenario cannot use are reported under the values they came from."""
    _write(tmp_path, "forge.yaml", """
        apiVersion: forge.praxis.dev/v1alpha1
        kind: Environment
        spec:
          clusters: [{name: pool-a, stacks: [pool-a-site]}]
          stacks:
            pool-a-site:
              steps:
                - type: helm
                  values:
                    gridNetwork: {name: pools, routingPolicy: scoreFirst, scoringPolicy: {strategy: queueDepth},
                                  swim: {probeInterval: 5s}}
                    gridSite: {name: pool-a, region: ra, zone: za}
                    inferenceProviders:
                      - {name: pool-a-provider, gridNetworkRef: pools, models: [{name: Org/M}],
                         metricsConfig: {queueCapacity: 4}}
            pool-z-site:
              steps:
                - type: helm
                  values:
                    gridSite: {name: pool-z, region: rz, zone: zz}
        """)
    inputs = read_demo_dir(tmp_path, ("west", "east"), aliases={"west": "pool-a", "east": "pool-b"})
    assert (inputs.model, inputs.network, inputs.scoring, inputs.routing) == ("Org/M", "pools", "queueDepth",
                                                                              "scoreFirst")
    assert inputs.providers == {"west": "pool-a-provider"} and inputs.geography == {"west": ("ra", "za")}
    where = "forge.yaml: spec.stacks.pool-a-site.steps.0.values.inferenceProviders.0"
    assert f"{where}: models.0.name" in inputs.used
    unused = {(u.file, u.key): u.reason for u in inputs.unused}
    nowhere = "forge.yaml: spec.stacks.pool-z-site.steps.0.values.gridSite"
    assert unused[(nowhere, "region")].startswith("placed at no site"), "no site: its geography is reported"
    assert inputs.geography == {"west": ("ra", "za")}
    assert (where, "metricsConfig") in unused
    assert unused[("forge.yaml", "*")].endswith("listed on their own")
    assert inputs.as_record()["sites"]["east"] == "none in the folder: the scenario's own resources"
