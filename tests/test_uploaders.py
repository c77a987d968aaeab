"""Per-tenant uploaders (docs/security.md, "Uploaders"): the synthesized landing bucket policy, judged by
a policy evaluator (`local_runtime.bucket_policy`), its size check and its configuration."""

from __future__ import annotations

import json
import textwrap

import pytest

from local_runtime.bucket_policy import Decision, Request, UnsupportedPolicy, evaluate, landing_policy
from pipeline_constructs import capacity, uploaders
from pipeline_constructs.config import ConfigError, parse_config
from tests.conftest import problems_of, synthesize

ACCOUNT = "111111111111"
BUCKET = f"ordered-ingest-landing-{ACCOUNT}-eu-west-1"
ACME_UPLOADER = f"arn:aws:iam::{ACCOUNT}:role/acme-uploader"
GLOBEX_UPLOADER = f"arn:aws:iam::{ACCOUNT}:user/globex-sftp"
PARTNER_ACCOUNT = "222222222222"
PARTNER_ROOT = f"arn:aws:iam::{PARTNER_ACCOUNT}:root"

TENANTS = f"""
defaults:
  sink: {{url: https://core.example.com/records, auth: {{type: none}}}}
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


@pytest.fixture(scope="module")
def uploaders_app(tmp_path_factory):
    root = tmp_path_factory.mktemp("uploaders")
    (root / "tenants.yaml").write_text(TENANTS)
    return synthesize(root / "tenants.yaml", root / "cdk.out")  # cdk-nag on: no finding


@pytest.fixture(scope="module")
def policy(uploaders_app) -> list[dict]:
    return landing_policy(uploaders_app.templates["OrderedIngest-Shared"], bucket_name=BUCKET)


def obj(key: str) -> str:
    return f"arn:aws:s3:::{BUCKET}/{key}"


def decide(policy, principal: str, action: str, resource: str, *, identity_allows: bool = True,
           secure_transport: bool = True) -> Decision:
    """S3's decision; by default the caller's own identity policy allows everything (`s3:*` on
    `*`): the bucket policy alone must keep the uploader in its prefix."""
    request = Request(principal, action, resource, secure_transport=secure_transport)
    return evaluate(policy, request, bucket_account=ACCOUNT, identity_allows=identity_allows).decision


# --- what the synthesized policy lets tenant A's uploader do ---------------------------------------


def test_an_uploader_can_put_under_its_tenants_prefix_even_without_an_identity_allow(policy):
    assert decide(policy, ACME_UPLOADER, "s3:PutObject", obj("acme/2026/file-001.csv"),
                  identity_allows=False) is Decision.ALLOWED
    assert decide(policy, ACME_UPLOADER, "s3:AbortMultipartUpload", obj("acme/big.csv")) is Decision.ALLOWED
    assert decide(policy, GLOBEX_UPLOADER, "s3:PutObject", obj("globex/in/f.jsonl")) is Decision.ALLOWED


@pytest.mark.parametrize("key", ["globex/in/f.csv", "initech/f.csv", "f.csv", "acme", "other/acme/f.csv",
                                 "globex/acme/f.csv"])
def test_an_uploader_cannot_put_outside_its_prefix_even_when_its_identity_policy_allows_s3_everything(policy, key):
    assert decide(policy, ACME_UPLOADER, "s3:PutObject", obj(key)) is Decision.EXPLICIT_DENY
    assert decide(policy, ACME_UPLOADER, "s3:AbortMultipartUpload", obj(key)) is Decision.EXPLICIT_DENY


@pytest.mark.parametrize("action", ["s3:GetObject", "s3:GetObjectVersion", "s3:DeleteObject",
                                    "s3:DeleteObjectVersion", "s3:PutObjectAcl", "s3:PutObjectTagging",
                                    "s3:RestoreObject", "s3:PutObjectRetention"])
@pytest.mark.parametrize("key", ["acme/f.csv", "globex/in/f.csv"])
def test_an_uploader_cannot_read_delete_or_change_any_object_not_even_its_own(policy, action, key):
    assert decide(policy, ACME_UPLOADER, action, obj(key)) is Decision.EXPLICIT_DENY


@pytest.mark.parametrize("action", ["s3:ListBucket", "s3:ListBucketVersions", "s3:PutBucketPolicy",
                                    "s3:DeleteBucket", "s3:PutLifecycleConfiguration"])
def test_an_uploader_cannot_list_or_change_the_bucket(policy, action):
    assert decide(policy, ACME_UPLOADER, action, f"arn:aws:s3:::{BUCKET}") is Decision.EXPLICIT_DENY


def test_an_uploader_cannot_put_without_tls(policy):
    assert decide(policy, ACME_UPLOADER, "s3:PutObject", obj("acme/f.csv"),
                  secure_transport=False) is Decision.EXPLICIT_DENY


def test_a_cross_account_uploader_puts_under_its_prefix_and_nowhere_else(policy):
    """GIVEN the partner account's root as acme's uploader (its own IAM decides which of its
    principals) THEN its principals put under acme/ (their identity policy allows) and nothing
    else: across accounts both policies must allow, and the bucket policy allows nothing else."""
    partner = f"arn:aws:iam::{PARTNER_ACCOUNT}:role/any-role"
    assert decide(policy, partner, "s3:PutObject", obj("acme/f.csv")) is Decision.ALLOWED
    assert decide(policy, partner, "s3:PutObject", obj("acme/f.csv"), identity_allows=False) is Decision.IMPLICIT_DENY
    for action, key in (("s3:PutObject", "globex/in/f.csv"), ("s3:PutObject", "f.csv"),
                        ("s3:GetObject", "acme/f.csv"), ("s3:DeleteObjectVersion", "acme/f.csv")):
        assert decide(policy, partner, action, obj(key)) is Decision.IMPLICIT_DENY, (action, key)


def test_the_denies_name_no_one_else_so_the_pipelines_roles_and_operators_keep_their_access(policy):
    split_role = f"arn:aws:iam::{ACCOUNT}:role/OrderedIngest-Tenant-acme-PipelineDataRole44AB444D-X"
    operator = f"arn:aws:iam::{ACCOUNT}:role/operators"
    for principal in (split_role, operator):
        for action, key in (("s3:GetObject", "acme/f.csv"), ("s3:GetObjectVersion", "globex/in/f.csv"),
                            ("s3:PutObject", "f.csv")):
            assert decide(policy, principal, action, obj(key)) is Decision.ALLOWED, (principal, action)
        # and without an identity allow, the bucket policy grants them nothing
        assert decide(policy, principal, "s3:GetObject", obj("acme/f.csv"),
                      identity_allows=False) is Decision.IMPLICIT_DENY


def test_the_account_root_uploader_gets_no_deny_that_would_cover_this_accounts_principals(policy):
    denies = [s for s in policy if s["Effect"] == "Deny" and s.get("Principal") != {"AWS": "*"}]
    assert all(PARTNER_ROOT not in json.dumps(s["Principal"]) for s in denies)


# --- the statements as synthesized ---------------------------------------------------------------


def test_each_tenant_with_uploaders_has_an_allow_and_two_denies_and_a_tenant_without_has_none(policy):
    by_sid = {s.get("Sid"): s for s in policy}
    assert sorted(sid for sid in by_sid if sid) == [
        "UploadersacmeDenyOtherActions", "UploadersacmeDenyOtherKeys", "UploadersacmePut",
        "UploadersglobexDenyOtherActions", "UploadersglobexDenyOtherKeys", "UploadersglobexPut",
    ]
    assert not [s for s in policy if "initech" in json.dumps(s)]
    put = by_sid["UploadersacmePut"]
    assert put["Effect"] == "Allow"
    assert sorted(put["Action"]) == ["s3:AbortMultipartUpload", "s3:PutObject"]
    assert put["Resource"] == obj("acme/*")
    # the cross-account ARN exactly as given
    assert put["Principal"] == {"AWS": [ACME_UPLOADER, PARTNER_ROOT]}
    assert by_sid["UploadersacmeDenyOtherKeys"]["NotResource"] == obj("acme/*")
    assert by_sid["UploadersglobexDenyOtherActions"]["Resource"] == [f"arn:aws:s3:::{BUCKET}", obj("*")]


def test_without_uploaders_the_landing_policy_is_tls_only_and_the_model_counts_just_that(synthesized):
    """The tests' default tenants declare no uploaders: their shared stack is as before."""
    from tests.conftest import DEFAULT_TENANTS

    statements = landing_policy(synthesized.templates["OrderedIngest-Shared"], bucket_name=BUCKET)
    assert [s["Principal"] for s in statements] == [{"AWS": "*"}]
    tenants = parse_config(DEFAULT_TENANTS.read_text()).tenants
    assert capacity.landing_bucket_policy_bytes(tenants).count == uploaders.policy_bytes([]) == len(
        json.dumps({"Statement": statements, "Version": "2012-10-17"}, separators=(",", ":"))) + len(
        uploaders.LONGEST_LANDING_BUCKET_ARN) * 2 - len(f"arn:aws:s3:::{BUCKET}") * 2


