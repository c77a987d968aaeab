"""Destroy everything one cloud test run deployed, including what the app retains by design.

The app's buckets, ledger table, log groups and keys are `RETAIN` (a real deployment must not
lose them with a stack), so deleting the run's stacks is not enough. Teardown:

1. finds the run's stacks by their tag (`ordered-ingest-cloud-test=<run id>`; nothing else is
   touched; the run's shared stack by its qualified name), waits for any update in progress to
   settle;
2. lists, before deleting each, the physical ids of what outlives it: S3 buckets, DynamoDB
   tables, log groups (each Lambda function's `/aws/lambda/<name>` too, which Lambda may create
   itself), KMS keys; only resources the stack created (a resource that failed to create, e.g.
   a bucket name that already existed, is not the run's); and, by the run's qualifier (`ct<run
   id>`, which no other deployment's names start with), its landing and work buckets and its log
   groups, so a run whose stacks are gone and whose state file is lost is still cleaned up;
3. records them in a state file, then deletes the stacks: every stack but the shared one, then
   the shared one (the tenant stacks read its parameters);
4. deletes the leftovers: empties each bucket (every version and delete marker) and deletes
   it, turns a table's deletion protection off and deletes it, deletes the log groups, schedules
   each key's deletion (7 days, KMS's shortest wait).

Step Functions deletes a state machine's versions and aliases with it (DeleteStateMachine), so
the versions the tenant stacks retain go with their state machines. It carries on past a failure and returns what it could not do; the state file stays until
everything is gone, so `python -m cloudtest teardown <run id>` can finish the job later.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cloudtest.runs import RUN_TAG, qualifier
from lambdas import contract
from pipeline_constructs import names

RETAINED_TYPES = (
    "AWS::S3::Bucket",
    "AWS::DynamoDB::Table",
    "AWS::DynamoDB::GlobalTable",
    "AWS::Logs::LogGroup",
    "AWS::KMS::Key",
)
#: Resource statuses of something that exists (or existed) because the stack made it.
_NOT_CREATED = ("CREATE_FAILED",)
KEY_DELETION_WINDOW_DAYS = 7


@dataclass(frozen=True, order=True)
class Leftover:
    type: str
    physical_id: str


def shared_stack_of(run_id: str) -> str:
    """The run's shared stack: the app's, qualified."""
    with contract.qualified(qualifier(run_id)):
        return names.shared_stack_name()


def run_stacks(cfn: Any, run_id: str) -> list[dict[str, Any]]:
    """The run's stacks that still exist, in deletion order (the run's shared stack last)."""
    shared = shared_stack_of(run_id)
    found = []
    for page in cfn.get_paginator("describe_stacks").paginate():
        for stack in page.get("Stacks", []):
            tags = {t["Key"]: t["Value"] for t in stack.get("Tags") or []}
            if tags.get(RUN_TAG) == run_id and stack["StackStatus"] != "DELETE_COMPLETE":
                found.append(stack)
    return sorted(found, key=lambda s: (s["StackName"] == shared, s["StackName"]))


def leftovers_of(cfn: Any, stack_name: str) -> set[Leftover]:
    """What outlives the stack: its retained kinds and its functions' log groups."""
    found: set[Leftover] = set()
    for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack_name):
        for resource in page["StackResourceSummaries"]:
            physical = resource.get("PhysicalResourceId")
            if not physical or resource["ResourceStatus"] in _NOT_CREATED:
                continue
            if resource["ResourceType"] in RETAINED_TYPES:
                found.add(Leftover(resource["ResourceType"], physical))
            elif resource["ResourceType"] == "AWS::Lambda::Function":
                found.add(Leftover("AWS::Logs::LogGroup", f"/aws/lambda/{physical}"))
    return found


