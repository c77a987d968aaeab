"""Per-tenant uploaders: an S3 access point per tenant with `uploaders`, whose policy lets the
tenant's uploading system put files under its own prefix and do nothing else, and the two
constant landing bucket policy statements that delegate to those access points and keep tagged
uploaders to them (docs/security.md, "Uploaders").

Pure model, no CDK import: the tenant stack renders `access_point_policy` into its access
point (`tenant_pipeline.py`), the shared stack adds `bucket_statements` to the landing
bucket's policy (`shared.py`), and the capacity check measures the same documents against
S3's 20 KB (`capacity.py`), so the three cannot drift.

Why access points: one bucket policy holding a statement per tenant outgrows S3's 20 KB (not
adjustable); each access point has a policy of its own, and the bucket policy's statements are
the same at any tenant count. A role or user is never a statement's `Principal`, only an
`ArnEquals` on `aws:PrincipalArn`: S3 and KMS refuse a `Principal` that does not exist, and
one deleted later leaves the stored policy unusable. Same-account uploaders carry the tag
`UPLOADER_TAG_KEY`, which one bucket statement keeps to the access points. Every statement
and its reason: docs/security.md, "Uploaders".
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lambdas import contract
from pipeline_constructs import names

#: What an uploader may do under its tenant's prefix, and nothing else.
UPLOAD_ACTIONS = ("s3:PutObject", "s3:AbortMultipartUpload")
#: S3's limit of a bucket policy and of an access point policy (neither adjustable), in bytes.
POLICY_LIMIT_BYTES = 20 * 1024
#: The Sid of the bucket policy's statement that delegates the uploads to the access points.
DELEGATION_SID = "UploadsThroughAccessPointsOfThisAccount"
#: The Sid of the bucket policy's statement that keeps tagged uploaders to their access points.
ONLY_THROUGH_ACCESS_POINTS_SID = "UploadersOnlyThroughAccessPoints"
#: The IAM tag (any value) an uploader role or user carries: the landing bucket policy denies a
#: principal with it everything not made through an access point. IAM tag keys allow letters,
#: digits, spaces and `_ . : / = + - @`, up to 128 characters (IAM API reference, `Tag`).
UPLOADER_TAG_KEY = "ordered-ingest:uploader"
_ACCOUNT_ROOT = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:root$")
_LONGEST_ACCOUNT, _LONGEST_REGION, _LONGEST_PARTITION = "123456789012", "ap-southeast-5", "aws-us-gov"
#: The longest landing bucket ARN a deployment can have (partition `aws-us-gov`, a 14-character
#: Region such as `ap-southeast-5`, the longest `qualifier`): the size checks count with it, so
#: they never undercount.
LONGEST_LANDING_BUCKET_ARN = "arn:{}:s3:::{}".format(
    _LONGEST_PARTITION,
    contract.LANDING_BUCKET.render(
        account=_LONGEST_ACCOUNT, region=_LONGEST_REGION, qualifier="a" * contract.MAX_QUALIFIER_LENGTH
    ),
)


def access_point_arn(partition: str, region: str, account: str, name: str) -> str:
    """`arn:<partition>:s3:<region>:<account>:accesspoint/<name>` (the parts may be CDK tokens)."""
    return f"arn:{partition}:s3:{region}:{account}:accesspoint/{name}"


@dataclass(frozen=True)
class TenantUploaders:
    """One tenant's uploaders: who may put files under which prefix, through which access point."""

    tenant_id: str
    prefix: str
    principals: tuple[str, ...]

    @property
    def identities(self) -> tuple[str, ...]:
        """The role and user ARNs: the principals the Denies name (not account roots)."""
        return tuple(p for p in self.principals if not is_account_root(p))

    @property
    def accounts(self) -> tuple[str, ...]:
        """The account root ARNs (other accounts, whose own IAM decides which of their principals)."""
        return tuple(p for p in self.principals if is_account_root(p))

    @property
    def access_point_name(self) -> str:
        return names.upload_access_point_name(self.tenant_id)

    @property
    def longest_access_point_arn(self) -> str:
        """The access point's ARN where it is longest: the size check counts with it."""
        return access_point_arn(_LONGEST_PARTITION, _LONGEST_REGION, _LONGEST_ACCOUNT, self.access_point_name)


