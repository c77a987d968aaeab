"""Customer-managed KMS keys in the templates: `encryption: {kms_key: ...}`
at the top level (the shared resources) and per tenant (its own resources); the key policies;
the roles' use of the keys; `SharedResources.grant_upload`; the `encryption` block of
tenants.yaml. Its own tenants files."""

from __future__ import annotations

import json

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Template

from pipeline_constructs import encryption
from pipeline_constructs.config import parse_config
from pipeline_constructs.shared import SharedResources, SharedResourcesProps
from tests.conftest import Synthesized, cfn_lint_findings, problems_of, ssm_parameter_ref, synthesize
from tests.test_app import kept_resources
from tests.test_tenant_pipeline import policy_statements_of_role

GIVEN_KEY = "arn:aws:kms:us-east-1:111111111111:key/1234abcd-12ab-34cd-56ef-1234567890ab"
SHARED_GIVEN_KEY = "arn:aws:kms:us-east-1:111111111111:key/mrk-1234abcd12ab34cd56ef1234567890ab"
CREATED = f"""
encryption: {{kms_key: create}}
defaults:
  sink: {{url: "https://core.example.com/records", auth: {{type: bearer, secret: core/token}}}}
tenants:
  - id: sealed
    prefix: sealed/
    encryption: {{kms_key: create}}
    uploaders: ["arn:aws:iam::222222222222:role/sealed-uploader"]
  - id: given
    prefix: given/
    encryption: {{kms_key: "{GIVEN_KEY}"}}
  - id: plain
    prefix: plain/
    completion: {{wait: true, callers: ["arn:aws:iam::111111111111:role/core-system"]}}
"""
GIVEN = f"""
encryption: {{kms_key: "{SHARED_GIVEN_KEY}"}}
defaults:
  sink: {{url: "https://core.example.com/records", auth: {{type: bearer, secret: core/token}}}}
tenants:
  - id: plain
    prefix: plain/
"""
SHARED = "OrderedIngest-Shared"


def _synthesize(tmp_path_factory: pytest.TempPathFactory, name: str, text: str) -> Synthesized:
    directory = tmp_path_factory.mktemp(name)
    (directory / "tenants.yaml").write_text(text, encoding="utf-8")
    return synthesize(directory / "tenants.yaml", directory / "cdk.out")


@pytest.fixture(scope="module")
def created(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return _synthesize(tmp_path_factory, "created", CREATED)


@pytest.fixture(scope="module")
def given(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return _synthesize(tmp_path_factory, "given", GIVEN)


def _resources(template: dict, kind: str) -> dict[str, dict]:
    return {k: r for k, r in template["Resources"].items() if r["Type"] == kind}


def _key_parameters(template: dict) -> dict[str, dict]:
    """The SSM parameter of the shared key's ARN (the shared stack's others name the ledger and the topic)."""
    return {
        k: r
        for k, r in _resources(template, "AWS::SSM::Parameter").items()
        if r["Properties"]["Name"] == encryption.shared_key_parameter()
    }


def _only_key(template: dict) -> tuple[str, dict]:
    keys = {k: r for k, r in _resources(template, "AWS::KMS::Key").items() if "AlarmTopicKey" not in k}
    ((logical_id, key),) = keys.items()
    return logical_id, key


def _kms_statements(template: Template, role_prefix: str) -> list[dict]:
    return [s for s in policy_statements_of_role(template, role_prefix) if "kms:" in json.dumps(s["Action"])]


def _via(service: str) -> dict:
    return {"Fn::Join": ["", [f"{service}.", {"Ref": "AWS::Region"}, ".amazonaws.com"]]}


def _bucket_arn(kind: str) -> dict:
    return {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                f":s3:::ordered-ingest-{kind}-",
                {"Ref": "AWS::AccountId"},
                "-",
                {"Ref": "AWS::Region"},
            ],
        ]
    }


# --- default: no key ------------------------------------------------------------------------


