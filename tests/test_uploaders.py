"""Per-tenant uploaders (docs/security.md, "Uploaders"): each tenant's access point and its
policy, the landing bucket policy's two statements for uploaders (the delegation, and tagged
uploaders through access points only), asserted statement by statement on the synthesized
templates; their sizes at any tenant count; the configuration.

What the statements must say, from S3's authorization (AWS docs, "How Amazon S3 authorizes a
request", "Configuring IAM policies for using access points"): a request through an access
point needs both the access point's policy and the bucket's to permit it (the bucket delegates
to its own account's access points), and an explicit Deny in either wins; a role or user of
the bucket's own account is allowed when a resource policy or its own identity policy allows,
another account's principal only when both sides do. So an uploader stays in its prefix
through its access point whatever its identity policy allows only if unconditional Denies of
the access point policy name it for every other action and every other key; the bucket policy
gives nothing to anyone directly, and through access points only the upload actions; and a
principal tagged as an uploader is denied every action on the bucket not made through an
access point (so a same-account uploader cannot go around its access point). Each
check below is shown to fail on a policy that breaks what it guards
(`test_each_check_fails_on_a_policy_that_breaks_it`). moto evaluates no access point policy:
these static checks are the test.
"""

from __future__ import annotations

import copy
import json
import re
import textwrap
from collections.abc import Callable

import pytest

from pipeline_constructs import capacity, cell_plan, names, uploaders
from pipeline_constructs.application import build_app, new_app
from pipeline_constructs.config import parse_config
from tests.conftest import cfn_lint_findings, problems_of, synthesize
from tools.iam_policies import Resolver, policy_documents

ACCOUNT = "111111111111"
REGION = "eu-west-1"
BUCKET = f"ordered-ingest-landing-{ACCOUNT}-{REGION}"
BUCKET_ARN = f"arn:aws:s3:::{BUCKET}"
ACME_UPLOADER = f"arn:aws:iam::{ACCOUNT}:role/acme-uploader"
GLOBEX_UPLOADER = f"arn:aws:iam::{ACCOUNT}:user/globex-sftp"
PARTNER_ACCOUNT = "222222222222"
PARTNER_ROOT = f"arn:aws:iam::{PARTNER_ACCOUNT}:root"
#: Any role of the partner account: its own IAM decides whether it may upload for acme.
PARTNER_ROLE = f"arn:aws:iam::{PARTNER_ACCOUNT}:role/any-role"
#: Principals that are no uploader: the pipeline's own roles and the operators.
PIPELINE_ROLE = f"arn:aws:iam::{ACCOUNT}:role/OrderedIngest-Tenant-acme-PipelineDataRole44AB444D-X"
OPERATOR = f"arn:aws:iam::{ACCOUNT}:role/operators"
SHARED = "OrderedIngest-Shared"

TENANTS = f"""
defaults:
  sink: {{url: https://core.example.com/records, auth: {{type: bearer, secret: core/token}}}}
tenants:
  - id: acme
    prefix: acme/
    uploaders: [{ACME_UPLOADER}, {PARTNER_ROOT}]
  - id: globex
    prefix: globex/in/
    uploaders: [{GLOBEX_UPLOADER}]
  - id: initech
    prefix: initech/
"""

UPLOAD = frozenset({"s3:PutObject", "s3:AbortMultipartUpload"})
ACME_AP = f"arn:aws:s3:{REGION}:{ACCOUNT}:accesspoint/acme-uploads"
GLOBEX_AP = f"arn:aws:s3:{REGION}:{ACCOUNT}:accesspoint/globex-uploads"


def everything(ap: str) -> list[str]:
    """The access point (its own actions: list, ...) and every object through it."""
    return [ap, f"{ap}/object/*"]


def tls_only(resources: list[str]) -> dict:
    """Every request without TLS is refused, whoever sends it."""
    return {
        "Action": "s3:*",
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Resource": resources,
    }


#: CDK's `enforce_ssl` statement of the bucket.
BUCKET_TLS_ONLY = tls_only([BUCKET_ARN, f"{BUCKET_ARN}/*"])
#: The bucket's one Allow for uploaders: the upload actions, through this account's access points only.
DELEGATION = {
    "Effect": "Allow",
    "Principal": {"AWS": "*"},
    "Action": sorted(UPLOAD),
    "Resource": f"{BUCKET_ARN}/*",
    "Condition": {"StringEquals": {"s3:DataAccessPointAccount": ACCOUNT}},
}
#: The IAM tag uploaders carry (docs/security.md and preflight's fix name it).
UPLOADER_TAG = "aws:PrincipalTag/ordered-ingest:uploader"
#: The bucket's one Deny for uploaders: a principal with the tag, every action, unless through an access point.
ONLY_THROUGH_ACCESS_POINTS = {
    "Effect": "Deny",
    "Principal": {"AWS": "*"},
    "Action": "s3:*",
    "Resource": [BUCKET_ARN, f"{BUCKET_ARN}/*"],
    "Condition": {"Null": {UPLOADER_TAG: "false", "s3:DataAccessPointArn": "true"}},
}

#: Where the landing bucket ARN is longest (`uploaders.LONGEST_LANDING_BUCKET_ARN`).
LONGEST = {"account": "123456789012", "region": "ap-southeast-5", "partition": "aws-us-gov"}


def with_longest_qualifier(statements: list[dict]) -> list[dict]:
    """A policy rendered at `LONGEST`, as an app with the longest `qualifier` would have it."""
    plain = names.landing_bucket_name(LONGEST["account"], LONGEST["region"])
    return json.loads(
        json.dumps(statements).replace(plain, uploaders.LONGEST_LANDING_BUCKET_ARN.split(":::")[1])
    )


@pytest.fixture(scope="module")
def uploaders_app(tmp_path_factory):
    root = tmp_path_factory.mktemp("uploaders")
    (root / "tenants.yaml").write_text(TENANTS)
    return synthesize(root / "tenants.yaml", root / "cdk.out")  # cdk-nag on: no finding