def is_account_root(arn: str) -> bool:
    """`arn:aws:iam::<account>:root`: every principal of that account the account allows."""
    return bool(_ACCOUNT_ROOT.match(arn))


def by_principal_arn(identities: Sequence[str]) -> dict[str, Any]:
    """A statement's `Principal` and `Condition` for the role and user ARNs `identities`: every
    principal, narrowed to exactly those ARNs (no wildcard: the module docstring says why)."""
    return {"Principal": {"AWS": "*"}, "Condition": {"ArnEquals": {"aws:PrincipalArn": list(identities)}}}


def allow_principals(sid: str, principals: Sequence[str], **statement: Any) -> list[dict[str, Any]]:
    """The Allow statements that grant `statement` to `principals`: the role and user ARNs by
    condition (`sid`), the account roots by `Principal` (`sid` + "Accounts"); none for an empty kind.
    A statement's own `Condition` is kept beside the principal's."""
    identities = [p for p in principals if not is_account_root(p)]
    accounts = [p for p in principals if is_account_root(p)]
    own = statement.pop("Condition", {})
    found = []
    if identities:
        named = by_principal_arn(identities)
        found.append(
            {
                "Sid": sid,
                "Effect": "Allow",
                "Principal": named["Principal"],
                **statement,
                "Condition": {**named["Condition"], **own},
            }
        )
    if accounts:
        found.append(
            {
                "Sid": f"{sid}Accounts",
                "Effect": "Allow",
                "Principal": {"AWS": accounts},
                **statement,
                **({"Condition": own} if own else {}),
            }
        )
    return found


def tls_only_statement(resources: list[str]) -> dict[str, Any]:
    """Deny every request without TLS to `resources`, whoever sends it (CDK's `enforce_ssl` statement)."""
    return {
        "Action": "s3:*",
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Resource": resources,
    }


def access_point_policy(tenant: TenantUploaders, ap_arn: str) -> dict[str, Any]:
    """The tenant's access point policy in IAM JSON (`ap_arn`, the access point's ARN, may be a CDK token)."""
    own = f"{ap_arn}/object/{tenant.prefix}*"
    found = allow_principals("UploadersPut", tenant.principals, Action=list(UPLOAD_ACTIONS), Resource=own)
    if tenant.identities:
        named = by_principal_arn(tenant.identities)
        found += [
            {
                "Sid": "UploadersDenyOtherActions",
                "Effect": "Deny",
                "Principal": named["Principal"],
                "NotAction": list(UPLOAD_ACTIONS),
                "Resource": [ap_arn, f"{ap_arn}/object/*"],
                "Condition": named["Condition"],
            },
            {
                "Sid": "UploadersDenyOtherKeys",
                "Effect": "Deny",
                "Principal": named["Principal"],
                "Action": list(UPLOAD_ACTIONS),
                "NotResource": own,
                "Condition": named["Condition"],
            },
        ]
    found.append({"Sid": "TlsOnly", **tls_only_statement([ap_arn, f"{ap_arn}/object/*"])})
    return {"Statement": found, "Version": "2012-10-17"}


def delegation_statement(bucket_arn: str, account: str) -> dict[str, Any]:
    """The landing bucket policy's one statement for every tenant's uploaders: the upload
    actions on its objects to any principal, through an access point of `account` (the
    bucket's own) only; each access point's policy then decides who."""
    return {
        "Sid": DELEGATION_SID,
        "Effect": "Allow",
        "Principal": {"AWS": "*"},
        "Action": list(UPLOAD_ACTIONS),
        "Resource": f"{bucket_arn}/*",
        "Condition": {"StringEquals": {"s3:DataAccessPointAccount": account}},
    }


