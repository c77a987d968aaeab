"""The names the project gives AWS: every family of them, with the longest name AWS accepts.

One table (`NAME_FAMILIES`) that the constructs, the handlers, `ops` and the local runtime build
their names from, so that config validation can say which name a tenant id or a qualifier would
make too long (`tightest_broken`, `qualifier_broken`) before AWS refuses it.
"""

from __future__ import annotations

import dataclasses
import hashlib

from lambdas.contract.metrics import ERROR_LOG_METRIC, METRIC_NAMESPACE
from lambdas.contract.options import FUNCTION_KINDS, SHARED_PARAMETERS
from lambdas.contract.qualifier import qualify

# tests/test_names.py builds the longest instance of each family and checks it against its limit.
# Secrets are not in the table: the app names none (`sink.auth.secret` is the user's own). A name
# that could outgrow its limit is shortened by a hash, never cut short (two names cut short can
# collide).

APP_NAME = "OrderedIngest"
#: What the shared resources' names start with.
SHARED_PREFIX = "ordered-ingest"
#: The longest alarm key (`{alarm}`: `<tenant>-<key>`, `ordered-ingest-<key>`); the alarm
#: factory refuses a longer one.
MAX_ALARM_KEY = 40
#: `States.ArrayRange` makes at most 1,000 items, and a file runs in at most three levels of
#: Maps over it (sections of pages of chunks; pipeline_constructs/budgets.py): no file has
#: more than 1,000**3 chunks, so no chunk index is longer than `MAX_CHUNK_INDEX`.
MAX_ARRAY_RANGE_ITEMS = 1_000
MAX_CHUNK_INDEX = MAX_ARRAY_RANGE_ITEMS**3 - 1
#: Step Functions' limit on an execution name (StartExecution `name`).
MAX_EXECUTION_NAME = 80
#: A page execution's name: `<parent execution name>-p<first chunk of the page>` (unique per
#: parent execution; a resumed file's parent has a new name, so its pages do too). Built by
#: the workflow (`States.Format`), so a parent's name leaves room for it (`execution_name`).
PAGE_EXECUTION_NAME_FORMAT = "{}-p{}"
#: A section execution's name (a file of more than one section): `<parent execution
#: name>-s<first chunk of the section>`. Its input is a `PageTask` whose `first_chunk` is the
#: section's first chunk.
SECTION_EXECUTION_NAME_FORMAT = "{}-s{}"
#: The longest name of a file's execution (any attempt): room is left for the page or
#: section suffix the workflow appends (`-p<first chunk>`, `-s<first chunk>`) at the largest
#: chunk index.
MAX_FILE_EXECUTION_NAME = MAX_EXECUTION_NAME - max(
    len(form.format("", MAX_CHUNK_INDEX))
    for form in (PAGE_EXECUTION_NAME_FORMAT, SECTION_EXECUTION_NAME_FORMAT)
)

#: The digest in a hashed execution name and in a replayed event id: 128 bits of a SHA-256.
NAME_DIGEST_CHARS = 32

#: The longest value of each placeholder but `{id}` (the tenant id: `MAX_TENANT_ID_LENGTH`).
#: `{index}`: a shard's or a catch-all bus's number (at most 99 event buses: routing.MAX_SHARDS);
#: `{number}`: a dashboard's (71 tenants each: a million tenants fit); `{function}`,
#: `{state_machine}`: another family's name at its limit; `{execution}`: a file's execution.
LONGEST_PARTS: dict[str, str] = {
    "index": "99",
    "number": "99999",
    "account": "123456789012",
    "region": "ap-southeast-5",
    "kind": max(FUNCTION_KINDS, key=len),
    "alarm": "a" * MAX_ALARM_KEY,
    "function": "f" * 64,
    "state_machine": "s" * 80,
    "execution": "e" * MAX_FILE_EXECUTION_NAME,
    "chunk": str(MAX_CHUNK_INDEX),
    "digest": "0" * NAME_DIGEST_CHARS,
    "parameter": max(SHARED_PARAMETERS, key=len),
    "tenant": "t" * 42,  # `upload_access_point_name`'s tenant part: the id, or the id shortened by a hash
}


