"""A tenant's blocks besides its sink: `alarms`, `ordering`, `completion`, `network` and
`encryption` (each merged key by key with `defaults`)."""

from __future__ import annotations

import re

from pydantic import ValidationInfo, field_validator

from lambdas import contract
from pipeline_constructs.config.options import KMS_KEY_ARN_PATTERN, PRINCIPAL_ARN_PATTERN, Model, ids, option

#: The longest sequence pattern: it travels in the controller's environment, whose variables
#: together must stay within Lambda's 4 KB (`deploy_limits`).
MAX_SEQUENCE_PATTERN_CHARS = 1024
#: Step Functions' own ceiling of a task's TimeoutSeconds is a year; a file waits at most a
#: week for its confirmation (the tenant waits behind it).
MAX_COMPLETION_TIMEOUT_SECONDS = 7 * 24 * 3600
#: EC2 ids as the console shows them: a prefix, a hyphen and 8 or 17 hexadecimal digits.
VPC_ID_PATTERN = r"^vpc-[0-9a-f]{8}([0-9a-f]{9})?$"
SUBNET_ID_PATTERN = r"^subnet-[0-9a-f]{8}([0-9a-f]{9})?$"
SECURITY_GROUP_ID_PATTERN = r"^sg-[0-9a-f]{8}([0-9a-f]{9})?$"
#: `create`, or a KMS key's ARN.
KMS_KEY_PATTERN = f"^create$|{KMS_KEY_ARN_PATTERN}"


def listed(pattern: str) -> dict[str, object]:
    """The schema of a list of distinct values that each match ``pattern``."""
    return {"items": {"pattern": pattern}, "uniqueItems": True}


class AlarmConfig(Model):
    """When the tenant's alarms page (merged key by key with `defaults`). Each alarm's
    description names what to run first (docs/operations.md)."""

    queue_age_seconds: int = option(
        21600,
        ge=60,
        description=(
            "Seconds the oldest message of the tenant's queue may wait before the `queue-age` alarm fires: a "
            "backlog (files arriving faster than they are ingested for hours, or a controller that never runs), "
            "not a stall. 6 hours by default: a burst of files queued behind each other is normal and must not page."
        ),
    )
    stall_after_seconds: int = option(
        1800,
        ge=60,
        description=(
            "Seconds the next file may wait while no file of the tenant runs before the `stall` alarm fires (a "
            "halted or stuck tenant)."
        ),
    )
    error_logs_threshold: int = option(
        1, ge=1, description=("ERROR log lines per 5 minutes, per function, that page.")
    )
    evaluation_periods: int = option(
        1, ge=1, le=24, description=("Periods of 5 minutes an alarm must breach before it fires.")
    )
    paused_alarm_after_seconds: int = option(
        14400,
        ge=300,
        description=(
            "Seconds a tenant may stay paused (`ops pause`) before the `paused` alarm fires, so a pause nobody "
            "ended is not forgotten; while paused the stall and queue-age alarms stay quiet and no execution "
            "fails. 4 hours by default: a maintenance window of the core system."
        ),
    )
    sink_errors_threshold: int = option(
        10,
        ge=1,
        description=(
            "Failed tries of the core system per 5 minutes that page (`sink-errors`), when they are also at least "
            "half of all tries (a blip retried in place makes at most 5)."
        ),
    )