def only_through_access_points_statement(bucket_arn: str) -> dict[str, Any]:
    """Deny every S3 action on the bucket and its objects to any principal tagged
    `UPLOADER_TAG_KEY`, unless the request comes through an access point: a same-account
    uploader cannot go around its access point's Denies, whatever its identity policy grants.

    `Null` false on `aws:PrincipalTag/<key>`: the request's principal carries the tag (a global
    condition key, usable in every policy, a bucket policy included: IAM User Guide, "AWS global
    condition context keys"; a role session carries its role's tags and a user its own, "Pass
    session tags in AWS STS"). `Null` true on `s3:DataAccessPointArn`: the request did not come
    through an access point (S3 sets the key on requests made through one only: Service
    Authorization Reference, "Actions, resources, and condition keys for Amazon S3"; S3 User
    Guide, "Configuring IAM policies for using access points"). Both keys under one operator:
    both must hold. Neither key names anyone, so the statement is the same at any tenant count."""
    return {
        "Sid": ONLY_THROUGH_ACCESS_POINTS_SID,
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "s3:*",
        "Resource": [bucket_arn, f"{bucket_arn}/*"],
        "Condition": {
            "Null": {f"aws:PrincipalTag/{UPLOADER_TAG_KEY}": "false", "s3:DataAccessPointArn": "true"}
        },
    }


def bucket_statements(bucket_arn: str, account: str) -> list[dict[str, Any]]:
    """The landing bucket policy's statements for every tenant's uploaders (the shared stack
    adds them when a tenant has uploaders): the delegation, and tagged uploaders through
    access points only."""
    return [delegation_statement(bucket_arn, account), only_through_access_points_statement(bucket_arn)]


def bucket_policy_document(
    with_uploaders: bool, bucket_arn: str = LONGEST_LANDING_BUCKET_ARN, account: str = _LONGEST_ACCOUNT
) -> dict[str, Any]:
    """The landing bucket's whole policy: TLS only, then, with uploaders, their statements."""
    found = [tls_only_statement([bucket_arn, f"{bucket_arn}/*"])]
    if with_uploaders:
        found += bucket_statements(bucket_arn, account)
    return {"Statement": found, "Version": "2012-10-17"}


def compact_bytes(document: dict[str, Any]) -> int:
    """A policy's size as CloudFormation sends it (compact JSON)."""
    return len(json.dumps(document, separators=(",", ":")).encode())


def bucket_policy_bytes(tenants: Sequence[TenantUploaders]) -> int:
    """The landing bucket policy's size at the longest bucket ARN: the same at any tenant count."""
    return compact_bytes(bucket_policy_document(any(t.principals for t in tenants)))


#: KMS's limit of a key policy (not adjustable), in bytes.
KEY_POLICY_LIMIT_BYTES = 32 * 1024
#: The created shared key's policy without the uploaders' statement, at the longest ARNs
#: (`encryption.py`: the account's, the services' and the shared rules' statements; none grows
#: with tenants), rounded up. tests/test_encryption.py measures it on the synthesized key.
SHARED_KEY_OTHER_STATEMENTS_BYTES = 900


#: The Sid of the created shared key's statement that lets the uploaders encrypt (their
#: account roots': this and "Accounts").
KEY_SID = "UploadersEncryptNewLandingObjects"


def key_statements(
    principals: Sequence[str],
    via_services: Sequence[str] = (f"s3.{_LONGEST_REGION}.amazonaws.com",),
    bucket_arn: str = LONGEST_LANDING_BUCKET_ARN,
) -> list[dict[str, Any]]:
    """The created shared key's statements that let every tenant's uploaders encrypt what they
    put (`kms:GenerateDataKey`, and `kms:Decrypt` for the parts of a multipart upload), through
    S3 (`via_services`) into the landing bucket (`bucket_arn`) only; `SharedResources.grant_upload`
    writes them, the size model counts them at the defaults (the longest Region and bucket ARN)."""
    return allow_principals(
        KEY_SID,
        principals,
        Action=["kms:Decrypt", "kms:GenerateDataKey"],
        Resource="*",
        Condition={
            "StringEquals": {
                "kms:ViaService": list(via_services),
                "kms:EncryptionContext:aws:s3:arn": bucket_arn,
            }
        },
    )


def shared_key_policy_bytes(tenants: Sequence[TenantUploaders]) -> int:
    """The created shared key's policy size: its other statements and, with uploaders, theirs."""
    principals = [p for t in tenants for p in t.principals]
    return SHARED_KEY_OTHER_STATEMENTS_BYTES + sum(1 + compact_bytes(s) for s in key_statements(principals))


def access_point_policy_bytes(tenant: TenantUploaders) -> int:
    """The size of the tenant's access point policy at its longest access point ARN."""
    return compact_bytes(access_point_policy(tenant, tenant.longest_access_point_arn))