def test_without_encryption_no_key_is_made_and_aws_managed_keys_stay(synthesized: Synthesized) -> None:
    """The fixture's tenants file has no `encryption`: the templates are today's."""
    shared = synthesized.templates[SHARED]
    assert list(_resources(shared, "AWS::KMS::Key")) == [
        k for k in _resources(shared, "AWS::KMS::Key") if "AlarmTopicKey" in k
    ]
    assert not _key_parameters(shared)
    assert all(
        q["Properties"]["SqsManagedSseEnabled"] for q in _resources(shared, "AWS::SQS::Queue").values()
    )
    for bucket in _resources(shared, "AWS::S3::Bucket").values():
        (rule,) = bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
        assert rule == {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}
    (table,) = _resources(shared, "AWS::DynamoDB::Table").values()
    assert table["Properties"]["SSESpecification"] == {"SSEEnabled": True}  # the AWS managed key
    tenant = synthesized.templates["OrderedIngest-Tenant-acme"]
    assert not _resources(tenant, "AWS::KMS::Key") and encryption.shared_key_parameter() not in json.dumps(
        tenant
    )
    assert all(
        q["Properties"]["SqsManagedSseEnabled"] for q in _resources(tenant, "AWS::SQS::Queue").values()
    )
    assert not [
        g for g in _resources(tenant, "AWS::Logs::LogGroup").values() if "KmsKeyId" in g["Properties"]
    ]
    assert not [
        f for f in _resources(tenant, "AWS::Lambda::Function").values() if "KmsKeyArn" in f["Properties"]
    ]


# --- create: the shared key -------------------------------------------------------------------


def test_create_makes_one_shared_key_with_rotation_kept_on_delete_and_a_fixed_alias(
    created: Synthesized,
) -> None:
    shared = created.templates[SHARED]
    key_id, key = _only_key(shared)
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["DeletionPolicy"] == "RetainExceptOnCreate" and key["UpdateReplacePolicy"] == "Retain"
    (alias,) = _resources(shared, "AWS::KMS::Alias").values()
    assert alias["Properties"] == {
        "AliasName": "alias/ordered-ingest",
        "TargetKeyId": {"Fn::GetAtt": [key_id, "Arn"]},
    }


def test_the_shared_key_encrypts_the_buckets_with_bucket_keys_the_ledger_and_the_unmatched_log_group(
    created: Synthesized,
) -> None:
    shared = created.templates[SHARED]
    key_id, _ = _only_key(shared)
    arn = {"Fn::GetAtt": [key_id, "Arn"]}
    encryptions = {
        b["Properties"]["BucketName"]["Fn::Join"][1][0]: b["Properties"]["BucketEncryption"]
        for b in _resources(shared, "AWS::S3::Bucket").values()
        if "BucketName" in b["Properties"]
    }
    for name in ("ordered-ingest-landing-", "ordered-ingest-work-"):
        assert encryptions[name] == {
            "ServerSideEncryptionConfiguration": [
                {
                    "BucketKeyEnabled": True,
                    "ServerSideEncryptionByDefault": {"KMSMasterKeyID": arn, "SSEAlgorithm": "aws:kms"},
                }
            ]
        }
    (table,) = _resources(shared, "AWS::DynamoDB::Table").values()
    assert table["Properties"]["SSESpecification"] == {
        "KMSMasterKeyId": arn,
        "SSEEnabled": True,
        "SSEType": "KMS",
    }
    (log_group,) = _resources(shared, "AWS::Logs::LogGroup").values()
    assert log_group["Properties"]["KmsKeyId"] == arn
    (dlq,) = _resources(shared, "AWS::SQS::Queue").values()  # the unmatched uploads' dead letters
    assert dlq["Properties"]["KmsMasterKeyId"] == arn