def test_the_tls_statement_covers_every_principal_and_every_action(policy):
    (tls,) = [s for s in policy if "Condition" in s]
    assert tls == {"Action": "s3:*", "Condition": {"Bool": {"aws:SecureTransport": "false"}}, "Effect": "Deny",
                   "Principal": {"AWS": "*"}, "Resource": [f"arn:aws:s3:::{BUCKET}", obj("*")]}


def test_the_size_model_is_the_synthesized_policy_at_the_longest_bucket_arn(uploaders_app):
    """GIVEN the synthesized policy rendered for the longest landing bucket ARN WHEN measured
    THEN the capacity model's figure is never below it (and within 1 %: CDK writes a single
    principal as a string, the model as a list)."""
    arn = uploaders.LONGEST_LANDING_BUCKET_ARN
    statements = landing_policy(uploaders_app.templates["OrderedIngest-Shared"], bucket_name=arn.split(":::")[1],
                                partition="aws-us-gov")
    actual = len(json.dumps({"Statement": statements, "Version": "2012-10-17"}, separators=(",", ":")))
    config = parse_config(TENANTS)
    modelled = capacity.landing_bucket_policy_bytes(config.tenants).count
    assert actual <= modelled <= actual * 1.01


# --- the size check --------------------------------------------------------------------------------


