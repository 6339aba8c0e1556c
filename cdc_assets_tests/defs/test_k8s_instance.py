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


def test_a_micro_batch_tells_its_k8s_pod_its_tables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``CDC_ASSETS_K8S_RUN_TABLES=1`` the ``new_kafka_offsets`` sensor's run carries the
    ``dagster-k8s/config`` tag; dagster-k8s reads from it the pod's ``CDC_ASSETS_RUN_TABLES``,
    and the definitions built from that variable hold every asset and check the run selects."""
    from dagster_k8s.job import get_user_defined_k8s_config

    from cdc_assets.definitions import build_defs
    from cdc_assets.resources import KafkaResource
    from cdc_assets.run_tables import K8S_CONFIG_TAG, RUN_TABLES_ENV, tables_from_env
    from cdc_assets.settings import load_settings

    def latest_offsets(self: KafkaResource, topics: list[str]) -> dict[str, dict[int, int]]:
        return {t: {0: 3} for t in topics if "order" in t}

    monkeypatch.setattr(KafkaResource, "latest_offsets", latest_offsets)
    env = {"CDC_ASSETS_HOME": str(tmp_path), "CDC_ASSETS_SPECS": str(PROJECT_ROOT / "table_specs")}
    kafka = KafkaResource(bootstrap_servers="127.0.0.1:9", home=str(tmp_path))
    plain = build_defs(settings=load_settings(env))
    on_k8s = build_defs(settings=load_settings({**env, "CDC_ASSETS_K8S_RUN_TABLES": "1"}))
    requests = {}
    for name, defs in (("plain", plain), ("k8s", on_k8s)):
        sensor = defs.get_sensor_def("new_kafka_offsets")
        with dg.instance_for_test() as instance:
            result = sensor(dg.build_sensor_context(instance=instance, resources={"kafka": kafka}))
        assert isinstance(result, dg.SensorResult)
        (requests[name],) = result.run_requests or []
    assert K8S_CONFIG_TAG not in requests["plain"].tags
    request = requests["k8s"]
    pod = get_user_defined_k8s_config(request.tags)
    (variable,) = pod.container_config["env"]
    assert variable["name"] == RUN_TABLES_ENV
    tables = tables_from_env({RUN_TABLES_ENV: variable["value"]})
    assert tables == {"order_items", "orders"}
    # A run worker given that variable builds every asset and check the run selects.
    worker = build_defs(settings=load_settings(env), only_tables=tables)
    graph = worker.resolve_asset_graph()
    assert set(request.asset_selection or []) <= set(graph.get_all_asset_keys())
    assert set(request.asset_check_keys or []) <= set(graph.asset_check_keys)
