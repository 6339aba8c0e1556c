"""`cdc-assets migrate-asset-keys`: move an instance's history to keys that name their layer."""

from __future__ import annotations

import argparse

from rich.table import Table

from cdc_assets.cli.common import console, dagster_instance
from cdc_assets.settings import Settings


def cmd_migrate_asset_keys(settings: Settings, args: argparse.Namespace) -> int:
    """Copy the newest materialization per partition (and the newest observation) of each
    ``raw/<t>``, ``cdc/<t>``, ``bucketed/<t>``, ``schema/<t>`` to its new key; wipe the old key
    unless --keep-old. Idempotent: a second run finds no old key."""
    from cdc_assets.assets.key_migration import migrate_asset_keys
    from cdc_assets.spec import load_specs

    tables = [s.name for s in load_specs(settings.specs_dir)]
    moves = migrate_asset_keys(
        dagster_instance(settings), tables, keep_old=args.keep_old, dry_run=args.dry_run
    )
    if not moves:
        console.print("no asset key to migrate: the instance has none of the old keys")
        return 0
    table = Table("old key", "new key", "materializations", "observations")
    for m in moves:
        table.add_row(m.old, m.new, str(m.materializations), str(m.observations))
    console.print(table)
    verb = "would move" if args.dry_run else "moved"
    kept = " (old keys kept)" if args.keep_old and not args.dry_run else ""
    console.print(f"{verb} the history of {len(moves)} asset keys{kept}")
    return 0
