"""A mixed CDC workload for a table spec: inserts, repeated updates, deletes and re-inserts,
primary-key updates and TOAST placeholders, as Kafka records in source order.
"""

from __future__ import annotations

import random

from cdc_assets.schema.wire import FieldPlan
from cdc_assets.spec.models import TableSpec
from cdc_assets_dev.demo.events.factory import DebeziumEventFactory
from cdc_assets_dev.demo.events.rows import TEXTUAL_KINDS, make_key, random_row
from cdc_assets_dev.demo.events.values import TOAST, KafkaRecord


def _toastable(plan: FieldPlan) -> bool:
    if plan.key:
        return False
    if plan.element is not None:
        return True  # a PostgreSQL array is stored out of line once large
    if plan.natural.name == "binary":
        return plan.source.kind != "BIT"
    return plan.source.kind in TEXTUAL_KINDS and (plan.source.length or 1_000) >= 64


def workload(
    spec: TableSpec,
    rng: random.Random,
    *,
    keys: int,
    events: int,
    embed_schema: bool = False,
    markers: bool = True,
    key_changes: bool = False,
) -> list[KafkaRecord]:
    """A realistic mixed CDC stream of ``events`` change events over ``keys`` entities.

    Snapshot reads of half the keys come first; then creates, repeated updates of the same keys
    (some grouped into multi-row statements), deletes each followed by its tombstone, and
    re-inserts of deleted keys. PostgreSQL streams look like the default replica identity: update
    events carry no before image, delete events only the key, and unchanged large columns may
    arrive as the TOAST placeholder. With ``markers``, heartbeats and transaction BEGIN/END
    records around multi-row statements are interleaved (they do not count as events). With
    ``key_changes``, some updates change the primary key, sent as Debezium does: a delete of the
    old key, its tombstone and a create of the new key in one transaction (one event).
    """
    factory = DebeziumEventFactory(spec, embed_schema=embed_schema)
    plans = factory.plans
    postgres = spec.source.connector == "postgresql"
    key_rows = [make_key(spec, n) for n in range(keys)]
    live: dict[int, dict[str, object]] = {}
    deleted: list[int] = []
    unused = list(range(keys))
    out: list[KafkaRecord] = []

    for n in range(min(keys // 2, max(events // 4, 1), events)):
        unused.remove(n)
        live[n] = random_row(spec, rng, key_rows[n])
        out.append(factory.read(live[n]))
    count = len(out)

    def changed(n: int) -> tuple[dict[str, object], dict[str, object]]:
        """The stored row after an update, and the image the event carries."""
        before = live[n]
        fresh = random_row(spec, rng, key_rows[n])
        data = [p for p in plans if not p.key]
        picked = {p.name for p in rng.sample(data, k=min(len(data), rng.randint(1, 3)))}
        stored = {k: (fresh[k] if k in picked else v) for k, v in before.items()}
        image = dict(stored)
        if postgres:
            for plan in plans:
                toastable = _toastable(plan) and stored[plan.name] is not None
                if plan.name not in picked and toastable and rng.random() < 0.3:
                    image[plan.name] = TOAST  # unchanged out-of-line value: not sent
        return stored, image

    def key_only(n: int) -> dict[str, object]:
        return dict(key_rows[n]) if postgres else dict(live[n])

    while count < events:
        roll = rng.random()
        if markers and rng.random() < 0.03:
            out.append(factory.heartbeat())
        if roll < 0.22 and unused:
            n = unused.pop(rng.randrange(len(unused)))
            live[n] = random_row(spec, rng, key_rows[n])
            out.append(factory.create(live[n]))
            count += 1
        elif roll < 0.32 and deleted:
            n = deleted.pop(rng.randrange(len(deleted)))
            live[n] = random_row(spec, rng, key_rows[n])
            out.append(factory.create(live[n]))
            count += 1
        elif roll < 0.42 and len(live) > 1:
            n = rng.choice(sorted(live))
            out.append(factory.delete(key_only(n)))
            out.append(factory.tombstone(key_rows[n]))
            del live[n]
            deleted.append(n)
            count += 1
        elif roll < 0.5 and len(live) > 2:
            targets = rng.sample(sorted(live), k=min(len(live), rng.randint(2, 4), events - count))
            with factory.statement():
                if markers:
                    out.append(factory.transaction("BEGIN"))
                for n in targets:
                    stored, image = changed(n)
                    out.append(factory.update(None if postgres else live[n], image))
                    live[n] = stored
                if markers:
                    out.append(factory.transaction("END", event_count=len(targets)))
            count += len(targets)
        elif key_changes and roll < 0.54 and len(live) > 1 and unused:
            n = rng.choice(sorted(live))
            m = unused.pop(rng.randrange(len(unused)))
            moved = {**live[n], **key_rows[m]}
            with factory.statement():
                out.append(factory.delete(key_only(n)))
                out.append(factory.tombstone(key_rows[n]))
                out.append(factory.create(moved))
            live[m] = moved
            del live[n]
            deleted.append(n)
            count += 1
        elif live:
            n = rng.choice(sorted(live))
            stored, image = changed(n)
            out.append(factory.update(None if postgres else live[n], image))
            live[n] = stored
            count += 1
        elif unused or deleted:
            continue
        else:
            break
    return out