def resource_policy(
    templates,
    stack: str,
    resource_type: str,
    *,
    account: str = ACCOUNT,
    region: str = REGION,
    partition: str = "aws",
) -> list[dict]:
    """The statements of the one ``resource_type`` policy of ``stack`` with their intrinsics
    rendered (the IAM lint's resolver) as CloudFormation renders them in ``account`` and ``region``."""
    own = {stack: templates[stack]}
    resolver = Resolver(own, account=account, region=region, partition=partition)
    documents = [d for d in policy_documents(own, resolver) if d.resource_type == resource_type]
    if resource_type == "AWS::S3::BucketPolicy":
        landing = templates[SHARED]["Outputs"]["LandingBucketName"]["Value"]["Ref"]
        documents = [d for d in documents if d.target == (landing,)]
    (document,) = documents
    return document.statements()


def landing_policy(templates, **where) -> list[dict]:
    return resource_policy(templates, SHARED, "AWS::S3::BucketPolicy", **where)


def access_point_policy(templates, tenant_id: str, **where) -> list[dict]:
    return resource_policy(templates, names.TENANT_STACK.render(tenant_id), "AWS::S3::AccessPoint", **where)


@pytest.fixture(scope="module")
def policy(uploaders_app) -> list[dict]:
    return landing_policy(uploaders_app.templates)


@pytest.fixture(scope="module")
def acme_policy(uploaders_app) -> list[dict]:
    return access_point_policy(uploaders_app.templates, "acme")


@pytest.fixture(scope="module")
def globex_policy(uploaders_app) -> list[dict]:
    return access_point_policy(uploaders_app.templates, "globex")


def obj(ap: str, key: str) -> str:
    return f"{ap}/object/{key}"


def listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def by_arn(statement: dict) -> set[str] | None:
    """The ARNs a statement of every principal (`*`) is narrowed to by `ArnEquals` on
    `aws:PrincipalArn` (None: no such condition). Exact ARNs: `aws:PrincipalArn` of a role's
    session is the role's ARN, of a user the user's, of an account's root user its root ARN."""
    found = statement.get("Condition", {}).get("ArnEquals", {}).get("aws:PrincipalArn")
    return None if found is None or listed(statement["Principal"]["AWS"]) != ["*"] else set(listed(found))


def principals(statement: dict) -> set[str]:
    """Whom a statement names: its `Principal`, or the ARNs its condition narrows `*` to."""
    named = by_arn(statement)
    return named if named is not None else set(listed(statement["Principal"]["AWS"]))


def account_of(arn: str) -> str:
    return arn.split(":")[4]


def naming(policy: list[dict], effect: str, principal: str) -> list[dict]:
    """The ``effect`` statements that name ``principal``: by its ARN (in `Principal`, or in the
    `aws:PrincipalArn` condition of a `*`), as every principal (`*` without that condition), or as
    one of its account's principals (the account's root ARN in `Principal`). A root ARN of the
    bucket's own account in an Allow grants nothing by itself (it leaves it to the identity policies)."""
    own_root = f"arn:aws:iam::{account_of(principal)}:root"
    via_root = effect == "Deny" or account_of(principal) != ACCOUNT

    def names(statement: dict) -> bool:
        narrowed = by_arn(statement)
        if narrowed is not None:
            return principal in narrowed
        return bool(principals(statement) & {principal, "*", *([own_root] if via_root else [])})

    return [s for s in policy if s["Effect"] == effect and names(s)]


def shape(statement: dict) -> dict:
    """What a statement does, whoever it names: without Sid, Principal and the `aws:PrincipalArn`
    condition that narrows it, its lists as sets."""
    found = {
        k: frozenset(listed(v)) if k in ("Action", "NotAction", "Resource", "NotResource") else v
        for k, v in statement.items()
        if k not in ("Sid", "Principal")
    }
    if by_arn(statement) is not None:
        condition = {
            **found["Condition"],
            "ArnEquals": {
                k: v for k, v in found["Condition"]["ArnEquals"].items() if k != "aws:PrincipalArn"
            },
        }
        condition = {k: v for k, v in condition.items() if v}
        found = {k: v for k, v in found.items() if k != "Condition"} | (
            {"Condition": condition} if condition else {}
        )
    return found


def without_sid(statement: dict) -> dict:
    return {k: v for k, v in statement.items() if k != "Sid"}


# --- the checks: an access point's policy ------------------------------------------------------------


def check_allowed_to_put_only_under(policy: list[dict], ap: str, principal: str, prefix: str) -> None:
    """One Allow names the principal: the two upload actions on its prefix's keys through the
    access point, no condition. (A same-account role then puts without an identity allow;
    another account's principal needs one too, and gets nothing else.)"""
    allows = [shape(s) for s in naming(policy, "Allow", principal)]
    assert allows == [
        {"Effect": "Allow", "Action": UPLOAD, "Resource": frozenset({obj(ap, prefix + "*")})}
    ], principal


def check_denied_all_but_putting_under(policy: list[dict], ap: str, principal: str, prefix: str) -> None:
    """Besides TLS only, exactly two unconditional Denies name the role or user: every action
    but the two upload actions on the access point and every object through it (no read, list,
    delete, ACL or tagging, its own files included), and the upload actions on every key outside
    its prefix. Whatever its identity policy allows, through its access point it puts under its
    prefix and does nothing else."""
    denies = [
        shape(s) for s in naming(policy, "Deny", principal) if without_sid(s) != tls_only(everything(ap))
    ]
    expected = [
        {"Effect": "Deny", "NotAction": UPLOAD, "Resource": frozenset(everything(ap))},
        {"Effect": "Deny", "Action": UPLOAD, "NotResource": frozenset({obj(ap, prefix + "*")})},
    ]
    assert len(denies) == 2 and all(e in denies for e in expected), (principal, denies)