@dataclasses.dataclass(frozen=True)
class DerivedName:
    """A family of names: a template (placeholders `{id}`, the tenant id, and those of
    `LONGEST_PARTS`) and the longest name AWS accepts. `qualified`: the names are fixed per
    account and Region (or namespace), so the qualifier in effect starts them (`qualify`)."""

    kind: str
    template: str
    limit: int
    qualified: bool = True

    def render(self, tenant_id: str = "", *, qualifier: str | None = None, **parts: object) -> str:
        name = self.template.format(id=tenant_id, **parts)
        return qualify(name, qualifier) if self.qualified else name

    def longest(self, tenant_id: str | None = None, *, qualifier: str | None = None) -> str:
        """The longest name of the family (of `tenant_id`): every placeholder at its longest."""
        return self.render(
            "a" * MAX_TENANT_ID_LENGTH if tenant_id is None else tenant_id,
            qualifier=qualifier,
            **LONGEST_PARTS,
        )

    def max_id_length(self, qualifier: str = "") -> int:
        """The longest tenant id this family's names accept (with `qualifier`)."""
        return self.limit - len(self.longest("", qualifier=qualifier))


_LAMBDA, _STATE_MACHINE, _RULE, _STACK = (
    "Lambda function name",
    "state machine name",
    "EventBridge rule name",
    "stack name",
)
_LOG_GROUP, _ALARM, _BUS, _KMS_ALIAS = "log group name", "alarm name", "event bus name", "KMS alias name"

# Per tenant: the tenant id must be short enough for every one of them (`MAX_TENANT_ID_LENGTH`).
QUEUE = DerivedName("FIFO queue name", "{id}-event-queue.fifo", 80)
#: The queue of a tenant ordered by key sequence (a standard queue: the controller orders).
SEQUENCE_QUEUE = DerivedName("queue name", "{id}-event-queue", 80)
STATE_MACHINE = DerivedName(_STATE_MACHINE, "{id}-file-ingest-workflow", 80)
#: The child state machines that register one page of a file's chunks, or run one section of pages.
PAGE_STATE_MACHINE = DerivedName(_STATE_MACHINE, "{id}-file-ingest-page", 80)
SECTION_STATE_MACHINE = DerivedName(_STATE_MACHINE, "{id}-file-ingest-section", 80)
CONTROLLER_FUNCTION = DerivedName(_LAMBDA, "{id}-controller", 64)
SPLIT_FUNCTION = DerivedName(_LAMBDA, "{id}-split", 64)
REGISTER_FUNCTION = DerivedName(_LAMBDA, "{id}-register-chunk", 64)
CLOSER_FUNCTION = DerivedName(_LAMBDA, "{id}-close-file", 64)
#: The entry point the core system calls to confirm or reject a file (`completion.wait`).
COMPLETION_FUNCTION = DerivedName(_LAMBDA, "{id}-completion", 64)
TENANT_STACK = DerivedName(_STACK, APP_NAME + "-Tenant-{id}", 128)
RULE = DerivedName(_RULE, "{id}-object-created", 64)
STATUS_RULE = DerivedName(_RULE, "{id}-sfn-status", 64)
#: Standard, not FIFO: EventBridge refuses a FIFO queue as a target's dead-letter queue.
INTAKE_DLQ = DerivedName("SQS queue name", "{id}-intake-dlq", 80)
TENANT_ALARM = DerivedName(_ALARM, "{id}-{alarm}", 255)
ERROR_LOG_FILTER = DerivedName("metric filter name", "{id}-{kind}-error-logs", 512)
#: In the app's metric namespace (`METRIC_NAMESPACES`, qualified), so not qualified itself.
ERROR_LOG_METRIC_NAME = DerivedName("metric name", ERROR_LOG_METRIC + "-{id}-{kind}", 255, qualified=False)
TENANT_KEY_ALIAS = DerivedName(_KMS_ALIAS, "alias/" + SHARED_PREFIX + "/{id}", 256)
#: The S3 access point a tenant's `uploaders` put through (3 to 50 characters, unique per
#: account and Region): `{tenant}` is the tenant id, or, for an id longer than 42 characters,
#: its first letters and a digest (`upload_access_point_name`), so it limits no tenant id.
UPLOAD_ACCESS_POINT = DerivedName("S3 access point name", "{tenant}-uploads", 50)
#: What every tenant's state machine names share after the tenant id: a tenant id may not
#: contain it (IAM wildcards on one tenant's child executions would cover another's).
RESERVED_ID_PART = "-file-ingest-"

