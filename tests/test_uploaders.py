"""Per-tenant uploaders (docs/security.md, "Uploaders"): the synthesized landing bucket policy,
asserted statement by statement, its size check and its configuration.

What the statements must say, from S3's authorization (AWS docs, "How Amazon S3 authorizes a
request"): an explicit Deny that applies wins; otherwise a role or user of the bucket's own
account is allowed when the bucket policy or its own identity policy allows, another account's
principal only when both do. So an uploader stays in its prefix whatever its identity policy
allows only if unconditional Denies name it for every other action and every other key, and the
policy gives no one else anything if its only Allows are the uploaders' puts. Each check below
is shown to fail on a policy that breaks what it guards (`test_each_check_fails_on_a_policy_that_breaks_it`).
"""

from __future__ import annotations

import copy
import json
import textwrap
from collections.abc import Callable

import pytest

from pipeline_constructs import capacity, uploaders
from pipeline_constructs.config import ConfigError, parse_config
from tests.conftest import problems_of, synthesize
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
#: The bucket (its own actions: list, policy, lifecycle, ...) and every object in it.
EVERYTHING = [BUCKET_ARN, f"{BUCKET_ARN}/*"]
#: CDK's `enforce_ssl` statement: every request without TLS is refused, whoever sends it.
TLS_ONLY = {"Action": "s3:*", "Condition": {"Bool": {"aws:SecureTransport": "false"}}, "Effect": "Deny",
            "Principal": {"AWS": "*"}, "Resource": EVERYTHING}

#: Where the landing bucket ARN is longest (`uploaders.LONGEST_LANDING_BUCKET_ARN`).
LONGEST = {"account": "123456789012", "region": "ap-southeast-5", "partition": "aws-us-gov"}


@pytest.fixture(scope="module")
def uploaders_app(tmp_path_factory):
    root = tmp_path_factory.mktemp("uploaders")
    (root / "tenants.yaml").write_text(TENANTS)
    return synthesize(root / "tenants.yaml", root / "cdk.out")  # cdk-nag on: no finding


def landing_policy(templates, *, account: str = ACCOUNT, region: str = REGION, partition: str = "aws") -> list[dict]:
    """The landing bucket policy's statements with their intrinsics rendered (the IAM lint's
    resolver) as CloudFormation renders them for the shared stack in ``account`` and ``region``."""
    shared = {SHARED: templates[SHARED]}
    landing = templates[SHARED]["Outputs"]["LandingBucketName"]["Value"]["Ref"]
    resolver = Resolver(shared, account=account, region=region, partition=partition)
    (document,) = [d for d in policy_documents(shared, resolver)
                   if d.resource_type == "AWS::S3::BucketPolicy" and d.target == (landing,)]
    return document.statements()


@pytest.fixture(scope="module")
def policy(uploaders_app) -> list[dict]:
    return landing_policy(uploaders_app.templates)


def obj(key: str) -> str:
    return f"{BUCKET_ARN}/{key}"


def listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def principals(statement: dict) -> set[str]:
    return set(listed(statement["Principal"]["AWS"]))


def account_of(arn: str) -> str:
    return arn.split(":")[4]


def naming(policy: list[dict], effect: str, principal: str) -> list[dict]:
    """The ``effect`` statements that name ``principal``: by its ARN, as every principal (`*`), or
    as one of its account's principals (the account's root ARN). A root ARN of the bucket's own
    account in an Allow grants nothing by itself (it leaves it to the identity policies)."""
    own_root = f"arn:aws:iam::{account_of(principal)}:root"
    via_root = effect == "Deny" or account_of(principal) != ACCOUNT
    return [s for s in policy if s["Effect"] == effect
            and principals(s) & {principal, "*", *([own_root] if via_root else [])}]


def shape(statement: dict) -> dict:
    """What a statement does, whoever it names: without Sid and Principal, its lists as sets."""
    return {k: frozenset(listed(v)) if k in ("Action", "NotAction", "Resource", "NotResource") else v
            for k, v in statement.items() if k not in ("Sid", "Principal")}


# --- the checks -------------------------------------------------------------------------------------


def check_allowed_to_put_only_under(policy: list[dict], principal: str, prefix: str) -> None:
    """One Allow names the principal: the two upload actions on its prefix's keys, no condition.
    (A same-account role then puts without an identity allow; another account's principal needs
    one too, and gets nothing else.)"""
    allows = [shape(s) for s in naming(policy, "Allow", principal)]
    assert allows == [{"Effect": "Allow", "Action": UPLOAD, "Resource": frozenset({obj(prefix + "*")})}], principal