class OrderingConfig(Model):
    """How the tenant's files are put in order (docs/design.md §4.8)."""

    by: contract.Ordering = option(
        "arrival",
        notes={"key_sequence": "order by a sequence number in the key names"},
        description=(
            "`arrival`: the order the files' events reach the tenant's FIFO queue (S3 does not order its "
            "notifications across keys: a late one is logged and counted). `key_sequence`: strictly by the "
            "sequence number `sequence_pattern` finds in each key, from `first_sequence`; a file waits while an "
            "earlier number is missing. The queue is then a standard queue: changing `by` replaces the queue, so "
            "drain the tenant first."
        ),
    )
    sequence_pattern: str = option(
        "",
        validate_default=True,
        max_length=MAX_SEQUENCE_PATTERN_CHARS,
        fix=(
            "with ordering.by 'key_sequence', give a regular expression whose group 'seq' matches the "
            r"zero-padded counter in the key, e.g. '(?P<seq>\d+)\.csv$'; otherwise remove it"
        ),
        description=(
            "With `key_sequence`, required: a Python regular expression searched in the object key; its group "
            r"`seq` (or its only group, or the whole match) is the number, ASCII digits, e.g. `(?P<seq>\d+)\.csv$`. "
            f"At most {MAX_SEQUENCE_PATTERN_CHARS} characters. Otherwise leave it out."
        ),
    )
    first_sequence: int = option(
        1,
        ge=0,
        hint=": the sequence number of the tenant's first file",
        description="The sequence number of the tenant's first file.",
    )
    gap_alarm_after_seconds: int = option(
        900,
        ge=60,
        description=(
            "With `key_sequence`: seconds a later file may wait for a missing number before the `sequence-gap` "
            "alarm fires."
        ),
    )

    @field_validator("sequence_pattern")
    @classmethod
    def _pattern_finds_a_number(cls, pattern: str, info: ValidationInfo) -> str:
        if info.data.get("by") != "key_sequence":
            if pattern:
                raise ValueError("is set, but ordering.by is not 'key_sequence'")
            return pattern
        if not pattern:
            raise ValueError("is required when ordering.by is 'key_sequence'")
        if len(pattern.encode()) > MAX_SEQUENCE_PATTERN_CHARS:
            raise ValueError(
                f"is {len(pattern.encode())} bytes in UTF-8 (at most {MAX_SEQUENCE_PATTERN_CHARS})"
            )
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"is not a valid regular expression ({exc})") from None
        if "seq" not in compiled.groupindex and compiled.groups > 1:
            raise ValueError("has several groups and none is named 'seq'")
        return pattern


class CompletionConfig(Model):
    """The core system's completion callback (docs/core-system.md, "Completion callback"). Absent
    or `wait: false`: a file is ingested once its last record is acknowledged."""

    wait: bool = option(
        False,
        notes={True: "each file waits for the core system's confirmation"},
        description=(
            "`true`: after its last record is acknowledged a file waits until the core system confirms or rejects "
            "it through the tenant's completion entry point; the next file starts only then. `false`: the workflow "
            "is exactly as without the feature."
        ),
    )
    timeout_seconds: int = option(
        3600,
        ge=1,
        le=MAX_COMPLETION_TIMEOUT_SECONDS,
        hint=", shorter than the file's file_time_limit_seconds",
        description=(
            "Seconds a file waits for the answer, shorter than its time limit (`file_time_limit_seconds`); then it "
            "fails with `CompletionTimedOut` and `on_failure` applies."
        ),
    )
    heartbeat_seconds: int | None = option(
        None,
        ge=1,
        le=MAX_COMPLETION_TIMEOUT_SECONDS,
        fix=(
            "use a whole number of seconds shorter than completion.timeout_seconds, or leave it out (no heartbeat "
            "needed)"
        ),
        description=(
            "Seconds, shorter than `timeout_seconds`: while it checks a file the core system must send a heartbeat "
            "at least this often, or the file fails with `CompletionTimedOut` early. Default (null): no heartbeat "
            "needed."
        ),
    )
    callers: list[str] = option(
        default_factory=list,
        schema=listed(PRINCIPAL_ARN_PATTERN),
        fix=("list the IAM role ARNs of the core system, e.g. 'arn:aws:iam::111111111111:role/core-system'"),
        description=(
            "With `wait: true`, required: the IAM role, user or account-root ARNs "
            "(`arn:aws:iam::<12 digits>:role/...`) allowed to invoke the tenant's entry point; each becomes a "
            "statement of the function's resource policy."
        ),
    )

    @field_validator("callers")
    @classmethod
    def _principal_arns(cls, callers: list[str]) -> list[str]:
        return ids(
            callers, PRINCIPAL_ARN_PATTERN, "an IAM role, user or account root ARN", item="a principal"
        )