def test_the_shared_key_policy_lets_logs_use_it_for_its_log_group_and_eventbridge_for_the_shared_rules(
    created: Synthesized,
) -> None:
    """CloudWatch Logs: the unmatched-uploads log group only. EventBridge: dead letters of the
    shared stack's rules (`ordered-ingest-*`, the pattern of the routing DLQ's queue policy)."""
    _, key = _only_key(created.templates[SHARED])
    root, rules, logs = [
        s
        for s in key["Properties"]["KeyPolicy"]["Statement"]
        if s.get("Sid") != "UploadersEncryptNewLandingObjects"
    ]  # (the next test)
    assert rules["Principal"] == {"Service": "events.amazonaws.com"}
    assert sorted(rules["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert rules["Condition"] == {
        "ArnLike": {
            "aws:SourceArn": [
                {
                    "Fn::Join": [
                        "",
                        [
                            "arn:",
                            {"Ref": "AWS::Partition"},
                            ":events:",
                            {"Ref": "AWS::Region"},
                            ":",
                            {"Ref": "AWS::AccountId"},
                            ":rule/ordered-ingest-*",
                        ],
                    ]
                }
            ]
        }
    }
    assert root["Action"] == "kms:*" and root["Principal"]["AWS"]["Fn::Join"][1][-1] == ":root"
    assert logs["Principal"] == {"Service": _via("logs")}
    assert sorted(logs["Action"]) == sorted(encryption.LOGS_ACTIONS) and not [
        a for a in logs["Action"] if "*" in a
    ]
    assert logs["Condition"] == {
        "ArnEquals": {
            "kms:EncryptionContext:aws:logs:arn": [
                {
                    "Fn::Join": [
                        "",
                        [
                            "arn:",
                            {"Ref": "AWS::Partition"},
                            ":logs:",
                            {"Ref": "AWS::Region"},
                            ":",
                            {"Ref": "AWS::AccountId"},
                            ":log-group:/ordered-ingest/unmatched-uploads",
                        ],
                    ]
                }
            ]
        }
    }


def test_the_tenants_uploaders_may_encrypt_into_the_landing_bucket_with_the_created_key(
    created: Synthesized,
) -> None:
    # GIVEN a created shared key and a tenant with a cross-account uploader
    _, key = _only_key(created.templates[SHARED])
    # THEN the key policy lets exactly that uploader encrypt new landing objects, through S3,
    # naming it in a condition, not as the Principal: KMS refuses a key policy whose Principal
    # does not exist, and one deleted later turns into an id that fails every later put
    statements = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if "Uploader" in s.get("Sid", "")]
    assert statements == [
        {
            "Sid": "UploadersEncryptNewLandingObjects",
            "Effect": "Allow",
            "Principal": {"AWS": "*"},
            "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
            "Resource": "*",
            "Condition": {
                "ArnEquals": {"aws:PrincipalArn": ["arn:aws:iam::222222222222:role/sealed-uploader"]},
                "StringEquals": {
                    "kms:ViaService": [_via("s3")],
                    "kms:EncryptionContext:aws:s3:arn": _bucket_arn("landing"),
                },
            },
        }
    ]
    assert "sealed-uploader" not in json.dumps(
        [s["Principal"] for s in key["Properties"]["KeyPolicy"]["Statement"]]
    )


def test_tenant_stacks_read_the_created_shared_key_from_its_fixed_ssm_parameter(created: Synthesized) -> None:
    """No export: a tenant stack deploys alone, and the shared key can change under it."""
    shared = created.templates[SHARED]
    key_id, _ = _only_key(shared)
    (parameter,) = _key_parameters(shared).values()
    assert parameter["Properties"]["Name"] == encryption.shared_key_parameter()
    assert parameter["Properties"]["Value"] == {"Fn::GetAtt": [key_id, "Arn"]}
    plain = created.templates["OrderedIngest-Tenant-plain"]
    assert ssm_parameter_ref(plain, encryption.shared_key_parameter())
    assert "ExportsOutputFnGetAttSharedDataKey" not in json.dumps(plain)


