"""Protection of sensitive values, rendered as Spark SQL (pure).

A column with ``protect`` is stored as a string made from its decoded value's text (what
``CAST(value AS STRING)`` gives): ``hash`` is ``hmac:<key id>:<hex>`` (HMAC-SHA256), ``encrypt``
is ``enc:<key id>:<base64>`` (AES-256-GCM whose IV is an HMAC of the value, so equal values
encrypt equally and joins on the column still work; ``aes_decrypt`` with the key reads it back),
the masks keep a documented part of the text. Every protection is applied in the ingest's query,
before anything is written: the typed column, the row image kept as ``_row_json`` and the before
image. A dead letter's payload is encrypted whole (a record that cannot be read cannot have its
fields found), and a redrive decrypts it and protects what it reads like any other record.

The keys are derived from one secret (`ProtectionKey`), and appear in the SQL as literals of
derived keys, never of the secret. Spark has no HMAC function: it is computed from ``sha2`` as
RFC 2104 defines it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import unicodedata
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from cdc_assets.spec.json_paths import Each, path_tree
from cdc_assets.spec.models import Protection
from cdc_assets.sql.ddl import literal

HASH_PREFIX = "hmac"
ENCRYPTED_PREFIX = "enc"
KEY_ID_RE = re.compile(r"^[a-z0-9]{1,16}$")
_BLOCK = 64  # SHA-256's block size in bytes
# Every key literal the SQL holds: Spark redacts what matches in the plans it shows (the
# sessions set spark.sql.redaction.string.regex to it).
KEY_LITERALS = r"unhex\('[0-9a-f]{64,}'\)"
_IV_BYTES = 12  # GCM's standard nonce


@dataclass(frozen=True)
class ProtectionKey:
    """The secret the protections are keyed with, and the id stored with every value it made
    (so a rotated key's values stay readable and tell which key made them)."""

    key_id: str
    secret: bytes

    def __post_init__(self) -> None:
        if not KEY_ID_RE.match(self.key_id):
            raise ValueError(f"protection key id {self.key_id!r}: 1-16 lowercase letters or digits")
        if len(self.secret) < 16:
            raise ValueError("the protection key must be at least 16 bytes")

    def _derived(self, purpose: str) -> bytes:
        return hmac.new(self.secret, f"cdc-assets/{purpose}".encode(), hashlib.sha256).digest()

    @property
    def hash_key(self) -> bytes:
        return self._derived("hash")

    @property
    def encryption_key(self) -> bytes:
        return self._derived("encrypt")

    @property
    def iv_key(self) -> bytes:
        return self._derived("iv")

    def __repr__(self) -> str:  # never the secret
        return f"ProtectionKey(key_id={self.key_id!r})"


def hmac_sql(key: bytes, message: str) -> str:
    """HMAC-SHA256 of ``message`` (a BINARY expression) as lowercase hex, from ``sha2``."""
    padded = key.ljust(_BLOCK, b"\0")
    inner = bytes(b ^ 0x36 for b in padded).hex()
    outer = bytes(b ^ 0x5C for b in padded).hex()
    digest = f"unhex(sha2(concat(unhex('{inner}'), {message}), 256))"
    return f"sha2(concat(unhex('{outer}'), {digest}), 256)"


def protect_sql(protection: Protection, text: str, key: ProtectionKey | None) -> str:
    """SQL of the protected form of ``text`` (a STRING expression; null stays null)."""
    if protection is Protection.MASK_EMAIL:
        return (
            f"CASE WHEN instr({text}, '@') > 0 "
            f"THEN concat('***@', substring_index({text}, '@', -1)) "
            f"WHEN {text} IS NOT NULL THEN '***' END"
        )
    if protection is Protection.MASK_LAST4:
        return (
            f"CASE WHEN char_length({text}) <= 4 THEN repeat('*', char_length({text})) "
            f"ELSE concat(repeat('*', char_length({text}) - 4), right({text}, 4)) END"
        )
    if protection is Protection.MASK_SHAPE:
        # Digits become 9, which a second mask keeps: every mask is idempotent.
        return f"mask({text}, 'X', 'x', '9', NULL)"
    if key is None:
        raise ValueError(f"{protection.value} needs a protection key")
    message = f"CAST({text} AS BINARY)"
    if protection is Protection.HASH:
        return (
            f"concat({literal(f'{HASH_PREFIX}:{key.key_id}:')}, {hmac_sql(key.hash_key, message)})"
        )
    iv = f"unhex(substr({hmac_sql(key.iv_key, message)}, 1, {2 * _IV_BYTES}))"
    sealed = f"aes_encrypt({message}, unhex('{key.encryption_key.hex()}'), 'GCM', 'DEFAULT', {iv})"
    return f"concat({literal(f'{ENCRYPTED_PREFIX}:{key.key_id}:')}, {_base64(sealed)})"


def protect_again_sql(
    protection: Protection,
    text: str,
    key: ProtectionKey | None,
    old_keys: Sequence[ProtectionKey] = (),
) -> str:
    """``text`` protected unless it is null or already in ``protection``'s stored form: for
    rewriting values stored before their protection, never protecting one twice. With
    ``old_keys``, an encrypted value made with one of them is decrypted and encrypted again with
    ``key`` (re-keying); one made with another retired key is kept."""
    keep = f"CASE WHEN {text} IS NULL OR ({protected_form_sql(protection, text)}) THEN {text} "
    if protection is Protection.ENCRYPT and old_keys and key is not None:
        current = literal(f"{ENCRYPTED_PREFIX}:{key.key_id}:")
        cases = " ".join(
            f"WHEN {literal(old.key_id)} THEN "
            f"{protect_sql(protection, decrypt_sql(text, old), key)}"
            for old in old_keys
        )
        keep = (
            f"CASE WHEN {text} IS NULL OR startswith({text}, {current}) THEN {text} "
            f"WHEN {protected_form_sql(protection, text)} "
            f"THEN CASE split_part({text}, ':', 2) {cases} ELSE {text} END "
        )
    return f"{keep}ELSE {protect_sql(protection, text, key)} END"


def decrypt_sql(value: str, key: ProtectionKey) -> str:
    """The text ``encrypt`` made ``value`` (a STRING ``enc:<key id>:<base64>``) from, with
    ``key``; the inverse of `protect_sql`'s encryption (GCM keeps its IV in front)."""
    body = f"unbase64(split_part({value}, ':', 3))"
    opened = f"aes_decrypt({body}, unhex('{key.encryption_key.hex()}'), 'GCM')"
    return f"CAST({opened} AS STRING)"


def _node_sql(
    v: str, node: Any, key: ProtectionKey | None, depth: int, again: Sequence[ProtectionKey] | None
) -> str:
    """The VARIANT ``v`` with ``node`` (a protection, an object's members, or `Each` element
    of an array) applied. A value of another shape holds no field of the path: kept as it is."""
    if isinstance(node, Protection):
        text = f"CAST({v} AS STRING)"
        if again is None:
            return f"CAST({protect_sql(node, text, key)} AS VARIANT)"
        return f"CAST({protect_again_sql(node, text, key, again)} AS VARIANT)"
    if isinstance(node, Each):
        e = f"_de{depth}"
        elements = f"try_variant_get({v}, '$', 'array<variant>')"
        each = _node_sql(e, node.node, key, depth + 1, again)
        return f"coalesce(to_variant_object(transform({elements}, {e} -> {each})), {v})"
    members = f"from_json(to_json({v}), 'map<string,variant>')"
    return f"coalesce(to_variant_object({_members_sql(members, node, key, depth + 1, again)}), {v})"


def _members_sql(
    members: str,
    tree: Mapping[str, Any],
    key: ProtectionKey | None,
    depth: int,
    again: Sequence[ProtectionKey] | None,
) -> str:
    k, v = f"_dk{depth}", f"_dv{depth}"
    cases = [
        f"WHEN {k} = {literal(name)} THEN {_node_sql(v, node, key, depth, again)}"
        for name, node in tree.items()
    ]
    return f"transform_values({members}, ({k}, {v}) -> CASE {' '.join(cases)} ELSE {v} END)"


def document_sql(
    text: str,
    paths: Sequence[tuple[str, Protection]],
    key: ProtectionKey | None,
    *,
    again: Sequence[ProtectionKey] | None = None,
) -> str:
    """``text`` (a JSON document) with the value at each path (`spec.json_paths`) protected
    (a member that is an object or array is protected as its compact JSON). A document that is
    not an object, or a path it does not have, is kept as it is. The document is written again
    from Spark's variant: nested objects list their members by name, numbers may be spelled
    otherwise. With ``again`` (retired keys, maybe none), a value already in its protected form
    is kept, or re-keyed (`protect_again_sql`): a rewrite."""
    members = f"from_json({text}, 'map<string,variant>')"
    rewritten = f"to_json({_members_sql(members, path_tree(paths), key, 0, again)})"
    return f"CASE WHEN {text} IS NOT NULL THEN coalesce({rewritten}, {text}) END"


def _base64(binary: str) -> str:
    # Spark's base64 breaks lines every 76 characters (MIME): one line, as Python writes it.
    return f"translate(base64({binary}), '\\r\\n', '')"


# The name `image_sql`'s expressions may use for the field's value as it is (a VARIANT).
IMAGE_VALUE = "_pv"


def image_sql(image: str, protected: Mapping[str, str], dropped: Collection[str]) -> str:
    """``image`` (a row image's JSON text) with the fields of ``protected`` (field name -> SQL
    of the value to store instead, which may read the value as it is as `IMAGE_VALUE`)
    replaced and those of ``dropped`` removed. The image is
    written again from Spark's variant: values are the same, a number may be spelled otherwise
    (1.50 as 1.5)."""
    parsed = f"from_json({image}, 'map<string,variant>')"
    if dropped:
        names = ", ".join(literal(n) for n in sorted(dropped))
        parsed = f"map_filter({parsed}, (_pk, _pv) -> NOT array_contains(array({names}), _pk))"
    if protected:
        cases = " ".join(
            f"WHEN _pk = {literal(name)} THEN CAST({expr} AS VARIANT)"
            for name, expr in protected.items()
        )
        v = IMAGE_VALUE
        parsed = f"transform_values({parsed}, (_pk, {v}) -> CASE {cases} ELSE {v} END)"
    return f"CASE WHEN {image} IS NOT NULL THEN to_json({parsed}) END"


_FORMS = {
    Protection.HASH: f"^{HASH_PREFIX}:[a-z0-9]{{1,16}}:[0-9a-f]{{64}}$",
    Protection.ENCRYPT: f"^{ENCRYPTED_PREFIX}:[a-z0-9]{{1,16}}:[A-Za-z0-9+/]+=*$",
}


def protected_form_sql(protection: Protection, value: str) -> str:
    """True where ``value`` (a STRING expression, not null) is in ``protection``'s stored form:
    a keyed value's prefix and alphabet, a mask's fixed point (masks are idempotent)."""
    pattern = _FORMS.get(protection)
    if pattern is not None:
        return f"{value} RLIKE {literal(pattern)}"
    return f"{value} = {protect_sql(protection, value, None)}"


def render_protection_audit(
    table: str, values: Sequence[tuple[str, Protection, bool]], dropped: Collection[str] = ()
) -> str:
    """One row of counts over ``table``: ``rows``; per entry ``i`` of ``values`` (a STRING
    expression over the table's columns, or with its flag an ARRAY<STRING> of values, and the
    protection its values must be in the form of) ``plain_i`` (values not in that form) and,
    for keyed protections, ``keys_i`` (the key ids of the values); with ``dropped``,
    ``dropped_in_image`` (row images ``_row_json`` holding such a field). Counts only: a value
    never leaves the query."""
    parts = ["count(*) AS `rows`"]
    for i, (value, protection, many) in enumerate(values):
        if many:  # every value at a path through arrays
            form = protected_form_sql(protection, "_v")
            plain = f"filter({value}, _v -> _v IS NOT NULL AND NOT ({form}))"
            parts.append(f"coalesce(sum(size({plain})), 0) AS `plain_{i}`")
            ids = f"transform(filter({value}, _v -> {form}), _v -> split_part(_v, ':', 2))"
            keys = f"array_distinct(flatten(collect_set(array_distinct({ids}))))"
        else:
            form = protected_form_sql(protection, value)
            parts.append(f"count_if({value} IS NOT NULL AND NOT ({form})) AS `plain_{i}`")
            keys = f"collect_set(CASE WHEN {form} THEN split_part({value}, ':', 2) END)"
        if protection.keyed:
            parts.append(f"{keys} AS `keys_{i}`")
    if dropped:
        names = ", ".join(literal(n) for n in sorted(dropped))
        parts.append(
            "count_if(_row_json IS NOT NULL AND size(array_intersect("
            f"json_object_keys(_row_json), array({names}))) > 0) AS `dropped_in_image`"
        )
    return f"SELECT {', '.join(parts)} FROM {table}"


def sealed_payload_sql(value: str, key: ProtectionKey) -> str:
    """A dead letter's payload (``value``, BINARY) encrypted whole with a random IV, as
    ``enc:<key id>:<base64>``; `opened_payload_sql` reads it back."""
    sealed = f"aes_encrypt({value}, unhex('{key.encryption_key.hex()}'), 'GCM')"
    return (
        f"CASE WHEN {value} IS NOT NULL "
        f"THEN concat({literal(f'{ENCRYPTED_PREFIX}:{key.key_id}:')}, {_base64(sealed)}) END"
    )


def opened_payload_sql(payload: str, keys: Sequence[ProtectionKey]) -> str:
    """The BINARY value of a dead letter's ``payload`` column: base64, or sealed by
    `sealed_payload_sql` (decrypted with the one of ``keys`` it names; a key not among them is
    an error naming its id, never a null that would read as a tombstone)."""
    sealed = f"startswith({payload}, {literal(ENCRYPTED_PREFIX + ':')})"
    key_id = f"split_part({payload}, ':', 2)"
    missing = (
        f"raise_error(concat('dead letter payload is encrypted with protection key ', {key_id}, "
        "', which is not configured (CDC_ASSETS_PROTECTION_KEY and _KEY_ID, or "
        "CDC_ASSETS_PROTECTION_OLD_KEY_<ID>)'))"
    )
    body = f"unbase64(split_part({payload}, ':', 3))"
    cases = " ".join(
        f"WHEN {literal(k.key_id)} THEN aes_decrypt({body}, unhex('{k.encryption_key.hex()}'), "
        "'GCM')"
        for k in keys
    )
    opened = f"CASE {key_id} {cases} ELSE CAST({missing} AS BINARY) END" if keys else missing
    return f"CASE WHEN {sealed} THEN CAST({opened} AS BINARY) ELSE unbase64({payload}) END"


# Python twins of the protections, for the checks that compare a source's plaintext with the
# mirror (they compare protected forms, and show only those) and for tests.
def value_text(value: object) -> str:
    """A natural value's text as ``CAST(value AS STRING)`` gives it in Spark: what is protected."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, date | datetime):
        return value.isoformat(sep=" ") if isinstance(value, datetime) else value.isoformat()
    return str(value)


def hash_text(text: str, key: ProtectionKey) -> str:
    digest = hmac.new(key.hash_key, text.encode(), hashlib.sha256).hexdigest()
    return f"{HASH_PREFIX}:{key.key_id}:{digest}"


def encrypt_text(text: str, key: ProtectionKey) -> str:
    """What `protect_sql` stores for ``encrypt``: the IV is an HMAC of the text, so this equals
    Spark's value byte for byte."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    data = text.encode()
    iv = hmac.new(key.iv_key, data, hashlib.sha256).digest()[:_IV_BYTES]
    sealed = iv + AESGCM(key.encryption_key).encrypt(iv, data, None)
    return f"{ENCRYPTED_PREFIX}:{key.key_id}:{base64.b64encode(sealed).decode()}"


_SHAPES = {"Lu": "X", "Ll": "x", "Nd": "9"}


def _mask_shape(text: str) -> str:
    # Spark's mask goes by Unicode category: upper- and lowercase letters, decimal digits.
    return "".join(_SHAPES.get(unicodedata.category(ch), ch) for ch in text)


def protect_text(protection: Protection, text: str | None, key: ProtectionKey | None) -> str | None:
    """The Python twin of `protect_sql`."""
    if text is None:
        return None
    if protection is Protection.MASK_EMAIL:
        return "***@" + text.rsplit("@", 1)[1] if "@" in text else "***"
    if protection is Protection.MASK_LAST4:
        return "*" * len(text) if len(text) <= 4 else "*" * (len(text) - 4) + text[-4:]
    if protection is Protection.MASK_SHAPE:
        return _mask_shape(text)
    if key is None:
        raise ValueError(f"{protection.value} needs a protection key")
    return hash_text(text, key) if protection is Protection.HASH else encrypt_text(text, key)


def _json_text(value: Any) -> str:
    """A JSON value's text as Spark's variant casts it to a string."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return str(value)


def protect_document(
    text: str | None, paths: Sequence[tuple[str, Protection]], key: ProtectionKey | None
) -> Any:
    """The Python twin of `document_sql`, as the parsed document (compare documents parsed:
    Spark and Python spell JSON differently)."""
    if text is None:
        return None
    doc = json.loads(text)

    def protected(value: Any, node: Any) -> Any:
        if isinstance(node, Protection):
            return None if value is None else protect_text(node, _json_text(value), key)
        if isinstance(node, Each):
            return [protected(e, node.node) for e in value] if isinstance(value, list) else value
        if isinstance(value, dict):
            for name, sub in node.items():
                if name in value:
                    value[name] = protected(value[name], sub)
        return value

    return protected(doc, path_tree(paths))


def decrypt_text(value: str, key: ProtectionKey) -> str:
    """The plaintext of an ``enc:`` value made with ``key``."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    prefix, key_id, body = value.split(":", 2)
    if prefix != ENCRYPTED_PREFIX or key_id != key.key_id:
        raise ValueError(f"not a value encrypted with protection key {key.key_id!r}")
    raw = base64.b64decode(body)
    return AESGCM(key.encryption_key).decrypt(raw[:_IV_BYTES], raw[_IV_BYTES:], None).decode()