TENANT_NAMES: tuple[DerivedName, ...] = (
    QUEUE,
    SEQUENCE_QUEUE,
    STATE_MACHINE,
    PAGE_STATE_MACHINE,
    SECTION_STATE_MACHINE,
    CONTROLLER_FUNCTION,
    SPLIT_FUNCTION,
    REGISTER_FUNCTION,
    CLOSER_FUNCTION,
    COMPLETION_FUNCTION,
    TENANT_STACK,
    RULE,
    STATUS_RULE,
    INTAKE_DLQ,
    TENANT_ALARM,
    ERROR_LOG_FILTER,
    ERROR_LOG_METRIC_NAME,
    TENANT_KEY_ALIAS,
)
#: The longest tenant id every derived name accepts.
MAX_TENANT_ID_LENGTH = min(name.max_id_length() for name in TENANT_NAMES)

# Of functions and state machines, whoever's: their log groups (qualified by the function's or
# state machine's name); the alias every tenant's workflows are started through (one per state
# machine; docs/operations.md, "Versions, aliases and rollback").
FUNCTION_LOG_GROUP = DerivedName(_LOG_GROUP, "/aws/lambda/{function}", 512, qualified=False)
STATE_MACHINE_LOG_GROUP = DerivedName(
    _LOG_GROUP, "/aws/vendedlogs/states/{state_machine}", 512, qualified=False
)
WORKFLOW_ALIAS = DerivedName("state machine alias name", "live", 80, qualified=False)

