"""The Dagster instance documented for Kubernetes (docs/cluster.md) passes Dagster's own
validation, with dagster-k8s's `K8sRunLauncher` built from it (issue 59).

No cluster runs here: the launcher is built with ``load_incluster_config: false`` and a
kubeconfig of the test's own, which the launcher reads without calling any API.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import yaml

from cdc_assets_tests.conftest import PROJECT_ROOT

pytestmark = pytest.mark.defs

DOC = PROJECT_ROOT / "docs" / "cluster.md"
BLOCK = re.compile(
    r"<!-- k8s-instance:start -->\s*```yaml\n(.*?)```\s*<!-- k8s-instance:end -->", re.DOTALL
)
KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: cdc
  user: {token: "not-a-token"}
contexts:
- name: local
  context: {cluster: local, user: cdc, namespace: dagster}
current-context: local
"""


def documented() -> dict[str, Any]:
    found = BLOCK.search(DOC.read_text(encoding="utf-8"))
    assert found, f"{DOC} lost its k8s-instance block"
    config = yaml.safe_load(found.group(1))
    assert isinstance(config, dict)
    return config


def without_cluster(config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """``config`` with the launcher reading a kubeconfig file instead of the pod's account."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG, encoding="utf-8")
    launcher = config["run_launcher"]
    local = {**launcher["config"], "load_incluster_config": False}
    local["kubeconfig_file"] = str(kubeconfig)
    return {**config, "run_launcher": {**launcher, "config": local}}


def test_the_documented_instance_builds_a_k8s_run_launcher(tmp_path: Path) -> None:
    config = without_cluster(documented(), tmp_path)
    with dg.instance_for_test(overrides=config) as instance:
        launcher: Any = instance.run_launcher  # dagster_k8s ships no type information
        assert type(launcher).__name__ == "K8sRunLauncher"
        assert type(launcher).__module__.startswith("dagster_k8s")
        assert launcher.job_namespace == "dagster"
        assert any(v.startswith("CDC_ASSETS_SPARK_REMOTE=") for v in launcher.env_vars)
        assert instance.run_retries_enabled


def test_a_misspelt_launcher_key_fails_dagster_s_validation(tmp_path: Path) -> None:
    config = without_cluster(documented(), tmp_path)
    launcher = config["run_launcher"]["config"]
    launcher["job_namspace"] = launcher.pop("job_namespace")
    with (
        pytest.raises(dg.DagsterInvalidConfigError, match="job_namspace"),
        dg.instance_for_test(overrides=config) as instance,
    ):
        _ = instance.run_launcher


def test_the_documented_settings_are_the_project_s() -> None:
    """Every ``CDC_ASSETS_`` variable the block sets is one the settings read."""
    settings_source = (PROJECT_ROOT / "cdc_assets" / "settings.py").read_text(encoding="utf-8")
    launcher = documented()["run_launcher"]["config"]
    names = [v.split("=", 1)[0] for v in launcher["env_vars"]]
    assert names
    unknown = [n for n in names if f'"{n}"' not in settings_source]
    assert unknown == []
