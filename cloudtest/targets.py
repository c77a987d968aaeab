"""Where the cloud test's scenario runs (`cloudtest.scenario.Target`):

* `AwsTarget`: a real account and Region: the recording stand-in's stack and the app's cells
  deployed with the CDK CLI under the run's id (tenants `ct-<id>-a`, `ct-<id>-b`; the app's
  names qualified `ct<id>-`, so it runs beside a deployment of the app; every stack tagged
  `ordered-ingest-cloud-test=<id>`), reached through boto3 with the Region; destroyed by
  `cloudtest.teardown`.
* `LocalTarget`: the same tenants file on the local runtime (`local_runtime.LocalPipeline`,
  moto on 127.0.0.1), reached through boto3 and `ops` with its endpoint URL; the stand-in is
  the runtime's core-system sink. `make test` runs the scenario so (tests/e2e/test_cloud_scenario.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from boto3.dynamodb.conditions import Key

from cloudtest.runs import RUN_TAG, qualifier, standin_function_name, standin_stack_name, tenant_ids
from cloudtest.scenario import Received, tenants_document

ROOT = Path(__file__).resolve().parent.parent


class Refused(Exception):
    """The test cannot run here; the message is one line saying why and what to do."""


def write_tenants(directory: Path, run_id: str, sink: dict[str, Any]) -> Path:
    ids = tenant_ids(run_id)
    document = tenants_document(qualifier(run_id), ids, [f"cloud-test/{t}/" for t in ids], sink)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tenants.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def sigv4_sink(url: str, region: str, function_arn: str) -> dict[str, Any]:
    """Each request signed by the register function's role: the stand-in's URL is IAM-authorized."""
    return {
        "url": url,
        "auth": {"type": "sigv4", "service": "lambda", "region": region, "invoke_arn": function_arn},
    }


# -- the local runtime ------------------------------------------------------------------------


class LocalCore:
    """The local runtime's sinks as the scenario's stand-in."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe

    def received(self, tenant: str) -> list[Received]:
        return [
            Received(r.idempotency_key, r.body, r.status, r.time, r.registered, r.batch_offset)
            for r in self.pipe.sink(tenant).requests
        ]

    def reject(self, tenant: str, record: dict[str, str]) -> None:
        self.pipe.sink(tenant).reject(on_record=record)

    def accept_all(self, tenant: str) -> None:
        self.pipe.sink(tenant).clear_faults()


class LocalTarget:
    """The run's tenants file on the local runtime: the same sink settings as on AWS (SigV4 to a
    function URL, here the local account's), which the local sink verifies."""

    REGION, ACCOUNT = "us-east-1", "123456789012"

    def __init__(
        self, run_id: str, workdir: Path, *, time_scale: float = 0.1, timeout: float = 120.0
    ) -> None:
        from local_runtime import LocalPipeline

        arn = f"arn:aws:lambda:{self.REGION}:{self.ACCOUNT}:function:{standin_function_name(run_id)}"
        path = write_tenants(
            workdir, run_id, sigv4_sink("https://core-stand-in.invalid/records", self.REGION, arn)
        )
        self.tenant_ids, self.qualifier = tenant_ids(run_id), qualifier(run_id)
        self.timeout, self.poll_seconds = timeout, 0.5
        self.pipe = LocalPipeline(path, time_scale=time_scale)
        self.pipe.start()
        self.core = LocalCore(self.pipe)
        self.ops_args = ["--endpoint-url", self.pipe.endpoint_url]

    def client(self, service: str) -> Any:
        return self.pipe.client(service)

    def close(self) -> None:
        self.pipe.close()


# -- an AWS account ---------------------------------------------------------------------------