# Shared: fixed, or numbered per shard (`{index}`), per account and Region, per dashboard.
SHARED_STACK = DerivedName(_STACK, APP_NAME + "-Shared", 128)
#: The second and later dashboards, a stack each (the first is in the shared stack).
DASHBOARD_STACK = DerivedName(_STACK, APP_NAME + "-Dashboard-{number}", 128)
#: Dashboard names are unique per account in every Region: the Region is part of them.
FIRST_DASHBOARD = DerivedName("dashboard name", APP_NAME + "-{region}", 255)
DASHBOARD = DerivedName("dashboard name", APP_NAME + "-{region}-{number}", 255)
LANDING_BUCKET = DerivedName("S3 bucket name", SHARED_PREFIX + "-landing-{account}-{region}", 63)
WORK_BUCKET = DerivedName("S3 bucket name", SHARED_PREFIX + "-work-{account}-{region}", 63)
SHARED_ALARM = DerivedName(_ALARM, SHARED_PREFIX + "-{alarm}", 255)
SHARED_KEY_ALIAS = DerivedName(_KMS_ALIAS, "alias/" + SHARED_PREFIX, 256)
#: Where the shared stack publishes its key's ARN. SSM counts the parameter's whole ARN
#: against 1,011 characters: the longest ARN prefix (partition, Region, account) is kept out.
SHARED_KEY_PARAMETER = DerivedName(
    "SSM parameter name",
    f"/{SHARED_PREFIX}/encryption/shared-key-arn",
    1011 - len("arn:aws-iso-b:ssm:ap-southeast-5:123456789012:parameter"),
)
#: Where the shared stack publishes what tenant stacks need of it (the ledger table's name, the
#: alarm topic's and its key's ARN), read by each tenant stack at deploy time: cells refer to
#: each other by these, never by CloudFormation export (`pipeline_constructs/cell_plan.py`).
SHARED_PARAMETER = DerivedName(
    "SSM parameter name",
    f"/{SHARED_PREFIX}/shared/{{parameter}}",
    1011 - len("arn:aws-iso-b:ssm:ap-southeast-5:123456789012:parameter"),
)
#: Each pipeline's entry in the registry `ops` reads (`pipeline_constructs/registry.py`).
PIPELINE_PARAMETER = DerivedName(
    "SSM parameter name",
    f"/{SHARED_PREFIX}/pipelines/{{id}}",
    1011 - len("arn:aws-iso-b:ssm:ap-southeast-5:123456789012:parameter"),
)
#: The shared stack's catch-all for uploads outside every tenant prefix (rule, its metric
#: filter, log group, dead-letter queue), and, past one pattern's worth of prefixes, its
#: buses and their rules.
UNMATCHED_UPLOADS_RULE = DerivedName(_RULE, SHARED_PREFIX + "-unmatched-uploads", 64)
UNMATCHED_UPLOADS_FILTER = DerivedName("metric filter name", SHARED_PREFIX + "-unmatched-uploads", 512)
UNMATCHED_UPLOADS_LOG_GROUP = DerivedName(_LOG_GROUP, f"/{SHARED_PREFIX}/unmatched-uploads", 512)
UNMATCHED_UPLOADS_DLQ = DerivedName("SQS queue name", SHARED_PREFIX + "-unmatched-uploads-dlq", 80)
UNMATCHED_BUS = DerivedName(_BUS, SHARED_PREFIX + "-unmatched-{index}", 256)
UNMATCHED_FORWARD_RULE = DerivedName(_RULE, SHARED_PREFIX + "-unmatched-{index}-forward", 64)
UNMATCHED_UPLOADS_BUS_RULE = DerivedName(_RULE, SHARED_PREFIX + "-unmatched-uploads-{index}", 64)
#: Sharded routing: shard k's event bus, and the default bus's rules that forward to it.
SHARD_BUS = DerivedName(_BUS, SHARED_PREFIX + "-shard-{index}", 256)
SHARD_OBJECTS_RULE = DerivedName(_RULE, SHARED_PREFIX + "-shard-{index}-objects", 64)
SHARD_STATUS_RULE = DerivedName(_RULE, SHARED_PREFIX + "-shard-{index}-status", 64)
#: Where EventBridge puts an event it could not forward to a shard bus for a day.
ROUTING_DLQ = DerivedName("SQS queue name", SHARED_PREFIX + "-routing-dlq", 80)
#: The CloudWatch namespace of the app's metrics (`METRIC_NAMESPACE` unqualified): two copies of
#: the app with a tenant of the same id must not share its metrics (nor fire each other's alarms).
METRIC_NAMESPACES = DerivedName("metric namespace", METRIC_NAMESPACE, 255)

# Executions (`execution_name`) and the event ids `ops reconcile --replay` makes: per state
# machine, never qualified.
#: A file's execution, any attempt: at most `MAX_FILE_EXECUTION_NAME` by construction.
FILE_EXECUTION = DerivedName("execution name", "{execution}", MAX_EXECUTION_NAME, qualified=False)
PAGE_EXECUTION = DerivedName(
    "execution name",
    PAGE_EXECUTION_NAME_FORMAT.format("{execution}", "{chunk}"),
    MAX_EXECUTION_NAME,
    qualified=False,
)
SECTION_EXECUTION = DerivedName(
    "execution name",
    SECTION_EXECUTION_NAME_FORMAT.format("{execution}", "{chunk}"),
    MAX_EXECUTION_NAME,
    qualified=False,
)
#: `reconcile-<digest of the object version>`: short enough to be the name of its file's
#: executions itself (plus `-r<attempt>`), like an EventBridge event id (36 characters).
REPLAY_EVENT_ID = DerivedName("replayed event id", "reconcile-{digest}", 64, qualified=False)

