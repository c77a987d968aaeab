"""Per-tenant uploaders: the landing bucket policy statements that let each tenant's uploading
system put files under its own prefix, and only there (docs/security.md, "Uploaders").

Pure model, no CDK import: the shared stack renders these statements into the landing
bucket's policy (`shared.py`) and the capacity check measures the same statements against
S3's 20 KB bucket policy limit (`capacity.py`), so the two cannot drift.

Per tenant with `uploaders`, three statements:

* **Allow** exactly `s3:PutObject` and `s3:AbortMultipartUpload` on `<landing>/<prefix>*`.
  PutObject also authorizes the multipart calls (`aws s3 cp` uses multipart above 8 MB);
  AbortMultipartUpload lets a failed multipart upload clean its parts up at once instead of
  leaving them to the 7-day lifecycle rule. It can neither create, read nor delete an object.
* **Deny** every other action on the bucket and its objects (`NotAction`), and
* **Deny** those two actions outside the prefix (`NotResource`),

both for the role and user ARNs only. An Allow in a bucket policy cannot take away what a
same-account principal's own identity policy grants (`s3:*` on `*`, say); the Denies do, so
isolation holds whatever the uploader's identity policy says. An account root ARN is another
account (cross-account): there both policies must allow, so the Allow alone bounds it, and a
Deny naming a root ARN would name every principal of that account, the pipeline's own roles
and the operators if it is this account (`config._check_uploaders` refuses this account's root
when `targets:` declare it). The Denies name the uploaders only: a principal listed as an
uploader must be used for uploading only (it loses every other action on the bucket), and a
role or user uploads for one tenant (`config._check_uploaders`).

TLS: the bucket's `enforce_ssl` statement (Deny `s3:*` to every principal without
`aws:SecureTransport`) covers the uploaders too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipeline_constructs import names

#: What an uploader may do under its tenant's prefix, and nothing else.
UPLOAD_ACTIONS = ("s3:PutObject", "s3:AbortMultipartUpload")
#: S3's limit of a bucket policy (not adjustable), in bytes.
BUCKET_POLICY_LIMIT_BYTES = 20 * 1024
_ACCOUNT_ROOT = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:root$")
#: The longest landing bucket ARN a deployment can have (partition `aws-us-gov`, a 14-character
#: Region such as `ap-southeast-5`): the size check counts with it, so it never undercounts.
LONGEST_LANDING_BUCKET_ARN = f"arn:aws-us-gov:s3:::{names.landing_bucket_name('123456789012', 'ap-southeast-5')}"


@dataclass(frozen=True)
class TenantUploaders:
    """One tenant's uploaders: who may put files under which prefix."""

    tenant_id: str
    prefix: str
    principals: tuple[str, ...]

    @property
    def identities(self) -> tuple[str, ...]:
        """The role and user ARNs: the principals the Denies name (not account roots)."""
        return tuple(p for p in self.principals if not is_account_root(p))


def is_account_root(arn: str) -> bool:
    """`arn:aws:iam::<account>:root`: every principal of that account the account allows."""
    return bool(_ACCOUNT_ROOT.match(arn))


def sid_prefix(tenant_id: str) -> str:
    """`Uploaders<id>` with each hyphen as `X` (ids are lowercase: one id, one Sid), e.g.
    `UploadersacmeXeu` for `acme-eu`."""
    return "Uploaders" + tenant_id.replace("-", "X")


def statements(tenant: TenantUploaders, bucket_arn: str) -> list[dict[str, Any]]:
    """The tenant's statements in IAM JSON (`bucket_arn` may be a CDK token); none without uploaders."""
    if not tenant.principals:
        return []
    own = f"{bucket_arn}/{tenant.prefix}*"
    sid = sid_prefix(tenant.tenant_id)
    found: list[dict[str, Any]] = [{
        "Sid": f"{sid}Put",
        "Effect": "Allow",
        "Principal": {"AWS": list(tenant.principals)},
        "Action": list(UPLOAD_ACTIONS),
        "Resource": own,
    }]
    if tenant.identities:
        found += [
            {
                "Sid": f"{sid}DenyOtherActions",
                "Effect": "Deny",
                "Principal": {"AWS": list(tenant.identities)},
                "NotAction": list(UPLOAD_ACTIONS),
                "Resource": [bucket_arn, f"{bucket_arn}/*"],
            },
            {
                "Sid": f"{sid}DenyOtherKeys",
                "Effect": "Deny",
                "Principal": {"AWS": list(tenant.identities)},
                "Action": list(UPLOAD_ACTIONS),
                "NotResource": own,
            },
        ]
    return found


def enforce_ssl_statement(bucket_arn: str) -> dict[str, Any]:
    """The statement CDK's `enforce_ssl=True` writes (the policy's one statement without uploaders)."""
    return {
        "Action": "s3:*",
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Resource": [bucket_arn, f"{bucket_arn}/*"],
    }


def policy_document(tenants: Sequence[TenantUploaders], bucket_arn: str = LONGEST_LANDING_BUCKET_ARN) -> dict[str, Any]:
    """The landing bucket's whole policy: TLS only, then each tenant's uploader statements."""
    found = [enforce_ssl_statement(bucket_arn)]
    for tenant in tenants:
        found += statements(tenant, bucket_arn)
    return {"Statement": found, "Version": "2012-10-17"}


def policy_bytes(tenants: Sequence[TenantUploaders]) -> int:
    """The policy's size as CloudFormation sends it (compact JSON), at the longest bucket ARN."""
    return len(json.dumps(policy_document(tenants), separators=(",", ":")).encode())


def tenant_bytes(tenant: TenantUploaders) -> int:
    """What one tenant's statements add to the policy (with the comma between statements)."""
    return sum(len(json.dumps(s, separators=(",", ":")).encode()) + 1
               for s in statements(tenant, LONGEST_LANDING_BUCKET_ARN))