def check_denied_all_but_putting_under(policy: list[dict], principal: str, prefix: str) -> None:
    """Besides TLS only, exactly two unconditional Denies name the role or user: every action
    but the two upload actions on the bucket and every object (no read, list, delete, ACL or
    bucket change, its own files included), and the upload actions on every key outside its
    prefix. Whatever its identity policy allows, it puts under its prefix and does nothing else."""
    denies = [shape(s) for s in naming(policy, "Deny", principal) if s != TLS_ONLY]
    expected = [{"Effect": "Deny", "NotAction": UPLOAD, "Resource": frozenset(EVERYTHING)},
                {"Effect": "Deny", "Action": UPLOAD, "NotResource": frozenset({obj(prefix + "*")})}]
    assert len(denies) == 2 and all(e in denies for e in expected), (principal, denies)


def check_granted_nothing(policy: list[dict], principal: str) -> None:
    assert naming(policy, "Allow", principal) == [], principal


def check_denied_nothing_but_plain_http(policy: list[dict], principal: str) -> None:
    """Only TLS-only names the principal: its own identity policy decides the rest."""
    assert [s for s in naming(policy, "Deny", principal) if s != TLS_ONLY] == [], principal


def check_tls_only(policy: list[dict]) -> None:
    assert TLS_ONLY in policy


# --- what the synthesized policy lets each principal do ---------------------------------------------


def test_an_uploader_is_allowed_to_put_under_its_tenants_prefix_and_nothing_else(policy):
    check_allowed_to_put_only_under(policy, ACME_UPLOADER, "acme/")
    check_allowed_to_put_only_under(policy, GLOBEX_UPLOADER, "globex/in/")
    # by its own ARN: a same-account role needs no identity allow to put
    (put,) = naming(policy, "Allow", ACME_UPLOADER)
    assert ACME_UPLOADER in principals(put)


def test_an_uploader_is_denied_every_other_action_and_every_key_outside_its_prefix(policy):
    check_denied_all_but_putting_under(policy, ACME_UPLOADER, "acme/")
    check_denied_all_but_putting_under(policy, GLOBEX_UPLOADER, "globex/in/")


def test_every_request_without_tls_is_denied_uploaders_included(policy):
    check_tls_only(policy)
    assert all(TLS_ONLY in naming(policy, "Deny", p) for p in (ACME_UPLOADER, GLOBEX_UPLOADER, PARTNER_ROLE))


def test_a_cross_account_uploader_is_allowed_to_put_under_its_prefix_and_no_deny_names_its_account(policy):
    """GIVEN the partner account's root as acme's uploader (its own IAM decides which of its
    principals) THEN each of its principals is allowed the puts under acme/ and nothing else:
    across accounts both policies must allow, so the Allow alone bounds it; a Deny naming the
    root would name every principal of that account."""
    for principal in (PARTNER_ROOT, PARTNER_ROLE):
        check_allowed_to_put_only_under(policy, principal, "acme/")
        check_denied_nothing_but_plain_http(policy, principal)


def test_the_policy_names_no_one_else_so_the_pipelines_roles_and_operators_keep_their_access(policy):
    """Their identity policies decide: the bucket policy neither grants them anything nor
    denies them anything but plain HTTP; and its only Allows are the uploaders' puts, each
    naming exactly its tenant's uploaders."""
    for principal in (PIPELINE_ROLE, OPERATOR):
        check_granted_nothing(policy, principal)
        check_denied_nothing_but_plain_http(policy, principal)
    allows = [(principals(s), shape(s)) for s in policy if s["Effect"] == "Allow"]
    assert allows == [
        ({ACME_UPLOADER, PARTNER_ROOT}, {"Effect": "Allow", "Action": UPLOAD, "Resource": frozenset({obj("acme/*")})}),
        ({GLOBEX_UPLOADER}, {"Effect": "Allow", "Action": UPLOAD, "Resource": frozenset({obj("globex/in/*")})}),
    ]
    denied = [principals(s) for s in policy if s["Effect"] == "Deny" and s != TLS_ONLY]
    assert denied == [{ACME_UPLOADER}] * 2 + [{GLOBEX_UPLOADER}] * 2


def change(sid: str | None, **fields) -> Callable[[list[dict]], list[dict]]:
    """A copy of the policy with statement ``sid`` changed (None: TLS only, which has no Sid);
    a field set to None is removed."""

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
    check_allowed_to_put_only_under(policy, ACME_UPLOADER, "acme/")