class AwsCore:
    """The deployed stand-in: its table read back in arrival order, its reject rule written."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def received(self, tenant: str) -> list[Received]:
        items, query = (
            [],
            {
                "KeyConditionExpression": Key("pk").eq(tenant) & Key("sk").begins_with("req#"),
                "ConsistentRead": True,
            },
        )
        while True:
            page = self.table.query(**query)
            items += page["Items"]
            if "LastEvaluatedKey" not in page:
                break
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return [
            Received(
                i["key"],
                json.loads(i["record"]),
                int(i["status"]),
                int(i["received_ns"]) / 1e9,
                bool(i["registered"]),
            )
            for i in items
        ]

    def reject(self, tenant: str, record: dict[str, str]) -> None:
        self.table.put_item(Item={"pk": "rule", "sk": f"reject#{tenant}", "record": json.dumps(record)})

    def accept_all(self, tenant: str) -> None:
        self.table.delete_item(Key={"pk": "rule", "sk": f"reject#{tenant}"})


#: Runs a command (argv, cwd) and returns its exit code; output goes to the terminal.
Runner = Callable[[list[str], Path], int]


def run_visible(argv: list[str], cwd: Path) -> int:
    return subprocess.run(
        argv, cwd=cwd, env={**os.environ, "CDK_DISABLE_CLI_TELEMETRY": "true"}, check=False
    ).returncode


def run_streaming(argv: Any) -> tuple[int, str]:
    """`tools.cells`' runner, showing the CLI's output as it comes (a deploy takes minutes);
    returns no output (it was shown)."""
    env = {**os.environ, "CDK_DISABLE_CLI_TELEMETRY": "true"}
    with subprocess.Popen(
        list(argv), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            print(line, end="", flush=True)
    return process.returncode, ""


class AwsTarget:
    """The run deployed to the session's account and Region (see the module's docstring)."""

    timeout, poll_seconds = 900.0, 5.0

    def __init__(
        self,
        session: Any,
        run_id: str,
        workdir: Path,
        *,
        say: Callable[[str], None] = print,
        runner: Runner = run_visible,
        cells_runner: Callable[[Any], tuple[int, str]] = run_streaming,
    ) -> None:
        self.session, self.run_id, self.workdir, self.say, self.runner = session, run_id, workdir, say, runner
        self.cells_runner = cells_runner
        self.tenant_ids, self.qualifier = tenant_ids(run_id), qualifier(run_id)
        self.region = session.region_name
        self.ops_args = ["--region", self.region or ""]
        self.core: AwsCore | None = None  # type: ignore[assignment]  # set by deploy() before any use
        self.account = ""

    def client(self, service: str) -> Any:
        return self.session.client(service)

    def preflight(self) -> None:
        """Refuse (one line) without credentials, a Region or a bootstrapped environment. A
        deployment of the app there is no obstacle: the run's names are qualified."""
        if not self.region:
            raise Refused(
                "no AWS Region: set AWS_REGION (or AWS_DEFAULT_REGION, a profile's region, or --region) to the "
                "Region to test in"
            )
        if self.session.get_credentials() is None:
            raise Refused(
                "no AWS credentials: set AWS_PROFILE (or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) for "
                "the account to test in; this test deploys to it and deletes what it deployed"
            )
        try:
            self.account = self.client("sts").get_caller_identity()["Account"]
        except Exception as error:
            raise Refused(f"the AWS credentials do not work: {error}") from None
        where = f"account {self.account}, Region {self.region}"
        try:
            self.client("ssm").get_parameter(Name="/cdk-bootstrap/hnb659fds/version")
        except Exception:
            raise Refused(
                f"{where} is not bootstrapped for the CDK: run `cdk bootstrap aws://{self.account}/"
                f"{self.region}` first"
            ) from None

    def deploy(self) -> None:
        """The stand-in first (the tenants' sink names its URL and ARN), then the app's cells."""
        from pipeline_constructs.config import load_config
        from tools import cells as cell_tool

        cdk = cell_tool.cdk()
        outputs = self.workdir / "stand-in-outputs.json"
        self.say(f"deploying {standin_stack_name(self.run_id)} (the recording core-system stand-in)")
        code = self.runner(
            [
                cdk,
                "deploy",
                "--app",
                f"{sys.executable} -m cloudtest.standin",
                "-c",
                f"run_id={self.run_id}",
                "--output",
                str(self.workdir / "stand-in.out"),
                "--outputs-file",
                str(outputs),
                "--require-approval",
                "never",
                "--no-notices",
                "--tags",
                f"{RUN_TAG}={self.run_id}",
            ],
            ROOT,
        )
        if code != 0:
            raise RuntimeError(f"cdk deploy of the stand-in failed (exit {code})")
        values = json.loads(outputs.read_text())[standin_stack_name(self.run_id)]
        self.core = AwsCore(self.session.resource("dynamodb").Table(values["TableName"]))
        tenants = write_tenants(
            self.workdir, self.run_id, sigv4_sink(values["FunctionUrl"], self.region, values["FunctionArn"])
        )
        self.say(
            f"deploying the app for tenants {', '.join(self.tenant_ids)}, its names qualified "
            f"{self.qualifier}- ({tenants})"
        )
        chosen = cell_tool.selected(load_config(tenants), [])
        cell_tool.deploy(
            tenants,
            chosen,
            ["--require-approval", "never", "--tags", f"{RUN_TAG}={self.run_id}"],
            outdir=self.workdir / "cells.out",
            out=self.say,
            runner=self.cells_runner,
        )