def test_the_data_role_uses_the_shared_key_only_through_s3_for_its_buckets_and_through_dynamodb(
    created: Synthesized,
) -> None:
    """Split and register: decrypt landing files, encrypt and read chunks, use the ledger's key."""
    plain = created.template("OrderedIngest-Tenant-plain")
    key = ssm_parameter_ref(
        created.templates["OrderedIngest-Tenant-plain"], encryption.shared_key_parameter()
    )
    statements = {s["Sid"]: s for s in _kms_statements(plain, "PipelineDataRole")}
    assert statements == {
        "DecryptOwnLandingFiles": {
            "Action": "kms:Decrypt",
            "Effect": "Allow",
            "Resource": key,
            "Sid": "DecryptOwnLandingFiles",
            "Condition": {
                "StringEquals": {
                    "kms:ViaService": [_via("s3")],
                    "kms:EncryptionContext:aws:s3:arn": _bucket_arn("landing"),
                }
            },
        },
        "EncryptOwnChunks": {
            "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
            "Effect": "Allow",
            "Resource": key,
            "Sid": "EncryptOwnChunks",
            "Condition": {
                "StringEquals": {
                    "kms:ViaService": [_via("s3")],
                    "kms:EncryptionContext:aws:s3:arn": _bucket_arn("work"),
                }
            },
        },
        "UseLedgerTableKey": {
            "Action": "kms:Decrypt",
            "Effect": "Allow",
            "Resource": key,
            "Sid": "UseLedgerTableKey",
            "Condition": {"StringEquals": {"kms:ViaService": [_via("dynamodb")]}},
        },
    }


def test_the_controller_may_only_encrypt_quarantined_messages_in_the_work_bucket(
    created: Synthesized,
) -> None:
    plain = created.template("OrderedIngest-Tenant-plain")
    statements = {s["Sid"]: s for s in _kms_statements(plain, "PipelineControllerRole")}
    assert set(statements) == {"EncryptQuarantinedMessages", "UseLedgerTableKey"}
    quarantine = statements["EncryptQuarantinedMessages"]
    assert quarantine["Action"] == "kms:GenerateDataKey"
    assert quarantine["Condition"]["StringEquals"]["kms:EncryptionContext:aws:s3:arn"] == _bucket_arn("work")
    closer = {s.get("Sid") for s in _kms_statements(plain, "PipelineCloserRole")}
    assert closer == {None, "UseLedgerTableKey"}  # None: the alarm topic key (publish), as before


def test_the_completion_entry_point_and_the_workflow_use_the_ledger_key_only_through_dynamodb(
    created: Synthesized,
) -> None:
    """With `completion.wait` the workflow leaves the token on the position and the entry point
    answers: both use the ledger's key, through DynamoDB, and nothing else of the shared key."""
    plain = created.template("OrderedIngest-Tenant-plain")
    for role in ("PipelineWorkflowRole", "PipelineCompletionRole"):
        (statement,) = _kms_statements(plain, role)
        assert statement["Sid"] == "UseLedgerTableKey" and statement["Action"] == "kms:Decrypt"
        assert statement["Condition"] == {"StringEquals": {"kms:ViaService": [_via("dynamodb")]}}


# --- create: a tenant's key -----------------------------------------------------------------


def test_a_tenant_key_is_made_in_its_stack_with_rotation_kept_on_delete_and_its_alias(
    created: Synthesized,
) -> None:
    sealed = created.templates["OrderedIngest-Tenant-sealed"]
    key_id, key = _only_key(sealed)
    assert key["Properties"]["EnableKeyRotation"] is True and key["DeletionPolicy"] == "RetainExceptOnCreate"
    (alias,) = _resources(sealed, "AWS::KMS::Alias").values()
    assert alias["Properties"] == {
        "AliasName": "alias/ordered-ingest/sealed",
        "TargetKeyId": {"Fn::GetAtt": [key_id, "Arn"]},
    }
    assert not _resources(created.templates["OrderedIngest-Tenant-plain"], "AWS::KMS::Key")