def acme_denied(policy):
    check_denied_all_but_putting_under(policy, ACME_UPLOADER, "acme/")


def partner_not_denied(policy):
    check_denied_nothing_but_plain_http(policy, PARTNER_ROLE)


def operator_untouched(policy):
    check_granted_nothing(policy, OPERATOR)
    check_denied_nothing_but_plain_http(policy, OPERATOR)


@pytest.mark.parametrize(("mutate", "check"), [
    pytest.param(change("UploadersacmePut", Resource=obj("*")), acme_put, id="allow on every key"),
    pytest.param(change("UploadersacmePut", Resource=obj("acme*")), acme_put, id="allow on acme-other/ too"),
    pytest.param(change("UploadersacmePut", Action=["s3:Put*"]), acme_put, id="allow PutObjectAcl, tagging"),
    pytest.param(change("UploadersacmePut", Principal={"AWS": [f"arn:aws:iam::{ACCOUNT}:root", PARTNER_ROOT]}),
                 acme_put, id="allow this account, not the role"),
    pytest.param(change("UploadersacmeDenyOtherKeys", Resource=obj("acme/*"), NotResource=None), acme_denied,
                 id="deny puts inside the prefix instead of outside"),
    pytest.param(change("UploadersacmeDenyOtherKeys", NotResource=obj("globex/in/*")), acme_denied,
                 id="deny puts outside another prefix"),
    pytest.param(change("UploadersacmeDenyOtherKeys", Condition=TLS_ONLY["Condition"]), acme_denied,
                 id="deny other keys only without TLS"),
    pytest.param(change("UploadersacmeDenyOtherActions", NotAction=[*UPLOAD, "s3:GetObject"]), acme_denied,
                 id="deny all but puts and reads"),
    pytest.param(change("UploadersacmeDenyOtherActions", Resource=obj("*")), acme_denied,
                 id="deny other actions on objects only, so listing the bucket is left"),
    pytest.param(add({"Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "s3:PutObject", "Resource": obj("*")}),
                 acme_denied, id="deny every put to everyone"),
    pytest.param(change("UploadersacmeDenyOtherKeys", Principal={"AWS": [ACME_UPLOADER, PARTNER_ROOT]}),
                 partner_not_denied, id="deny names the partner account"),
    pytest.param(change("UploadersacmeDenyOtherActions", Principal={"AWS": f"arn:aws:iam::{ACCOUNT}:root"}),
                 operator_untouched, id="deny names this account"),
    pytest.param(change("UploadersacmePut", Principal={"AWS": [ACME_UPLOADER, PARTNER_ROOT, OPERATOR]}),
                 operator_untouched, id="allow an operator to put"),
    pytest.param(add({"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "s3:GetObject", "Resource": obj("*")}),
                 operator_untouched, id="allow everyone to read"),
    pytest.param(change(None, Resource=[BUCKET_ARN]), check_tls_only, id="tls only for the bucket, not objects"),
    pytest.param(change(None, Condition={"Bool": {"aws:SecureTransport": "true"}}), check_tls_only,
                 id="deny with TLS instead of without"),
])
def test_each_check_fails_on_a_policy_that_breaks_it(policy, mutate, check):
    """GIVEN the synthesized policy, which passes the check, WHEN one statement is wrong in the
    way the test id says THEN the check fails."""
    check(policy)
    with pytest.raises(AssertionError):
        check(mutate(policy))


# --- the statements as synthesized ---------------------------------------------------------------


def test_each_tenant_with_uploaders_has_an_allow_and_two_denies_and_a_tenant_without_has_none(policy):
    by_sid = {s.get("Sid"): s for s in policy}
    assert sorted(sid for sid in by_sid if sid) == [
        "UploadersacmeDenyOtherActions", "UploadersacmeDenyOtherKeys", "UploadersacmePut",
        "UploadersglobexDenyOtherActions", "UploadersglobexDenyOtherKeys", "UploadersglobexPut",
    ]
    assert not [s for s in policy if "initech" in json.dumps(s)]
    # the cross-account ARN exactly as given
    assert by_sid["UploadersacmePut"]["Principal"] == {"AWS": [ACME_UPLOADER, PARTNER_ROOT]}


def test_without_uploaders_the_landing_policy_is_tls_only_and_the_model_counts_just_that(synthesized):
    """The tests' default tenants declare no uploaders: their shared stack is as before."""
    from tests.conftest import DEFAULT_TENANTS

    assert landing_policy(synthesized.templates) == [TLS_ONLY]
    longest = landing_policy(synthesized.templates, **LONGEST)
    tenants = parse_config(DEFAULT_TENANTS.read_text()).tenants
    assert capacity.landing_bucket_policy_bytes(tenants).count == uploaders.policy_bytes([]) == len(
        json.dumps({"Statement": longest, "Version": "2012-10-17"}, separators=(",", ":")))


def test_the_size_model_is_the_synthesized_policy_at_the_longest_bucket_arn(uploaders_app):
    """GIVEN the synthesized policy rendered for the longest landing bucket ARN WHEN measured
    THEN the capacity model's figure is never below it (and within 1 %: CDK writes a single
    principal as a string, the model as a list)."""
    statements = landing_policy(uploaders_app.templates, **LONGEST)
    assert statements[0]["Resource"][0] == uploaders.LONGEST_LANDING_BUCKET_ARN
    actual = len(json.dumps({"Statement": statements, "Version": "2012-10-17"}, separators=(",", ":")))
    config = parse_config(TENANTS)
    modelled = capacity.landing_bucket_policy_bytes(config.tenants).count
    assert actual <= modelled <= actual * 1.01


# --- the size check --------------------------------------------------------------------------------


def tenants_with_uploaders(count: int) -> str:
    entries = "\n".join(
        f"  - {{id: tenant-{i:03d}, prefix: tenant-{i:03d}/, uploaders: "
        f"['arn:aws:iam::{ACCOUNT}:role/tenant-{i:03d}-uploader']}}" for i in range(count))
    return f"defaults:\n  sink: {{url: https://core.example.com/records, auth: {{type: bearer, secret: core/token}}}}\ntenants:\n{entries}\n"


def test_twenty_tenants_with_one_uploader_role_each_fit_the_bucket_policy():
    config = parse_config(tenants_with_uploaders(20))
    need = capacity.landing_bucket_policy_bytes(config.tenants)
    assert need.count <= uploaders.BUCKET_POLICY_LIMIT_BYTES
    assert need.how == f"{uploaders.policy_bytes([])} bytes of the TLS-only statement + " \
                       f"{need.count - uploaders.policy_bytes([])} bytes of the uploader statements of 20 tenants"


def test_fails_when_the_uploader_statements_do_not_fit_the_landing_bucket_policy():
    with pytest.raises(ConfigError) as raised:
        parse_config(tenants_with_uploaders(30))
    (problem,) = raised.value.problems
    need = capacity.landing_bucket_policy_bytes(parse_config(tenants_with_uploaders(30),
                                                             check_capacity=False).tenants).count
    assert problem == (
        "the deployment (the account and Region cdk deploy uses): S3 bucket policy size of the landing bucket "
        f"(20 KB, not adjustable): need {need} (310 bytes of the TLS-only statement + {need - 310} bytes of the "
        "uploader statements of 30 tenants), limit 20480; fix: give uploaders fewer principals (one role per "
        "uploading system; docs/scaling.md, Uploaders past one bucket policy), "
        "or move tenants to another target (targets:, docs/scaling.md)"
    )


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
        f"tenant 'globex': field 'uploaders' = '{ACME_UPLOADER}': is also an uploader of tenant 'acme': each "
        "tenant's bucket policy denies its uploaders every put outside its own prefix, so this principal could "
        "upload nowhere; give each tenant's uploading system a principal (role or user) of its own"
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


def test_cfn_lint_finds_nothing_in_the_shared_stack_with_uploaders(uploaders_app):
    from cfnlint.api import lint_all

    matches = lint_all(json.dumps(uploaders_app.templates["OrderedIngest-Shared"]))
    assert [f"{m.rule.id} {m.message}" for m in matches if m.rule.id[0] in "EW"] == []


def test_parliament_finds_nothing_in_the_landing_bucket_policy(policy):
    parliament = pytest.importorskip("parliament")
    document = json.dumps({"Version": "2012-10-17", "Statement": policy})
    findings = parliament.analyze_policy_string(document, include_community_auditors=False).findings
    assert [(f.issue, f.detail) for f in findings] == []


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
    config = parse_config(textwrap.dedent(f"""
        defaults: {{sink: {{url: https://core.example.com/records, auth: {{type: bearer, secret: core/token}}}}}}
        tenants:
          - {{id: acme, prefix: acme/, uploaders: ['{PARTNER_ROOT}']}}
          - {{id: globex, prefix: globex/, uploaders: ['{PARTNER_ROOT}']}}
    """))
    assert [t.uploaders for t in config.tenants] == [[PARTNER_ROOT], [PARTNER_ROOT]]