def check_granted_nothing(policy: list[dict], principal: str) -> None:
    assert naming(policy, "Allow", principal) == [], principal


def check_denied_nothing_but_plain_http(policy: list[dict], ap: str, principal: str) -> None:
    """Only TLS-only names the principal: its own identity policy decides the rest."""
    assert [
        s for s in naming(policy, "Deny", principal) if without_sid(s) != tls_only(everything(ap))
    ] == [], principal


def check_tls_only(policy: list[dict], ap: str) -> None:
    assert tls_only(everything(ap)) in [without_sid(s) for s in policy]


# --- the checks: the landing bucket's policy ------------------------------------------------------------


def check_bucket_grants_only_puts_through_its_accounts_access_points(policy: list[dict]) -> None:
    """The one Allow: the two upload actions on objects, to whoever an access point of the
    bucket's own account lets through. Nothing directly, nothing through another account's
    access point, no read, list or delete through any."""
    allows = [without_sid(s) for s in policy if s["Effect"] == "Allow"]
    assert [{**a, "Action": sorted(listed(a["Action"]))} for a in allows] == [DELEGATION]


def check_bucket_keeps_tagged_uploaders_to_access_points(policy: list[dict]) -> None:
    """A Deny names every principal (`*`) that carries the uploader tag (`Null` false: the key
    is present, any value) for every action on the bucket and on every object, unless the
    request comes through an access point (`Null` true on `s3:DataAccessPointArn`: S3 sets it
    on access point requests only). Both keys under one operator: both must hold. So a
    same-account uploader, whatever its identity policy grants, reaches the bucket through its
    access point only, where that access point's Denies confine it."""
    denies = [shape(s) for s in policy if s["Effect"] == "Deny" and principals(s) == {"*"}]
    assert shape(ONLY_THROUGH_ACCESS_POINTS) in denies, denies


def check_bucket_denies_untagged_principals_nothing_but_plain_http(policy: list[dict]) -> None:
    """Every Deny but TLS only requires the uploader tag: the pipeline's roles and the operators
    (untagged) keep what their identity policies grant."""
    others = [s for s in policy if s["Effect"] == "Deny" and s != BUCKET_TLS_ONLY]
    assert BUCKET_TLS_ONLY in policy
    assert all(s.get("Condition", {}).get("Null", {}).get(UPLOADER_TAG) == "false" for s in others), others


# --- what the synthesized policies let each principal do --------------------------------------------------


def test_an_uploader_is_allowed_to_put_under_its_tenants_prefix_through_its_access_point_and_nothing_else(
    acme_policy, globex_policy
):
    check_allowed_to_put_only_under(acme_policy, ACME_AP, ACME_UPLOADER, "acme/")
    check_allowed_to_put_only_under(globex_policy, GLOBEX_AP, GLOBEX_UPLOADER, "globex/in/")
    # by its own ARN: a same-account role needs no identity allow to put
    (put,) = naming(acme_policy, "Allow", ACME_UPLOADER)
    assert ACME_UPLOADER in principals(put)


def check_names_roles_and_users_by_condition_only(policy: list[dict], identities: list[str]) -> None:
    """No role or user ARN is a `Principal` (S3 refuses a policy naming one that does not exist,
    and one deleted later turns into an id that fails every later put): each statement that
    names them is every principal (`*`) narrowed to exactly them by `ArnEquals` on
    `aws:PrincipalArn`; `Principal` holds only `*` and account roots."""
    in_principal = {p for s in policy for p in listed(s["Principal"]["AWS"])}
    assert in_principal <= {"*"} | {p for p in in_principal if uploaders.is_account_root(p)}, in_principal
    narrowing = [s for s in policy if by_arn(s) is not None]
    assert {a for s in narrowing for a in by_arn(s)} == set(identities)
    assert all(
        s["Principal"] == {"AWS": "*"} and not any(c in s["Condition"] for c in ("ArnLike", "StringLike"))
        for s in narrowing
    )


def test_an_access_point_policy_names_its_roles_and_users_in_a_condition_not_as_principals(
    acme_policy, globex_policy, uploaders_app
):
    """GIVEN acme's role and partner account root, and globex's user THEN their access points'
    policies name the role and the user only under `aws:PrincipalArn`, the root as `Principal`."""
    check_names_roles_and_users_by_condition_only(acme_policy, [ACME_UPLOADER])
    check_names_roles_and_users_by_condition_only(globex_policy, [GLOBEX_UPLOADER])
    (put, accounts) = [s for s in acme_policy if s["Effect"] == "Allow"]
    assert (put["Sid"], put["Principal"], put["Condition"]) == (
        "UploadersPut",
        {"AWS": "*"},
        {"ArnEquals": {"aws:PrincipalArn": [ACME_UPLOADER]}},
    )
    assert (accounts["Sid"], accounts["Principal"], "Condition" in accounts) == (
        "UploadersPutAccounts",
        {"AWS": [PARTNER_ROOT]},
        False,
    )
    for sid in ("UploadersDenyOtherActions", "UploadersDenyOtherKeys"):
        (deny,) = [s for s in acme_policy if s.get("Sid") == sid]
        assert (deny["Principal"], deny["Condition"]) == (
            {"AWS": "*"},
            {"ArnEquals": {"aws:PrincipalArn": [ACME_UPLOADER]}},
        )
    # the template itself, before any rendering: no uploader ARN under a Principal
    for tenant, arn in (("acme", ACME_UPLOADER), ("globex", GLOBEX_UPLOADER)):
        (ap,) = access_points(uploaders_app.templates[names.TENANT_STACK.render(tenant)])
        assert arn not in json.dumps([s["Principal"] for s in ap["Policy"]["Statement"]])
        assert arn in json.dumps([s.get("Condition") for s in ap["Policy"]["Statement"]])


def test_an_uploader_is_denied_every_other_action_and_every_key_outside_its_prefix(
    acme_policy, globex_policy
):
    check_denied_all_but_putting_under(acme_policy, ACME_AP, ACME_UPLOADER, "acme/")
    check_denied_all_but_putting_under(globex_policy, GLOBEX_AP, GLOBEX_UPLOADER, "globex/in/")