def test_only_the_tenants_own_rule_may_send_to_its_encrypted_queue(created: Synthesized) -> None:
    # GIVEN a tenant queue encrypted with the tenant's key (CDK's SqsQueue target then drops the
    # rule condition, aws-cdk#11158, and keeps only the account's, the cdk.json feature flag
    # @aws-cdk/aws-events:eventsTargetQueueSameAccount)
    policies = _resources(created.templates["OrderedIngest-Tenant-sealed"], "AWS::SQS::QueuePolicy")
    (queue_policy,) = [
        p for p in policies.values() if "PipelineQueue" in json.dumps(p["Properties"]["Queues"])
    ]
    # THEN EventBridge may send to it only from the tenant's object-created rule
    (allow,) = [
        s for s in queue_policy["Properties"]["PolicyDocument"]["Statement"] if s["Effect"] == "Allow"
    ]
    assert allow["Principal"] == {"Service": "events.amazonaws.com"}
    assert allow["Condition"] == {
        "ArnEquals": {
            "aws:SourceArn": {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        ":events:",
                        {"Ref": "AWS::Region"},
                        ":",
                        {"Ref": "AWS::AccountId"},
                        ":rule/sealed-object-created",
                    ],
                ]
            }
        },
        "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
    }


def test_the_tenant_key_encrypts_its_queues_log_groups_and_function_environments(
    created: Synthesized,
) -> None:
    sealed = created.templates["OrderedIngest-Tenant-sealed"]
    key_id, _ = _only_key(sealed)
    arn = {"Fn::GetAtt": [key_id, "Arn"]}
    queues = _resources(sealed, "AWS::SQS::Queue").values()
    assert [q["Properties"]["KmsMasterKeyId"] for q in queues] == [
        arn,
        arn,
    ]  # the FIFO queue and the intake DLQ
    log_groups = _resources(sealed, "AWS::Logs::LogGroup").values()
    assert len(log_groups) == 7 and all(g["Properties"]["KmsKeyId"] == arn for g in log_groups)
    functions = _resources(sealed, "AWS::Lambda::Function").values()
    assert len(functions) == 4 and all(f["Properties"]["KmsKeyArn"] == arn for f in functions)