def tenants_with_uploaders(count: int) -> str:
    entries = "\n".join(
        f"  - {{id: tenant-{i:03d}, prefix: tenant-{i:03d}/, uploaders: "
        f"['arn:aws:iam::{ACCOUNT}:role/tenant-{i:03d}-uploader']}}" for i in range(count))
    return f"defaults:\n  sink: {{url: https://core.example.com/records, auth: {{type: none}}}}\ntenants:\n{entries}\n"


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
        defaults: {sink: {url: https://core.example.com/records, auth: {type: none}}}
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
        defaults: {{sink: {{url: https://core.example.com/records, auth: {{type: none}}}}}}
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
        defaults: {{sink: {{url: https://core.example.com/records, auth: {{type: none}}}}, uploaders: ['{ACME_UPLOADER}']}}
        tenants:
          - {{id: acme, prefix: acme/}}
    """) == [
        f"defaults: field 'uploaders' = ['{ACME_UPLOADER}']: is per tenant: each tenant lists the principals "
        "that upload its files; move it into the tenant whose files it uploads"
    ]


def test_fails_when_an_uploader_is_listed_twice():
    assert problems_of(f"""
        defaults: {{sink: {{url: https://core.example.com/records, auth: {{type: none}}}}}}
        tenants:
          - {{id: acme, prefix: acme/, uploaders: ['{ACME_UPLOADER}', '{ACME_UPLOADER}']}}
    """) == [
        f"tenant 'acme': field 'uploaders' = ['{ACME_UPLOADER}', '{ACME_UPLOADER}']: lists a principal twice; "
        "list the IAM role or user ARNs of the tenant's uploading system, e.g. "
        "['arn:aws:iam::111111111111:role/acme-uploader'], or an account root ARN 'arn:aws:iam::222222222222:root' "
        "for another account"
    ]


# --- the evaluator itself ---------------------------------------------------------------------------


def test_the_evaluator_refuses_what_it_does_not_model():
    statement = {"Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "s3:*", "Resource": "*",
                 "Condition": {"StringEquals": {"aws:SourceVpce": "vpce-1"}}}
    with pytest.raises(UnsupportedPolicy, match="StringEquals"):
        evaluate([statement], Request(ACME_UPLOADER, "s3:GetObject", obj("a")), bucket_account=ACCOUNT,
                 identity_allows=True)


def test_the_evaluator_lets_an_explicit_deny_win_over_an_allow():
    allow = {"Effect": "Allow", "Principal": {"AWS": ACME_UPLOADER}, "Action": "s3:*", "Resource": obj("*")}
    deny = {"Sid": "No", "Effect": "Deny", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
            "Action": "s3:Get*", "Resource": obj("*")}
    verdict = evaluate([allow, deny], Request(ACME_UPLOADER, "s3:GetObject", obj("a")), bucket_account=ACCOUNT,
                       identity_allows=False)
    assert (verdict.decision, verdict.statements) == (Decision.EXPLICIT_DENY, ("No",))
    verdict = evaluate([allow, deny], Request(ACME_UPLOADER, "s3:PutObject", obj("a")), bucket_account=ACCOUNT,
                       identity_allows=False)
    assert (verdict.decision, verdict.statements) == (Decision.ALLOWED, ("#0",))


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
        defaults: {{sink: {{url: https://core.example.com/records, auth: {{type: none}}}}, target: prod}}
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
        defaults: {{sink: {{url: https://core.example.com/records, auth: {{type: none}}}}}}
        tenants:
          - {{id: acme, prefix: acme/, uploaders: ['{PARTNER_ROOT}']}}
          - {{id: globex, prefix: globex/, uploaders: ['{PARTNER_ROOT}']}}
    """))
    assert [t.uploaders for t in config.tenants] == [[PARTNER_ROOT], [PARTNER_ROOT]]
