"""schemathesis hooks of the API fuzz (schemathesis.toml loads them): the part of the user_id
rule that the OpenAPI document cannot say.

A user_id holds no Unicode format character (category Cf) and no default-ignorable one
(Default_Ignorable_Code_Point), and is in NFC. The document's pattern names the characters of the
Basic Multilingual Plane, but an ECMA-262 pattern without the `u` flag cannot name the few beyond
it, and no pattern can say NFC (whether a mark composes with the character before it); the
fuzzer does generate such ids: they are schema-valid, and the server rightly refuses them (400).
These hooks drop those ids instead of letting them fail the positive_data_acceptance check.
REFUSED_BEYOND_BMP is the server's table (the Rust crates unicode-properties and icu_properties);
tests/api/openapi.rs checks that it still is. NFC is Python's own unicodedata (the server uses
the Rust crate unicode-normalization; both follow Unicode's stable normalization).
"""

import hashlib
import hmac
import json
import os
import time
import unicodedata

import schemathesis

REFUSED_BEYOND_BMP = [
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
]


def _names_a_refused_user_id(container):
    value = container.get("user_id") if isinstance(container, dict) else None
    if not isinstance(value, str):
        return False
    refused = any(lo <= ord(c) <= hi for c in value for lo, hi in REFUSED_BEYOND_BMP)
    return refused or not unicodedata.is_normalized("NFC", value)


@schemathesis.hook
def filter_body(context, body):
    return not _names_a_refused_user_id(body)


@schemathesis.hook
def filter_query(context, query):
    return not _names_a_refused_user_id(query)


# POST /payments/events is signed (Seckill-Signature: HMAC-SHA256 of "<t>.<raw body>"): the fuzz
# signs each generated event with the fuzz service's secret (SECKILL_PAYMENT_SECRET, which
# xtask/src/fuzz.rs gives both), so the fuzzer reaches the event's handling, not only the 401: the
# generated header's value is replaced by a valid signature (a case without the header keeps
# testing its absence). The body is serialized as the requests transport serializes it
# (json.dumps, default separators).
@schemathesis.hook
def before_call(context, case, kwargs):
    secret = os.environ.get("SECKILL_PAYMENT_SECRET")
    if not secret or case.operation.path != "/payments/events" or case.method.upper() != "POST":
        return
    # A case without the header tests its absence (401): left unsigned.
    if "Seckill-Signature" not in (case.headers or {}):
        return
    try:
        raw = json.dumps(case.body).encode()
    except (TypeError, ValueError):
        return
    at = str(int(time.time()))
    signature = hmac.new(secret.encode(), at.encode() + b"." + raw, hashlib.sha256).hexdigest()
    case.headers = {**(case.headers or {}), "Seckill-Signature": f"t={at},v1={signature}"}