def test_the_tenant_key_policy_is_the_account_its_own_log_groups_and_its_own_rules_only(
    created: Synthesized,
) -> None:
    """Not CDK's SqsQueue target statement: that one lets events.amazonaws.com use the key
    for any rule (no condition)."""
    _, key = _only_key(created.templates["OrderedIngest-Tenant-sealed"])
    root, logs, rules = key["Properties"]["KeyPolicy"]["Statement"]
    assert root["Action"] == "kms:*" and "Condition" not in root
    groups = [
        g["Fn::Join"][1][-1] for g in logs["Condition"]["ArnEquals"]["kms:EncryptionContext:aws:logs:arn"]
    ]
    assert sorted(groups) == sorted(
        [
            ":log-group:/aws/lambda/sealed-controller",
            ":log-group:/aws/lambda/sealed-split",
            ":log-group:/aws/lambda/sealed-register-chunk",
            ":log-group:/aws/lambda/sealed-close-file",
            ":log-group:/aws/vendedlogs/states/sealed-file-ingest-workflow",
            ":log-group:/aws/vendedlogs/states/sealed-file-ingest-section",
            ":log-group:/aws/vendedlogs/states/sealed-file-ingest-page",
        ]
    )
    assert rules["Principal"] == {"Service": "events.amazonaws.com"}
    assert sorted(rules["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]
    sources = [s["Fn::Join"][1][-1] for s in rules["Condition"]["ArnEquals"]["aws:SourceArn"]]
    assert sources == [":rule/sealed-object-created", ":rule/sealed-sfn-status"]


def test_every_function_role_decrypts_its_environment_with_the_tenant_key_only_through_lambda(
    created: Synthesized,
) -> None:
    sealed = created.template("OrderedIngest-Tenant-sealed")
    key_id, _ = _only_key(created.templates["OrderedIngest-Tenant-sealed"])
    for role in ("PipelineDataRole", "PipelineControllerRole", "PipelineCloserRole"):
        (statement,) = [s for s in _kms_statements(sealed, role) if s.get("Sid") == "DecryptOwnEnvironment"]
        assert statement["Action"] == "kms:Decrypt" and statement["Resource"] == {
            "Fn::GetAtt": [key_id, "Arn"]
        }
        assert statement["Condition"] == {"StringEquals": {"kms:ViaService": [_via("lambda")]}}


def test_on_a_shard_bus_the_tenant_key_names_its_rules_on_that_bus(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """And the shared key encrypts the forwarding hop's dead-letter queue too."""
    sharded = _synthesize(
        tmp_path_factory,
        "sharded",
        (
            "routing: {shards: 2}\nencryption: {kms_key: create}\n"
            "defaults: {sink: {url: 'https://core.example.com/r', auth: {type: bearer, secret: core/token}}, encryption: {kms_key: create}}\n"
            "tenants:\n  - {id: acme, prefix: acme/}\n"
        ),
    )
    tenant = sharded.templates["OrderedIngest-Tenant-acme"]
    buses = {r["Properties"]["EventBusName"] for r in _resources(tenant, "AWS::Events::Rule").values()}
    _, key = _only_key(tenant)
    (rules,) = [
        s
        for s in key["Properties"]["KeyPolicy"]["Statement"]
        if s.get("Sid") == "EventBridgeDeliversOwnRules"
    ]
    sources = [s["Fn::Join"][1][-1] for s in rules["Condition"]["ArnEquals"]["aws:SourceArn"]]
    (bus,) = buses
    assert sources == [f":rule/{bus}/acme-object-created", f":rule/{bus}/acme-sfn-status"]
    shared = sharded.templates[SHARED]
    shared_key_id, _ = _only_key(shared)
    queues = {
        k: q["Properties"].get("KmsMasterKeyId") for k, q in _resources(shared, "AWS::SQS::Queue").items()
    }
    assert sorted(k.rstrip("0123456789ABCDEF") for k in queues) == ["ForwardingDlq", "UnmatchedUploadsDlq"]
    assert list(queues.values()) == [{"Fn::GetAtt": [shared_key_id, "Arn"]}] * 2


# --- a given key ARN ------------------------------------------------------------------------


def test_a_given_tenant_key_arn_is_used_as_given_and_no_key_is_made(created: Synthesized) -> None:
    given = created.templates["OrderedIngest-Tenant-given"]
    assert not _resources(given, "AWS::KMS::Key") and not _resources(given, "AWS::KMS::Alias")
    assert all(
        q["Properties"]["KmsMasterKeyId"] == GIVEN_KEY for q in _resources(given, "AWS::SQS::Queue").values()
    )
    assert all(
        g["Properties"]["KmsKeyId"] == GIVEN_KEY for g in _resources(given, "AWS::Logs::LogGroup").values()
    )
    assert all(
        f["Properties"]["KmsKeyArn"] == GIVEN_KEY for f in _resources(given, "AWS::Lambda::Function").values()
    )
    (statement,) = [
        s
        for s in _kms_statements(created.template("OrderedIngest-Tenant-given"), "PipelineDataRole")
        if s["Sid"] == "DecryptOwnEnvironment"
    ]
    assert statement["Resource"] == GIVEN_KEY


def test_a_given_shared_key_arn_is_used_as_given_no_key_nor_parameter_is_made(given: Synthesized) -> None:
    shared = given.templates[SHARED]
    assert [k for k in _resources(shared, "AWS::KMS::Key") if "AlarmTopicKey" not in k] == []
    assert not _resources(shared, "AWS::KMS::Alias") and not _key_parameters(shared)
    landing = next(
        b
        for b in _resources(shared, "AWS::S3::Bucket").values()
        if "ordered-ingest-landing-" in json.dumps(b["Properties"].get("BucketName"))
    )
    (rule,) = landing["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"]["KMSMasterKeyID"] == SHARED_GIVEN_KEY
    (table,) = _resources(shared, "AWS::DynamoDB::Table").values()
    assert table["Properties"]["SSESpecification"]["KMSMasterKeyId"] == SHARED_GIVEN_KEY
    plain = given.templates["OrderedIngest-Tenant-plain"]
    assert encryption.shared_key_parameter() not in json.dumps(plain)
    resources = {
        s["Sid"]: s["Resource"]
        for s in _kms_statements(given.template("OrderedIngest-Tenant-plain"), "PipelineDataRole")
    }
    assert resources == dict.fromkeys(
        ["DecryptOwnLandingFiles", "EncryptOwnChunks", "UseLedgerTableKey"], SHARED_GIVEN_KEY
    )


def test_the_created_keys_like_every_kept_resource_go_when_the_deploy_that_created_them_rolls_back(
    created: Synthesized,
) -> None:
    """The shared and the tenant key (and the alarm-topic key) beside the buckets, the table
    and the log groups: none would block the retry of a failed first create."""
    kept = {
        k: v
        for k, v in kept_resources(created.templates).items()
        if v[0] != "AWS::StepFunctions::StateMachineVersion"
    }
    keys = [k for k, v in kept.items() if v[0] == "AWS::KMS::Key"]
    assert len(keys) == 3, keys
    assert {v[1:] for v in kept.values()} == {("RetainExceptOnCreate", "Retain")}


@pytest.mark.parametrize("fixture", ["created", "given"])
def test_the_encrypted_stacks_are_cdk_nag_clean(fixture: str, request: pytest.FixtureRequest) -> None:
    report = request.getfixturevalue(fixture).validation_report
    (nag,) = [r for r in report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert nag["conclusion"] == "success" and nag["violations"] == []


@pytest.mark.slow  # cfn-lint or synthesis over whole apps: make test (make test-fast runs tests/test_user_tenants.py)
@pytest.mark.parametrize("fixture", ["created", "given"])
def test_the_encrypted_templates_are_cfn_lint_clean(fixture: str, request: pytest.FixtureRequest) -> None:
    for name, template in request.getfixturevalue(fixture).templates.items():
        assert cfn_lint_findings(template) == [], name


# --- uploaders ------------------------------------------------------------------------------


def _shared(kms_key: str | None) -> SharedResources:
    return SharedResources(Stack(App(), "Test"), "Shared", SharedResourcesProps(kms_key=kms_key))


def test_grant_upload_lets_an_uploader_encrypt_into_the_landing_bucket_only_through_s3() -> None:
    """GIVEN a created shared key WHEN an uploader of another account is granted
    THEN the key policy lets it generate data keys (and decrypt the parts of a multipart upload)
    through S3 for the landing bucket, nothing more."""
    shared = _shared("create")
    uploader = "arn:aws:iam::222222222222:role/acme-uploader"

    assert shared.grant_upload([uploader]) is True

    template = Template.from_stack(Stack.of(shared)).to_json()
    _, key = _only_key(template)
    (statement,) = [
        s
        for s in key["Properties"]["KeyPolicy"]["Statement"]
        if s.get("Sid") == "UploadersEncryptNewLandingObjects"
    ]
    assert statement["Principal"] == {"AWS": "*"}
    assert sorted(statement["Action"]) == ["kms:Decrypt", "kms:GenerateDataKey"]
    assert statement["Condition"] == {
        "ArnEquals": {"aws:PrincipalArn": [uploader]},
        "StringEquals": {
            "kms:ViaService": [_via("s3")],
            "kms:EncryptionContext:aws:s3:arn": _bucket_arn("landing"),
        },
    }


def test_grant_upload_names_another_account_by_its_root_as_principal() -> None:
    """GIVEN a role and another account's root WHEN granted THEN the role is named by
    `aws:PrincipalArn` (every principal narrowed to it), the account by its root as `Principal`
    (which delegates to that account's IAM: no condition says that), with the same actions and
    conditions; nobody else is named."""
    shared = _shared("create")
    role, partner = "arn:aws:iam::222222222222:role/acme-uploader", "arn:aws:iam::333333333333:root"

    assert shared.grant_upload([role, partner]) is True

    _, key = _only_key(Template.from_stack(Stack.of(shared)).to_json())
    by_sid = {
        s["Sid"]: s for s in key["Properties"]["KeyPolicy"]["Statement"] if "Uploader" in s.get("Sid", "")
    }
    assert set(by_sid) == {"UploadersEncryptNewLandingObjects", "UploadersEncryptNewLandingObjectsAccounts"}
    roles, accounts = (
        by_sid["UploadersEncryptNewLandingObjects"],
        by_sid["UploadersEncryptNewLandingObjectsAccounts"],
    )
    assert (roles["Principal"], roles["Condition"]["ArnEquals"]) == (
        {"AWS": "*"},
        {"aws:PrincipalArn": [role]},
    )
    assert accounts["Principal"] == {"AWS": partner} and "ArnEquals" not in accounts["Condition"]
    assert accounts["Condition"]["StringEquals"] == roles["Condition"]["StringEquals"]
    assert accounts["Action"] == roles["Action"] and accounts["Resource"] == roles["Resource"] == "*"


@pytest.mark.parametrize("kms_key", [None, GIVEN_KEY])
def test_grant_upload_adds_nothing_without_a_key_of_its_own(kms_key: str | None) -> None:
    """S3-managed encryption needs no grant; a given key's policy is its owner's."""
    shared = _shared(kms_key)
    assert shared.grant_upload(["arn:aws:iam::222222222222:role/acme-uploader"]) is False


# --- tenants.yaml ---------------------------------------------------------------------------

FIX = (
    "use 'create' (the app makes a key) or the ARN of a symmetric key in the same account and Region, "
    "e.g. 'arn:aws:kms:eu-west-1:111111111111:key/1234abcd-12ab-34cd-56ef-1234567890ab'"
)


def test_fails_when_kms_key_is_neither_create_nor_a_key_arn() -> None:
    assert problems_of(
        "encryption: {kms_key: yes-please}\n"
        "tenants:\n  - {id: acme, prefix: acme/, sink: {url: 'https://core.example.com/r', auth: {type: none}}, encryption: {kms_key: creat}}\n"
    ) == [
        f"encryption: field 'kms_key' = 'yes-please': is neither 'create' nor a KMS key ARN; {FIX}",
        f"tenant 'acme': field 'encryption.kms_key' = 'creat': is neither 'create' nor a KMS key ARN; {FIX}",
    ]


def test_fails_when_kms_key_is_an_alias() -> None:
    alias = "arn:aws:kms:eu-west-1:111111111111:alias/ordered-ingest"
    assert problems_of(
        f"defaults: {{sink: {{url: 'https://core.example.com/r', auth: {{type: bearer, secret: core/token}}}}, encryption: {{kms_key: '{alias}'}}}}\n"
        "tenants:\n  - {id: acme, prefix: acme/}\n"
    ) == [
        (
            f"defaults: field 'encryption.kms_key' = '{alias}': is an alias, not a key: key policies and IAM "
            f"statements need the key's own ARN; {FIX}"
        )
    ]


def test_a_tenant_turns_off_its_defaults_key_with_null() -> None:
    config = parse_config(
        "defaults: {sink: {url: 'https://core.example.com/r', auth: {type: bearer, secret: core/token}}, encryption: {kms_key: create}}\n"
        "tenants:\n  - {id: acme, prefix: acme/}\n  - {id: beta, prefix: beta/, encryption: null}\n"
    )
    assert [t.encryption.kms_key if t.encryption else None for t in config.tenants] == ["create", None]
    assert config.encryption is None


def test_the_key_policy_size_model_is_the_synthesized_shared_key_at_the_longest_arns(
    created: Synthesized,
) -> None:
    """GIVEN the created shared key's policy rendered for the longest Region, account and
    partition WHEN measured THEN the capacity model's figure (its other statements and the
    uploaders' statement) is never below it, and within 10 %."""
    from pipeline_constructs import capacity
    from pipeline_constructs.config import parse_config
    from tools.iam_policies import Resolver

    shared = {SHARED: created.templates[SHARED]}
    (key,) = [
        r
        for k, r in shared[SHARED]["Resources"].items()
        if r["Type"] == "AWS::KMS::Key" and k.startswith("SharedDataKey")
    ]
    resolver = Resolver(shared, account="123456789012", region="ap-southeast-5", partition="aws-us-gov")
    actual = len(json.dumps(resolver.resolve(SHARED, key["Properties"]["KeyPolicy"]), separators=(",", ":")))
    modelled = capacity.shared_key_policy_bytes(parse_config(CREATED).tenants).count
    assert actual <= modelled <= actual * 1.1