def test_another_tenants_access_point_grants_an_uploader_nothing(acme_policy, globex_policy):
    """acme's uploader is named by no Allow of globex's access point, and the reverse."""
    check_granted_nothing(globex_policy, ACME_UPLOADER)
    check_granted_nothing(globex_policy, PARTNER_ROLE)
    check_granted_nothing(acme_policy, GLOBEX_UPLOADER)


def test_every_request_without_tls_is_denied_uploaders_included(policy, acme_policy, globex_policy):
    check_tls_only(acme_policy, ACME_AP)
    check_tls_only(globex_policy, GLOBEX_AP)
    assert BUCKET_TLS_ONLY in policy
    assert all(
        BUCKET_TLS_ONLY in naming(policy, "Deny", p) for p in (ACME_UPLOADER, GLOBEX_UPLOADER, PARTNER_ROLE)
    )


def test_a_cross_account_uploader_is_allowed_to_put_under_its_prefix_and_no_deny_names_its_account(
    acme_policy,
):
    """GIVEN the partner account's root as acme's uploader (its own IAM decides which of its
    principals) THEN each of its principals is allowed the puts under acme/ and nothing else:
    across accounts every policy must allow, so the Allow alone bounds it; a Deny naming the
    root would name every principal of that account."""
    for principal in (PARTNER_ROOT, PARTNER_ROLE):
        check_allowed_to_put_only_under(acme_policy, ACME_AP, principal, "acme/")
        check_denied_nothing_but_plain_http(acme_policy, ACME_AP, principal)


def test_the_bucket_policy_names_no_one_so_the_pipelines_roles_and_operators_keep_their_access(policy):
    """Directly to the bucket no statement grants anyone anything, nor denies an untagged
    principal anything but plain HTTP; its one Allow is the delegation to this account's access
    points, puts only; its statements name no principal but `*`, so the policy does not grow."""
    check_bucket_grants_only_puts_through_its_accounts_access_points(policy)
    check_bucket_denies_untagged_principals_nothing_but_plain_http(policy)
    assert not [s for s in policy if "Principal" in s and principals(s) - {"*"}]
    assert len(policy) == 3


def test_a_tagged_uploader_is_denied_everything_on_the_bucket_not_through_an_access_point(policy):
    """The constant answer to a same-account uploader going around its access point: the tag
    on its role or user, not its ARN in the bucket policy (docs/security.md, "Uploaders")."""
    check_bucket_keeps_tagged_uploaders_to_access_points(policy)
    assert UPLOADER_TAG.removeprefix("aws:PrincipalTag/") == uploaders.UPLOADER_TAG_KEY


def test_the_uploader_tag_key_is_a_valid_iam_tag_key():
    """IAM tag keys: 1 to 128 letters, digits, spaces and `_ . : / = + - @`, not `aws:` first
    (IAM API reference, `Tag`)."""
    assert re.fullmatch(r"[\w .:/=+\-@]{1,128}", uploaders.UPLOADER_TAG_KEY)
    assert not uploaders.UPLOADER_TAG_KEY.lower().startswith("aws:")


def test_the_access_point_policies_name_no_one_else(acme_policy, globex_policy):
    """The pipeline's roles and the operators: neither granted nor denied anything through an
    access point but plain HTTP; each Allow names exactly its tenant's uploaders."""
    for policy, ap in ((acme_policy, ACME_AP), (globex_policy, GLOBEX_AP)):
        for principal in (PIPELINE_ROLE, OPERATOR):
            check_granted_nothing(policy, principal)
            check_denied_nothing_but_plain_http(policy, ap, principal)
    allows = [
        (principals(s), shape(s)) for p in (acme_policy, globex_policy) for s in p if s["Effect"] == "Allow"
    ]
    assert allows == [
        (
            {ACME_UPLOADER},
            {"Effect": "Allow", "Action": UPLOAD, "Resource": frozenset({obj(ACME_AP, "acme/*")})},
        ),
        (
            {PARTNER_ROOT},
            {"Effect": "Allow", "Action": UPLOAD, "Resource": frozenset({obj(ACME_AP, "acme/*")})},
        ),
        (
            {GLOBEX_UPLOADER},
            {"Effect": "Allow", "Action": UPLOAD, "Resource": frozenset({obj(GLOBEX_AP, "globex/in/*")})},
        ),
    ]
    denied = [
        principals(s)
        for p in (acme_policy, globex_policy)
        for s in p
        if s["Effect"] == "Deny" and principals(s) != {"*"}
    ]
    assert denied == [{ACME_UPLOADER}] * 2 + [{GLOBEX_UPLOADER}] * 2


def change(sid: str | None, **fields) -> Callable[[list[dict]], list[dict]]:
    """A copy of the policy with statement ``sid`` changed (None: the bucket's TLS only, which
    has no Sid); a field set to None is removed."""

    def apply(policy: list[dict]) -> list[dict]:
        mutated = copy.deepcopy(policy)
        (statement,) = [s for s in mutated if s.get("Sid") == sid]
        statement.update(fields)
        for key in [k for k, v in fields.items() if v is None]:
            del statement[key]
        return mutated

    return apply


def add(statement: dict) -> Callable[[list[dict]], list[dict]]:
    return lambda policy: [*copy.deepcopy(policy), statement]


def acme_put(policy):
    check_allowed_to_put_only_under(policy, ACME_AP, ACME_UPLOADER, "acme/")


def acme_denied(policy):
    check_denied_all_but_putting_under(policy, ACME_AP, ACME_UPLOADER, "acme/")


def partner_not_denied(policy):
    check_denied_nothing_but_plain_http(policy, ACME_AP, PARTNER_ROLE)


def operator_untouched(policy):
    check_granted_nothing(policy, OPERATOR)
    check_denied_nothing_but_plain_http(policy, ACME_AP, OPERATOR)


