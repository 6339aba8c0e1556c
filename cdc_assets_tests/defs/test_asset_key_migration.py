"""An instance that ran the old keys gets its history onto the new keys."""

import dagster as dg
import pytest

from cdc_assets.assets.key_migration import migrate_asset_keys
from cdc_assets.assets.keys import asset_key, legacy_key

pytestmark = pytest.mark.defs


def test_newest_event_per_partition_moves_and_old_keys_are_wiped() -> None:
    with dg.instance_for_test() as instance:
        report = instance.report_runless_asset_event
        for n, hour in enumerate(["2026-01-01-00:00", "2026-01-01-01:00", "2026-01-01-00:00"]):
            report(
                dg.AssetMaterialization(
                    legacy_key("cdc", "users"), partition=hour, metadata={"n": n}
                )
            )
        report(dg.AssetObservation(legacy_key("raw", "users"), metadata={"lag": 3}))
        report(dg.AssetMaterialization(legacy_key("schema", "orders")))
        report(dg.AssetMaterialization(asset_key("base", "users")))  # same key before and after

        assert migrate_asset_keys(instance, ["users", "orders"], dry_run=True)
        assert instance.has_asset_key(legacy_key("cdc", "users"))
        assert not instance.has_asset_key(asset_key("cdc", "users"))

        moves = migrate_asset_keys(instance, ["users", "orders"])
        assert {(m.old, m.new, m.materializations, m.observations) for m in moves} == {
            ("cdc/users", "cdc/users_cdc", 2, 0),
            ("raw/users", "raw/users_topic", 0, 1),
            ("schema/orders", "schema/orders_schema", 1, 0),
        }
        cdc = asset_key("cdc", "users")
        assert instance.get_materialized_partitions(cdc) == {"2026-01-01-00:00", "2026-01-01-01:00"}
        latest = instance.fetch_materializations(
            dg.AssetRecordsFilter(cdc, asset_partitions=["2026-01-01-00:00"]), limit=1
        ).records[0]
        assert latest.asset_materialization is not None
        meta = latest.asset_materialization.metadata
        assert meta["n"].value == 2
        assert meta["migrated_from"].value == "cdc/users"
        observed = instance.fetch_observations(asset_key("raw", "users"), limit=1).records
        assert observed[0].asset_observation.metadata["lag"].value == 3  # type: ignore[union-attr]
        for old in (legacy_key("cdc", "users"), legacy_key("raw", "users")):
            assert not instance.has_asset_key(old)
        assert instance.has_asset_key(asset_key("base", "users"))
        assert migrate_asset_keys(instance, ["users", "orders"]) == []
