"""Schemathesis hooks for the OpenAPI fuzz test (openapi_fuzz.rs): they honour exactly the rules the
document states and no schema language can, and nothing else.

An operation lists such rules in `x-weft-rules` (each `{"id": ..., "rule": ...}`); in positive mode
a generated request is brought inside each rule its operation states (so that a request the
document calls valid must be accepted), and an operation naming a rule this file does not know
fails the run. Negative requests are left alone: the document already calls them invalid.

A `501` the operation documents is its answer, not a server error.
"""

import copy
import os
import time
import urllib.parse

import schemathesis
from schemathesis.generation import GenerationMode

# The tenant the test calls as (its `Coopr-TenantID`).
TENANT = os.environ.get("WEFT_FUZZ_TENANT", "fuzz")


def _int(v):
    """A value the lenient reader takes as a whole number, or None."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            return None
    return None


def body_id_is_path_id(case):
    if isinstance(case.body, dict):
        # Path parameters are kept percent-encoded.
        case.body["id"] = urllib.parse.unquote(str(case.path_parameters["id"]))


def _lease(template):
    """Keeps a template's initial lease within its max lease (0: forever / unlimited)."""
    if not isinstance(template, dict):
        return
    admin = template.get("administration")
    if not isinstance(admin, dict):
        return
    lease = admin.get("leaseduration")
    if not isinstance(lease, dict):
        return
    top = _int(lease.get("max")) or 0
    initial = _int(lease.get("initial")) or 0
    if top != 0 and (initial == 0 or initial > top):
        lease["initial"] = lease["max"]


def _walk(v, fix):
    """Calls `fix` on every object in `v` (a template may be the body, or in an imported catalog)."""
    if isinstance(v, dict):
        fix(v)
        for x in v.values():
            _walk(x, fix)
    elif isinstance(v, list):
        for x in v:
            _walk(x, fix)


def lease_initial_within_max(case):
    _walk(case.body, _lease)


def _min_max(obj):
    """Keeps `constraints.size` and `quantities` with min not above max."""
    for key, low in (("size", 1), ("quantities", 0)):
        r = obj.get(key)
        if not isinstance(r, dict):
            continue
        top = _int(r.get("max"))
        if top is not None and (_int(r.get("min")) if r.get("min") is not None else low) > top:
            r["min"] = r["max"]


def min_not_above_max(case):
    _walk(case.body, _min_max)


def start_not_after_end(case):
    start, end = _int(case.query.get("start")), _int(case.query.get("end"))
    if start is None:
        return
    if end is None:
        # The end defaults to now.
        if start > time.time() - 5:
            case.query["end"] = case.query["start"]
    elif start > end:
        case.query["start"], case.query["end"] = case.query["end"], case.query["start"]


def tenant_is_callers(case):
    if "tenant" in case.query:
        case.query["tenant"] = TENANT


def webhook_url(case):
    # The fuzz test's server allows loopback; nothing listens on port 9 (discard) there.
    if isinstance(case.body, dict):
        case.body["url"] = "http://127.0.0.1:9/weft-fuzz"


RULES = {
    "body-id-is-path-id": body_id_is_path_id,
    "lease-initial-within-max": lease_initial_within_max,
    "min-not-above-max": min_not_above_max,
    "start-not-after-end": start_not_after_end,
    "tenant-is-callers": tenant_is_callers,
    "webhook-url": webhook_url,
}


def _rules(operation):
    raw = operation.definition.raw
    out = []
    for r in raw.get("x-weft-rules", []):
        if r["id"] not in RULES:
            raise RuntimeError(f"{operation.label} states rule {r['id']}, which the fuzz test does not know")
        out.append(RULES[r["id"]])
    return out


@schemathesis.hook
def map_case(context, case):
    meta = case.meta
    if meta is None or meta.generation.mode != GenerationMode.POSITIVE:
        return case
    rules = _rules(context.operation)
    if rules:
        # Generated cases may share their containers: change copies.
        case.body = copy.deepcopy(case.body)
        case.query = copy.deepcopy(case.query)
    for apply in rules:
        apply(case)
    return case


@schemathesis.hook
def filter_failure(context, failure, case, response):
    documented = case.operation.definition.raw.get("responses", {})
    return not (response.status_code == 501 and "501" in documented)