def acme_tls(policy):
    check_tls_only(policy, ACME_AP)


ACCESS_POINT_MUTATIONS = [
    pytest.param(change("UploadersPut", Resource=obj(ACME_AP, "*")), acme_put, id="allow on every key"),
    pytest.param(
        change("UploadersPut", Resource=obj(ACME_AP, "acme*")), acme_put, id="allow on acme-other/ too"
    ),
    pytest.param(change("UploadersPut", Action=["s3:Put*"]), acme_put, id="allow PutObjectAcl, tagging"),
    pytest.param(
        change("UploadersPut", Principal={"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, Condition=None),
        acme_put,
        id="allow this account, not the role",
    ),
    pytest.param(
        change("UploadersPut", Condition={"ArnEquals": {"aws:PrincipalArn": [GLOBEX_UPLOADER]}}),
        acme_put,
        id="allow another tenant's uploader, not the role",
    ),
    pytest.param(
        change("UploadersDenyOtherKeys", Resource=obj(ACME_AP, "acme/*"), NotResource=None),
        acme_denied,
        id="deny puts inside the prefix instead of outside",
    ),
    pytest.param(
        change("UploadersDenyOtherKeys", NotResource=obj(ACME_AP, "globex/in/*")),
        acme_denied,
        id="deny puts outside another prefix",
    ),
    pytest.param(
        change("UploadersDenyOtherKeys", Condition={"Bool": {"aws:SecureTransport": "false"}}),
        acme_denied,
        id="deny other keys only without TLS",
    ),
    pytest.param(
        change("UploadersDenyOtherActions", NotAction=[*UPLOAD, "s3:GetObject"]),
        acme_denied,
        id="deny all but puts and reads",
    ),
    pytest.param(
        change("UploadersDenyOtherActions", Resource=obj(ACME_AP, "*")),
        acme_denied,
        id="deny other actions on objects only, so listing is left",
    ),
    pytest.param(
        add(
            {
                "Effect": "Deny",
                "Principal": {"AWS": "*"},
                "Action": "s3:PutObject",
                "Resource": obj(ACME_AP, "*"),
            }
        ),
        acme_denied,
        id="deny every put to everyone",
    ),
    pytest.param(
        change("UploadersDenyOtherKeys", Principal={"AWS": [ACME_UPLOADER, PARTNER_ROOT]}, Condition=None),
        partner_not_denied,
        id="deny names the partner account",
    ),
    pytest.param(
        change(
            "UploadersDenyOtherActions", Principal={"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, Condition=None
        ),
        operator_untouched,
        id="deny names this account",
    ),
    pytest.param(
        change("UploadersDenyOtherActions", Condition=None),
        operator_untouched,
        id="deny every principal: the condition that narrows it dropped",
    ),
    pytest.param(
        change("UploadersPut", Condition={"ArnEquals": {"aws:PrincipalArn": [ACME_UPLOADER, OPERATOR]}}),
        operator_untouched,
        id="allow an operator to put",
    ),
    pytest.param(
        change("UploadersPut", Condition=None),
        operator_untouched,
        id="allow every principal: the condition that narrows it dropped",
    ),
    pytest.param(
        add(
            {
                "Effect": "Allow",
                "Principal": {"AWS": "*"},
                "Action": "s3:GetObject",
                "Resource": obj(ACME_AP, "*"),
            }
        ),
        operator_untouched,
        id="allow everyone to read",
    ),
    pytest.param(
        change("TlsOnly", Resource=[ACME_AP]), acme_tls, id="tls only for the access point, not objects"
    ),
    pytest.param(
        change("TlsOnly", Condition={"Bool": {"aws:SecureTransport": "true"}}),
        acme_tls,
        id="deny with TLS instead of without",
    ),
]

BUCKET_MUTATIONS = [
    pytest.param(
        change(uploaders.DELEGATION_SID, Condition=None),
        check_bucket_grants_only_puts_through_its_accounts_access_points,
        id="delegate to every request, not access points",
    ),
    pytest.param(
        change(
            uploaders.DELEGATION_SID,
            Condition={"StringEquals": {"s3:DataAccessPointAccount": PARTNER_ACCOUNT}},
        ),
        check_bucket_grants_only_puts_through_its_accounts_access_points,
        id="delegate to another account's access points",
    ),
    pytest.param(
        change(uploaders.DELEGATION_SID, Action="*"),
        check_bucket_grants_only_puts_through_its_accounts_access_points,
        id="delegate every action",
    ),
    pytest.param(
        change(uploaders.DELEGATION_SID, Resource=[BUCKET_ARN, f"{BUCKET_ARN}/*"]),
        check_bucket_grants_only_puts_through_its_accounts_access_points,
        id="delegate the bucket's own actions",
    ),
    pytest.param(
        add(
            {
                "Effect": "Deny",
                "Principal": {"AWS": "*"},
                "Action": "s3:GetObject",
                "Resource": f"{BUCKET_ARN}/*",
            }
        ),
        check_bucket_denies_untagged_principals_nothing_but_plain_http,
        id="deny the pipeline its reads",
    ),
    pytest.param(
        change(None, Resource=[BUCKET_ARN]),
        check_bucket_denies_untagged_principals_nothing_but_plain_http,
        id="bucket tls only for the bucket, not objects",
    ),
    pytest.param(
        change(uploaders.ONLY_THROUGH_ACCESS_POINTS_SID, Effect="Allow"),
        check_bucket_keeps_tagged_uploaders_to_access_points,
        id="tagged uploaders allowed, not denied",
    ),
    pytest.param(
        change(uploaders.ONLY_THROUGH_ACCESS_POINTS_SID, Condition={"Null": {UPLOADER_TAG: "false"}}),
        check_bucket_keeps_tagged_uploaders_to_access_points,
        id="tagged uploaders denied through their access points too (no Null on s3:DataAccessPointArn)",
    ),
    pytest.param(
        change(
            uploaders.ONLY_THROUGH_ACCESS_POINTS_SID,
            Condition={"Null": {UPLOADER_TAG: "false", "s3:DataAccessPointArn": "false"}},
        ),
        check_bucket_keeps_tagged_uploaders_to_access_points,
        id="tagged uploaders denied through access points only",
    ),
    pytest.param(
        change(
            uploaders.ONLY_THROUGH_ACCESS_POINTS_SID, Condition={"Null": {"s3:DataAccessPointArn": "true"}}
        ),
        check_bucket_keeps_tagged_uploaders_to_access_points,
        id="no tag condition: everyone kept to access points",
    ),
    pytest.param(
        change(
            uploaders.ONLY_THROUGH_ACCESS_POINTS_SID, Condition={"Null": {"s3:DataAccessPointArn": "true"}}
        ),
        check_bucket_denies_untagged_principals_nothing_but_plain_http,
        id="no tag condition: the pipeline's roles denied the bucket",
    ),
    pytest.param(
        change(
            uploaders.ONLY_THROUGH_ACCESS_POINTS_SID,
            Condition={"Null": {"aws:PrincipalTag/uploader": "false", "s3:DataAccessPointArn": "true"}},
        ),
        check_bucket_keeps_tagged_uploaders_to_access_points,
        id="another tag key than the one preflight checks",
    ),
    pytest.param(
        change(uploaders.ONLY_THROUGH_ACCESS_POINTS_SID, Resource=f"{BUCKET_ARN}/*"),
        check_bucket_keeps_tagged_uploaders_to_access_points,
        id="deny on objects only, so listing is left",
    ),
    pytest.param(
        change(uploaders.ONLY_THROUGH_ACCESS_POINTS_SID, Action=["s3:GetObject", "s3:DeleteObject"]),
        check_bucket_keeps_tagged_uploaders_to_access_points,
        id="deny reads and deletes only, so puts are left",
    ),
    pytest.param(
        change(uploaders.ONLY_THROUGH_ACCESS_POINTS_SID, Principal={"AWS": ACME_UPLOADER}),
        check_bucket_keeps_tagged_uploaders_to_access_points,
        id="deny one uploader by ARN, not every tagged one",
    ),
]


@pytest.mark.parametrize(("mutate", "check"), ACCESS_POINT_MUTATIONS)
def test_each_check_fails_on_an_access_point_policy_that_breaks_it(acme_policy, mutate, check):
    """GIVEN acme's synthesized access point policy, which passes the check, WHEN one statement
    is wrong in the way the test id says THEN the check fails."""
    check(acme_policy)
    with pytest.raises(AssertionError):
        check(mutate(acme_policy))


@pytest.mark.parametrize(("mutate", "check"), BUCKET_MUTATIONS)
def test_each_check_fails_on_a_bucket_policy_that_breaks_it(policy, mutate, check):
    check(policy)
    with pytest.raises(AssertionError):
        check(mutate(policy))


# --- the resources as synthesized ----------------------------------------------------------------------


def access_points(template: dict) -> list[dict]:
    return [r["Properties"] for r in template["Resources"].values() if r["Type"] == "AWS::S3::AccessPoint"]


def test_each_tenant_with_uploaders_has_its_access_point_on_the_landing_bucket_and_a_tenant_without_has_none(
    uploaders_app,
):
    templates = uploaders_app.templates
    for tenant_id in ("acme", "globex"):
        template = templates[names.TENANT_STACK.render(tenant_id)]
        (ap,) = access_points(template)
        assert ap["Name"] == names.upload_access_point_name(tenant_id) == f"{tenant_id}-uploads"
        # the shared bucket by its fixed name: no reference to the shared stack
        assert ap["Bucket"] == {
            "Fn::Join": [
                "",
                ["ordered-ingest-landing-", {"Ref": "AWS::AccountId"}, "-", {"Ref": "AWS::Region"}],
            ]
        }
        assert ap["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        assert "VpcConfiguration" not in ap  # reachable from the uploader's network
        outputs = {k: v for k, v in template["Outputs"].items() if "UploadAccessPoint" in k}
        assert sorted(o["Value"]["Fn::GetAtt"][1] for o in outputs.values()) == ["Alias", "Arn"]
    assert access_points(templates["OrderedIngest-Tenant-initech"]) == []
    assert not [k for k in templates["OrderedIngest-Tenant-initech"]["Outputs"] if "UploadAccessPoint" in k]
    assert not [
        s
        for s in access_points(templates["OrderedIngest-Tenant-acme"])[0]["Policy"]["Statement"]
        if "initech" in json.dumps(s)
    ]
    assert access_points(templates[SHARED]) == []


def test_without_uploaders_the_landing_policy_is_tls_only_and_the_model_counts_just_that(synthesized):
    """The tests' default tenants declare no uploaders: their shared stack is as before, no access point."""
    assert landing_policy(synthesized.templates) == [BUCKET_TLS_ONLY]
    longest = with_longest_qualifier(landing_policy(synthesized.templates, **LONGEST))
    assert uploaders.bucket_policy_bytes([]) == len(
        json.dumps({"Statement": longest, "Version": "2012-10-17"}, separators=(",", ":"))
    )
    assert not [name for name, t in synthesized.templates.items() if access_points(t)]


def test_the_size_models_are_the_synthesized_policies_at_the_longest_arns(uploaders_app):
    """GIVEN the synthesized policies rendered for the longest ARNs WHEN measured THEN the
    models' figures are never below them (and within 1 %: CDK writes a single principal as a
    string, the model as a list)."""

    def size(statements: list[dict]) -> int:
        return len(json.dumps({"Statement": statements, "Version": "2012-10-17"}, separators=(",", ":")))

    config = parse_config(TENANTS)
    bucket = with_longest_qualifier(landing_policy(uploaders_app.templates, **LONGEST))
    assert bucket[0]["Resource"][0] == uploaders.LONGEST_LANDING_BUCKET_ARN
    assert (
        size(bucket)
        <= uploaders.bucket_policy_bytes([capacity.uploaders_of(t) for t in config.tenants])
        <= size(bucket) * 1.01
    )
    for tenant in config.tenants[:2]:
        actual = size(access_point_policy(uploaders_app.templates, tenant.id, **LONGEST))
        modelled = uploaders.access_point_policy_bytes(capacity.uploaders_of(tenant))
        assert actual <= modelled <= actual * 1.01, tenant.id


# --- any number of tenants ------------------------------------------------------------------------------


def tenants_with_uploaders(count: int, *, head: str = "") -> str:
    entries = "\n".join(
        f"  - {{id: tenant-{i:04d}, prefix: tenant-{i:04d}/, uploaders: "
        f"['arn:aws:iam::{ACCOUNT}:role/tenant-{i:04d}-uploader']}}"
        for i in range(count)
    )
    return (
        f"{head}defaults:\n  sink: {{url: https://core.example.com/records, auth: {{type: bearer, secret: core/token}}}}\n"
        f"tenants:\n{entries}\n"
    )


@pytest.mark.parametrize("count", [1, 50, 1000])
def test_the_landing_bucket_policy_has_the_same_size_at_any_number_of_tenants_with_uploaders(count):
    # (1,000 tenants need raised IAM roles, rules and concurrency quotas: declared raised)
    head = "account_limits: {iam_roles: 5000, eventbridge_rules_per_bus: 2500, lambda_concurrent_executions: 2000}\n"
    config = parse_config(tenants_with_uploaders(count, head=head))
    own = [capacity.uploaders_of(t) for t in config.tenants]
    # 1,043 bytes at the longest bucket ARN (the longest qualifier and Region, partition aws-us-gov)
    assert uploaders.bucket_policy_bytes(own) == uploaders.bucket_policy_bytes(own[:1]) == 1043
    by_field = {u.quota.field: u for u in capacity.usage(capacity.targets(config))}
    assert by_field["s3_access_points"].need == capacity.Need(count, f"1 per tenant with uploaders x {count}")
    assert by_field["upload_access_point_policy_bytes"].need.count < uploaders.POLICY_LIMIT_BYTES // 10


#: A team's day one: 50 tenants, each with its own uploader role and its own bearer
#: secret, alarms to the on-call address, rules sharded over 10 buses (cells).
SHARDED_FIFTY = "routing: {shards: 10}\nnotifications: {emails: [oncall@example.com]}\n" + "".join(
    [
        "defaults:\n  sink: {url: https://core.example.com/records}\ntenants:\n",
        *(
            f"  - {{id: tenant-{i:04d}, prefix: tenant-{i:04d}/, uploaders: ['arn:aws:iam::{ACCOUNT}:role/tenant-{i:04d}-uploader'], "
            f"sink: {{auth: {{type: bearer, secret: ordered-ingest/tenant-{i:04d}/core-token}}}}}}\n"
            for i in range(50)
        ),
    ]
)


@pytest.fixture(scope="module")
def fifty(tmp_path_factory):
    """50 tenants with an uploader role each, through the real app with cells: the shared cell,
    and the shard cell of tenant-0000 (its tenants' stacks only: a pull request's synth)."""
    config = parse_config(SHARDED_FIFTY)
    (shard_cell,) = [c for c in cell_plan.cells_of(config) if "tenant-0000" in c.tenant_ids]
    found = {}
    for cell in (cell_plan.SHARED_CELL, shard_cell.name):
        root = tmp_path_factory.mktemp(cell)
        (root / "tenants.yaml").write_text(SHARDED_FIFTY)
        built = build_app(root / "tenants.yaml", app=new_app(outdir=str(root / "cdk.out")), cell=cell)
        found.update({stack.stack_name: stack.template for stack in built.app.synth().stacks})
    return shard_cell, found


@pytest.mark.slow  # many synthetic tenants: a limit of the code, not of a tenants file (make test only)
def test_fifty_tenants_with_uploaders_synthesize_with_the_one_statement_bucket_policy_and_an_access_point_each(
    fifty,
):
    """The issue's case: 50 tenants, each with its own uploader role (about 43 KB of bucket
    policy before, against S3's 20 KB) and its own bearer secret, alarms to an address.
    cdk-nag runs on each cell's synth."""
    shard_cell, templates = fifty
    statements = landing_policy(templates)
    assert [without_sid(s) for s in statements] == [BUCKET_TLS_ONLY, DELEGATION, ONLY_THROUGH_ACCESS_POINTS]
    assert len(json.dumps(statements)) < 1024
    assert shard_cell.tenant_ids and len(shard_cell.tenant_ids) < 50
    for tenant_id in shard_cell.tenant_ids:
        ap = f"arn:aws:s3:{REGION}:{ACCOUNT}:accesspoint/{tenant_id}-uploads"
        policy = access_point_policy(templates, tenant_id)
        uploader = f"arn:aws:iam::{ACCOUNT}:role/{tenant_id}-uploader"
        check_allowed_to_put_only_under(policy, ap, uploader, f"{tenant_id}/")
        check_denied_all_but_putting_under(policy, ap, uploader, f"{tenant_id}/")
        check_tls_only(policy, ap)
        # each tenant's register function reads its own bearer secret, and no other tenant's
        secrets = {
            json.dumps(s["Resource"])
            for s in statements_of(templates[names.TENANT_STACK.render(tenant_id)])
            if "secretsmanager:GetSecretValue" in json.dumps(s.get("Action"))
        }
        assert secrets and all(f"ordered-ingest/{tenant_id}/core-token" in r for r in secrets), (
            tenant_id,
            secrets,
        )
    # the alarms reach the on-call address
    (shared,) = [t for name, t in templates.items() if name == SHARED]
    endpoints = [
        r["Properties"]["Endpoint"]
        for r in shared["Resources"].values()
        if r["Type"] == "AWS::SNS::Subscription"
    ]
    assert endpoints == ["oncall@example.com"]


def statements_of(template: dict) -> list[dict]:
    """Every statement of the template's IAM policies."""
    return [
        s
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy"
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]


# --- configuration -----------------------------------------------------------------------------------


def test_fails_when_an_uploader_is_not_an_iam_principal_arn():
    assert problems_of("""
        defaults: {sink: {url: https://core.example.com/records, auth: {type: bearer, secret: core/token}}}
        tenants:
          - {id: acme, prefix: acme/, uploaders: ['arn:aws:s3:::acme-bucket']}
    """) == [
        "tenant 'acme': field 'uploaders' = ['arn:aws:s3:::acme-bucket']: 'arn:aws:s3:::acme-bucket' is not an IAM "
        "role, user or account root ARN; list the IAM role or user ARNs of the tenant's uploading system, e.g. "
        "['arn:aws:iam::111111111111:role/acme-uploader'], or an account root ARN 'arn:aws:iam::222222222222:root' "
        "for another account"
    ]


def test_fails_when_one_principal_uploads_for_two_tenants():
    assert problems_of(f"""
        defaults: {{sink: {{url: https://core.example.com/records, auth: {{type: bearer, secret: core/token}}}}}}
        tenants:
          - {{id: acme, prefix: acme/, uploaders: ['{ACME_UPLOADER}']}}
          - {{id: globex, prefix: globex/, uploaders: ['{ACME_UPLOADER}']}}
    """) == [
        f"tenant 'globex': field 'uploaders' = '{ACME_UPLOADER}': is also an uploader of tenant 'acme': a role or "
        "user uploads for one tenant, so that one tenant's system can never put under another tenant's prefix; "
        "give each tenant's uploading system a principal (role or user) of its own"
    ]


def test_fails_when_uploaders_are_in_defaults():
    assert problems_of(f"""
        defaults: {{sink: {{url: https://core.example.com/records, auth: {{type: bearer, secret: core/token}}}}, uploaders: ['{ACME_UPLOADER}']}}
        tenants:
          - {{id: acme, prefix: acme/}}
    """) == [
        f"defaults: field 'uploaders' = ['{ACME_UPLOADER}']: is per tenant: each tenant lists the principals "
        "that upload its files; move it into the tenant whose files it uploads"
    ]


def test_fails_when_an_uploader_is_listed_twice():
    assert problems_of(f"""
        defaults: {{sink: {{url: https://core.example.com/records, auth: {{type: bearer, secret: core/token}}}}}}
        tenants:
          - {{id: acme, prefix: acme/, uploaders: ['{ACME_UPLOADER}', '{ACME_UPLOADER}']}}
    """) == [
        f"tenant 'acme': field 'uploaders' = ['{ACME_UPLOADER}', '{ACME_UPLOADER}']: lists a principal twice; "
        "list the IAM role or user ARNs of the tenant's uploading system, e.g. "
        "['arn:aws:iam::111111111111:role/acme-uploader'], or an account root ARN 'arn:aws:iam::222222222222:root' "
        "for another account"
    ]


@pytest.mark.slow  # cfn-lint or synthesis over whole apps: make test (make test-fast runs tests/test_user_tenants.py)
@pytest.mark.parametrize("stack", [SHARED, "OrderedIngest-Tenant-acme", "OrderedIngest-Tenant-globex"])
def test_cfn_lint_finds_nothing_in_the_stacks_with_uploaders(uploaders_app, stack):
    assert cfn_lint_findings(uploaders_app.templates[stack]) == []


def test_parliament_finds_nothing_unacknowledged_in_the_bucket_and_access_point_policies(uploaders_app):
    """parliament over the landing bucket's and the access points' policies (the IAM lint:
    tools/iam_lint_acknowledgements.yaml says why an access point's object ARN is right)."""
    from tools import iam_lint

    linted = {
        k: v
        for k, v in uploaders_app.templates.items()
        if k in (SHARED, "OrderedIngest-Tenant-acme", "OrderedIngest-Tenant-globex")
    }
    findings = [
        f
        for f in iam_lint.lint(linted)
        if f.resource_type in ("AWS::S3::BucketPolicy", "AWS::S3::AccessPoint")
    ]
    assert iam_lint.unacknowledged(findings, iam_lint.load_acknowledgements()) == []
    assert {f.resource_type for f in findings} == {"AWS::S3::AccessPoint"}  # the acknowledged object ARNs


def test_fails_when_an_uploader_is_the_root_of_the_tenants_own_target_account():
    assert problems_of(f"""
        defaults: {{sink: {{url: https://core.example.com/records, auth: {{type: bearer, secret: core/token}}}}, target: prod}}
        targets: {{prod: {{account: '{ACCOUNT}', region: eu-west-1}}}}
        tenants:
          - {{id: acme, prefix: acme/, uploaders: ['arn:aws:iam::{ACCOUNT}:root', '{PARTNER_ROOT}']}}
    """) == [
        f"tenant 'acme': field 'uploaders' = 'arn:aws:iam::{ACCOUNT}:root': is the root of account {ACCOUNT}, where "
        "target 'prod' deploys the bucket: it would let every principal of that account whose own policy allows it "
        "put under the prefix, and no Deny can confine them; list the uploading system's own role or user ARN instead"
    ]


def test_another_accounts_root_may_upload_for_several_tenants_its_own_iam_separates_them():
    config = parse_config(
        textwrap.dedent(f"""
        defaults: {{sink: {{url: https://core.example.com/records, auth: {{type: bearer, secret: core/token}}}}}}
        tenants:
          - {{id: acme, prefix: acme/, uploaders: ['{PARTNER_ROOT}']}}
          - {{id: globex, prefix: globex/, uploaders: ['{PARTNER_ROOT}']}}
    """)
    )
    assert [t.uploaders for t in config.tenants] == [[PARTNER_ROOT], [PARTNER_ROOT]]