class NetworkConfig(Model):
    """The VPC the register function runs in, for a core system reachable only from inside it
    (docs/core-system.md, "Private core systems"). Only the register function gets it: split, the controller
    and the closer talk to AWS APIs only. Ids, not lookups: synthesis needs no credentials."""

    vpc_id: str = option(
        pattern=VPC_ID_PATTERN,
        mismatch="is not a VPC id (vpc- and 8 or 17 hexadecimal digits)",
        fix="use the id of the VPC of the subnets, e.g. 'vpc-0123456789abcdef0'",
        description="The VPC of the subnets (`vpc-` and 8 or 17 hexadecimal digits).",
    )
    subnet_ids: list[str] = option(
        min_length=1,
        max_length=16,
        schema=listed(SUBNET_ID_PATTERN),
        fix=(
            "list at least one subnet id of that VPC, e.g. ['subnet-0123456789abcdef0'] (two, in different "
            "Availability Zones, for availability)"
        ),
        description=(
            "Subnet ids (`subnet-...`) of that VPC, at most 16 (Lambda's limit); give two in different Availability "
            "Zones."
        ),
    )
    security_group_ids: list[str] = option(
        min_length=1,
        max_length=5,
        schema=listed(SECURITY_GROUP_ID_PATTERN),
        fix=(
            "list at least one security group id that lets the function reach the core system, e.g. "
            "['sg-0123456789abcdef0']"
        ),
        description=(
            "Security group ids (`sg-...`), at most 5 (Lambda's limit), whose outbound rules reach the core system and "
            "the VPC endpoints."
        ),
    )

    @field_validator("subnet_ids")
    @classmethod
    def _subnet_ids(cls, subnet_ids: list[str]) -> list[str]:
        return ids(subnet_ids, SUBNET_ID_PATTERN, "a subnet id (subnet- and 8 or 17 hexadecimal digits)")

    @field_validator("security_group_ids")
    @classmethod
    def _security_group_ids(cls, group_ids: list[str]) -> list[str]:
        return ids(
            group_ids, SECURITY_GROUP_ID_PATTERN, "a security group id (sg- and 8 or 17 hexadecimal digits)"
        )


class EncryptionConfig(Model):
    """Customer-managed KMS encryption (docs/security.md, "Customer-managed keys"): what it encrypts depends on where
    it is written (top level: the shared resources; `defaults` or a tenant: the tenant's)."""

    kms_key: str = option(
        schema={"pattern": KMS_KEY_PATTERN},
        fix=(
            "use 'create' (the app makes a key) or the ARN of a symmetric key in the same account and Region, "
            "e.g. 'arn:aws:kms:eu-west-1:111111111111:key/1234abcd-12ab-34cd-56ef-1234567890ab'"
        ),
        description=(
            "`create`: the app makes a key (rotation on, kept when its stack is deleted); or the ARN of an "
            "existing symmetric key in the deployment's Region (`arn:aws:kms:<region>:<account>:key/<id>`, not an "
            "alias), used as given: its policy must allow what the app's own keys allow."
        ),
    )

    @field_validator("kms_key")
    @classmethod
    def _create_or_key_arn(cls, kms_key: str) -> str:
        if re.match(KMS_KEY_PATTERN, kms_key):
            return kms_key
        if re.match(r"^arn:aws[a-z-]*:kms:[^:]*:[^:]*:alias/", kms_key) or kms_key.startswith("alias/"):
            raise ValueError("is an alias, not a key: key policies and IAM statements need the key's own ARN")
        raise ValueError("is neither 'create' nor a KMS key ARN")