def qualified_leftovers(clients: Callable[[str], Any], run_id: str) -> set[Leftover]:
    """What the run's copy of the app retains, found by its qualified names: the landing and
    work buckets (whether they exist or not: deleting a missing bucket is no problem), and every
    log group whose name starts with the qualifier (the functions', the workflows', the
    unmatched uploads')."""
    account = clients("sts").get_caller_identity()["Account"]
    region = clients("s3").meta.region_name
    with contract.qualified(qualifier(run_id)):
        found = {
            Leftover("AWS::S3::Bucket", bucket(account, region))
            for bucket in (names.landing_bucket_name, names.work_bucket_name)
        }
        prefixes = [
            contract.FUNCTION_LOG_GROUP.render(function=contract.qualify("")),
            contract.STATE_MACHINE_LOG_GROUP.render(state_machine=contract.qualify("")),
            contract.qualify("/"),
        ]
    logs = clients("logs")
    for prefix in prefixes:
        for page in logs.get_paginator("describe_log_groups").paginate(logGroupNamePrefix=prefix):
            found |= {Leftover("AWS::Logs::LogGroup", group["logGroupName"]) for group in page["logGroups"]}
    return found


class Teardown:
    """`run()` destroys the run `run_id` in the account `clients(service)` reaches."""

    def __init__(
        self,
        clients: Callable[[str], Any],
        run_id: str,
        state_file: Path,
        *,
        say: Callable[[str], None] = print,
        poll_seconds: float = 5.0,
        timeout: float = 3600.0,
    ) -> None:
        self.clients, self.run_id, self.state_file, self.say = clients, run_id, state_file, say
        self.poll_seconds, self.timeout = poll_seconds, timeout
        self.problems: list[str] = []

    # -- state ------------------------------------------------------------------------------

    def _load(self) -> set[Leftover]:
        if not self.state_file.exists():
            return set()
        return {Leftover(**item) for item in json.loads(self.state_file.read_text())["leftovers"]}

    def _save(self, leftovers: set[Leftover]) -> None:
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        items = [
            {"type": leftover.type, "physical_id": leftover.physical_id} for leftover in sorted(leftovers)
        ]
        self.state_file.write_text(json.dumps({"run_id": self.run_id, "leftovers": items}, indent=1))

    # -- the run ----------------------------------------------------------------------------

    def run(self) -> list[str]:
        """Destroy the run's stacks and their leftovers; the problems left (none: all gone)."""
        cfn = self.clients("cloudformation")
        leftovers = self._load()
        stacks = run_stacks(cfn, self.run_id)
        for stack in stacks:
            self._settle(cfn, stack)
            leftovers |= leftovers_of(cfn, stack["StackId"])
        self._save(leftovers)
        last = [s for s in stacks if s["StackName"] == shared_stack_of(self.run_id)]
        for wave in ([s for s in stacks if s not in last], last):
            for stack in wave:
                self.say(f"deleting stack {stack['StackName']}")
                cfn.delete_stack(StackName=stack["StackId"])
            for stack in wave:
                self._wait_deleted(cfn, stack)
        try:
            leftovers |= qualified_leftovers(self.clients, self.run_id)
        except Exception as error:
            self.problems.append(
                f"the run's qualified buckets and log groups could not be listed: "
                f"{type(error).__name__}: {error}"
            )
        for leftover in sorted(leftovers):
            self._delete(leftover)
        if not self.problems:
            self.state_file.unlink(missing_ok=True)
        return self.problems

    def _status(self, cfn: Any, stack_id: str) -> str:
        return cfn.describe_stacks(StackName=stack_id)["Stacks"][0]["StackStatus"]

    def _wait(self, cfn: Any, stack: dict[str, Any], done: Callable[[str], bool]) -> str:
        deadline = time.monotonic() + self.timeout
        status = self._status(cfn, stack["StackId"])
        while not done(status):
            if time.monotonic() > deadline:
                raise TimeoutError(f"stack {stack['StackName']} still {status} after {self.timeout:g} s")
            time.sleep(self.poll_seconds)
            status = self._status(cfn, stack["StackId"])
        return status

    def _settle(self, cfn: Any, stack: dict[str, Any]) -> None:
        """A stack being created or updated (an interrupted deploy) is deleted once CloudFormation is done with it."""
        self._wait(cfn, stack, lambda s: not s.endswith("_IN_PROGRESS") or s == "DELETE_IN_PROGRESS")

    def _wait_deleted(self, cfn: Any, stack: dict[str, Any]) -> None:
        status = self._wait(cfn, stack, lambda s: s in ("DELETE_COMPLETE", "DELETE_FAILED"))
        if status == "DELETE_COMPLETE":
            return
        # What CloudFormation could not delete: kept by a second delete, then removed below.
        failed = [
            r
            for page in cfn.get_paginator("list_stack_resources").paginate(StackName=stack["StackId"])
            for r in page["StackResourceSummaries"]
            if r["ResourceStatus"] == "DELETE_FAILED"
        ]
        self.say(
            f"stack {stack['StackName']}: {len(failed)} resource(s) failed to delete; deleting it without them"
        )
        cfn.delete_stack(StackName=stack["StackId"], RetainResources=[r["LogicalResourceId"] for r in failed])
        if self._wait(cfn, stack, lambda s: s in ("DELETE_COMPLETE", "DELETE_FAILED")) != "DELETE_COMPLETE":
            self.problems.append(f"stack {stack['StackName']} ({stack['StackId']}) could not be deleted")
        for resource in failed:
            if resource["ResourceType"] not in RETAINED_TYPES:
                self.problems.append(
                    f"{resource['ResourceType']} {resource.get('PhysicalResourceId')} of stack "
                    f"{stack['StackName']} could not be deleted: delete it by hand"
                )

    # -- leftovers --------------------------------------------------------------------------

    def _delete(self, leftover: Leftover) -> None:
        delete = {
            "AWS::S3::Bucket": self._delete_bucket,
            "AWS::DynamoDB::Table": self._delete_table,
            "AWS::DynamoDB::GlobalTable": self._delete_table,
            "AWS::Logs::LogGroup": self._delete_log_group,
            "AWS::KMS::Key": self._delete_key,
        }[leftover.type]
        try:
            if delete(leftover.physical_id):
                self.say(f"deleted {leftover.type} {leftover.physical_id}")
        except Exception as error:
            self.problems.append(f"{leftover.type} {leftover.physical_id}: {type(error).__name__}: {error}")

    def _delete_bucket(self, bucket: str, attempts: int = 3) -> bool:
        s3 = self.clients("s3")
        for attempt in range(attempts):
            try:
                for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
                    objects = [
                        {"Key": v["Key"], "VersionId": v["VersionId"]}
                        for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
                    ]
                    for start in range(0, len(objects), 1000):
                        s3.delete_objects(
                            Bucket=bucket, Delete={"Objects": objects[start : start + 1000], "Quiet": True}
                        )
                s3.delete_bucket(Bucket=bucket)
                return True
            except s3.exceptions.ClientError as error:
                code = error.response.get("Error", {}).get("Code")
                if code == "NoSuchBucket":
                    return False
                if code != "BucketNotEmpty" or attempt == attempts - 1:
                    raise
                time.sleep(self.poll_seconds)  # an access log delivered meanwhile: empty it again
        return False

    def _delete_table(self, table: str) -> bool:
        ddb = self.clients("dynamodb")
        try:
            described = ddb.describe_table(TableName=table)["Table"]
            if described.get("DeletionProtectionEnabled"):
                ddb.update_table(TableName=table, DeletionProtectionEnabled=False)
            ddb.delete_table(TableName=table)
        except ddb.exceptions.ResourceNotFoundException:
            return False
        return True

    def _delete_log_group(self, name: str) -> bool:
        logs = self.clients("logs")
        try:
            logs.delete_log_group(logGroupName=name)
        except logs.exceptions.ResourceNotFoundException:
            return False
        return True

    def _delete_key(self, key_id: str) -> bool:
        kms = self.clients("kms")
        try:
            state = kms.describe_key(KeyId=key_id)["KeyMetadata"]["KeyState"]
        except kms.exceptions.NotFoundException:
            return False
        if state in ("PendingDeletion", "PendingReplicaDeletion"):
            return False
        kms.schedule_key_deletion(KeyId=key_id, PendingWindowInDays=KEY_DELETION_WINDOW_DAYS)
        return True