NAME_FAMILIES: tuple[DerivedName, ...] = (
    *TENANT_NAMES,
    FUNCTION_LOG_GROUP,
    STATE_MACHINE_LOG_GROUP,
    WORKFLOW_ALIAS,
    SHARED_STACK,
    DASHBOARD_STACK,
    FIRST_DASHBOARD,
    DASHBOARD,
    UPLOAD_ACCESS_POINT,
    LANDING_BUCKET,
    WORK_BUCKET,
    SHARED_ALARM,
    SHARED_KEY_ALIAS,
    SHARED_KEY_PARAMETER,
    SHARED_PARAMETER,
    PIPELINE_PARAMETER,
    UNMATCHED_UPLOADS_RULE,
    UNMATCHED_UPLOADS_FILTER,
    UNMATCHED_UPLOADS_LOG_GROUP,
    UNMATCHED_UPLOADS_DLQ,
    UNMATCHED_BUS,
    UNMATCHED_FORWARD_RULE,
    UNMATCHED_UPLOADS_BUS_RULE,
    SHARD_BUS,
    SHARD_OBJECTS_RULE,
    SHARD_STATUS_RULE,
    ROUTING_DLQ,
    METRIC_NAMESPACES,
    FILE_EXECUTION,
    PAGE_EXECUTION,
    SECTION_EXECUTION,
    REPLAY_EVENT_ID,
)
#: The qualified families whose names hold no tenant id: the qualifier alone must fit them.
SHARED_NAMES = tuple(
    family
    for family in NAME_FAMILIES
    if family.qualified and "{id}" not in family.template and "{tenant}" not in family.template
)
#: The longest qualifier: every qualified name that holds no tenant id stays within its limit
#: (the landing bucket's 63 characters decide); a tenant id loses the qualifier's length and
#: one to the names it derives (`tightest_broken`).
MAX_QUALIFIER_LENGTH = min(family.limit - len(family.longest(qualifier="")) for family in SHARED_NAMES) - 1


def qualifier_broken(qualifier: str) -> DerivedName | None:
    """The name family with the smallest limit that ``qualifier`` makes too long, if any."""
    broken = [family for family in SHARED_NAMES if len(family.longest(qualifier=qualifier)) > family.limit]
    return (
        min(broken, key=lambda family: family.limit - len(family.longest(qualifier=""))) if broken else None
    )


def metric_namespace() -> str:
    """The app's metric namespace, qualified."""
    return METRIC_NAMESPACES.render()


def error_log_metric_name(tenant_id: str, kind: str) -> str:
    """`ErrorLogLines-<tenant>-<kind>`: ERROR lines a function of a tenant logged."""
    return ERROR_LOG_METRIC_NAME.render(tenant_id, kind=kind)


#: How many hex digits of a digest shorten a long tenant id in its access point's name.
ACCESS_POINT_DIGEST_CHARS = 10


def upload_access_point_name(tenant_id: str) -> str:
    """The name of the tenant's upload access point (`UPLOAD_ACCESS_POINT`): `<id>-uploads`, or
    for an id too long for that, `<its first letters>-<digest of the id>-uploads`; a name is
    shortened by a hash, never cut short, so two tenants never share one."""
    room = UPLOAD_ACCESS_POINT.limit - len(UPLOAD_ACCESS_POINT.render(tenant=""))
    if len(tenant_id) <= room:
        return UPLOAD_ACCESS_POINT.render(tenant=tenant_id)
    readable = tenant_id[: room - 1 - ACCESS_POINT_DIGEST_CHARS].rstrip("-")
    digest = hashlib.sha256(tenant_id.encode()).hexdigest()[:ACCESS_POINT_DIGEST_CHARS]
    return UPLOAD_ACCESS_POINT.render(tenant=f"{readable}-{digest}")


def tightest_broken(tenant_id: str, qualifier: str = "") -> DerivedName | None:
    """The derived name with the smallest limit that ``tenant_id`` overflows (with
    ``qualifier``), if any."""
    broken = [name for name in TENANT_NAMES if len(name.longest(tenant_id, qualifier=qualifier)) > name.limit]
    return min(broken, key=lambda name: name.max_id_length(qualifier)) if broken else None
