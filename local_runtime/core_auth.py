"""The local core system's check of a SigV4 signature (`sink.auth` sigv4), recomputed with botocore
from the request and the workers' credentials: what API Gateway would check, so the end-to-end suite
shows that register signs what it sends, the body's hash included.
"""

from __future__ import annotations

import datetime as _dt
import hmac
import re
from collections.abc import Mapping
from dataclasses import dataclass

#: How far a signature's `X-Amz-Date` may be from now (AWS allows 5 minutes; some leeway for tests).
MAX_CLOCK_SKEW = _dt.timedelta(minutes=15)
_AUTHORIZATION = re.compile(
    r"^AWS4-HMAC-SHA256 Credential=(?P<access_key>[^/]+)/(?P<date>\d{8})/(?P<region>[^/]+)/(?P<service>[^/]+)/"
    r"aws4_request, SignedHeaders=(?P<signed>[a-z0-9;-]+), Signature=(?P<signature>[0-9a-f]{64})$"
)


@dataclass(frozen=True)
class SigV4Key:
    """The credentials a signer is expected to use, and what the signature must be for."""

    access_key: str
    secret_key: str
    token: str | None
    service: str
    region: str


def sigv4_problem(
    key: SigV4Key,
    *,
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    now: _dt.datetime | None = None,
) -> str | None:
    """None if the request carries a valid signature by `key`, else what is wrong (no secret in it)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    lower = {name.lower(): value for name, value in headers.items()}
    match = _AUTHORIZATION.match(lower.get("authorization", ""))
    if match is None:
        return "no AWS4-HMAC-SHA256 Authorization header"
    if (match["access_key"], match["region"], match["service"]) != (key.access_key, key.region, key.service):
        return (
            f"signed by {match['access_key']} for {match['service']} in {match['region']}, "
            f"expected {key.access_key} for {key.service} in {key.region}"
        )
    stamp = lower.get("x-amz-date", "")
    try:
        signed_at = _dt.datetime.strptime(stamp, "%Y%m%dT%H%M%SZ").replace(tzinfo=_dt.UTC)
    except ValueError:
        return "no valid X-Amz-Date header"
    if abs((now or _dt.datetime.now(_dt.UTC)) - signed_at) > MAX_CLOCK_SKEW:
        return "the signature is too old"
    signed = match["signed"].split(";")
    if "host" not in signed or any(name not in lower for name in signed):
        return "a signed header is missing"
    request = AWSRequest(method=method, url=url, data=body, headers={name: lower[name] for name in signed})
    request.context["timestamp"] = stamp
    signer = SigV4Auth(Credentials(key.access_key, key.secret_key, key.token), key.service, key.region)
    expected = signer.signature(signer.string_to_sign(request, signer.canonical_request(request)), request)
    if not hmac.compare_digest(expected, match["signature"]):
        return "the signature does not match the request"
    return None
