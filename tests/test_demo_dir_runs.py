"""A demo scenario run end to end on a demo folder whose names are not the scenario's own.

The reader's tests (test_demo_dir.py) check what is taken from a folder; these check that a scenario still
judges its claims when it takes them: a folder names its providers as it likes, and the claims speak of the
demo's pools whatever the providers are called.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

LLMD_PROVIDERS = {"west": "llmd-pool-a-provider", "central": "llmd-pool-b-provider"}


def _llmd_folder(root: Path) -> Path:
    """The pool-metrics demo's layout: a folder per site with its network and its pool's provider."""
    for site, provider in LLMD_PROVIDERS.items():
        path = root / "resources" / site / "grid.yaml"
        path.parent.mkdir(parents=True)
        path.write_text(textwrap.dedent(f"""
            apiVersion: grid.praxis-proxy.io/v1alpha1
            kind: GridNetwork
            metadata: {{name: llmd-grid}}
            spec: {{gridId: llmd}}
            ---
            apiVersion: grid.praxis-proxy.io/v1alpha1
            kind: InferenceProvider
            metadata: {{name: {provider}}}
            spec:
              gridNetworkRef: llmd-grid
              endpoint: http://vllm-{site}:8000
              models: [{{name: Org/Pool-Model}}]
            """))
    return root


def test_pool_metrics_scenario_judges_its_pools_under_the_folders_provider_names(tmp_path: Path) -> None:
    """Providers named by the folder (not pool-a and pool-b) are the pools the scenario ranks and routes to:
    the scenario waited for ranks keyed by its own pool names and never saw them."""
    folder = _llmd_folder(tmp_path / "grid-llmd-pool-metrics")
    report_path = tmp_path / "report.yaml"
    run = subprocess.run(
        [sys.executable, "-m", "harness.cli", "demo", "grid-llmd-pool-metrics", "--demo-dir", str(folder),
         "--report", str(report_path), "--", "-k", "each_sites_operator_scrapes_and_scores_its_pool"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    report = yaml.safe_load(report_path.read_text())
    demo = report["profiles"][0]["demo"]
    assert demo["statistics"]["passed"] == 1, demo
    taken = report["demoInputs"]["taken"]
    assert taken["providers"] == {site: [name] for site, name in LLMD_PROVIDERS.items()}, taken
    assert (taken["network"], taken["model"]) == ("llmd-grid", "Org/Pool-Model"), taken
    assert "runs with the folder's network llmd-grid, model Org/Pool-Model" in run.stdout, run.stdout[-2000:]
    used = report["demoInputs"]["used"]
    for site in LLMD_PROVIDERS:
        assert f"resources/{site}/grid.yaml: metadata.name" in used, used
    assert any(key.endswith("spec.models.0.name") for key in used), used
