"""Synthesize the CDK app in-process and record what the local run needs: the templates, the
Lambda code assets and, from the construct tree, each `TenantPipeline`'s logical ids."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
#: The kinds of `TenantPipeline.functions`.
CONTROLLER_KIND, SPLIT_KIND, REGISTER_KIND = "controller", "split", "register"


@dataclass(frozen=True)
class SynthesizedStack:
    """One stack of the cloud assembly."""

    name: str
    template: dict[str, Any]
    dependencies: tuple[str, ...]  # stacks (and asset manifests) deployed before this one


@dataclass(frozen=True)
class CodeAsset:
    """A directory asset (Lambda code) and where `cdk deploy` would publish its zip."""

    directory: Path
    bucket: str  # may hold ${AWS::AccountId}, ${AWS::Region}, ${AWS::Partition}
    key: str


@dataclass(frozen=True)
class SynthesizedTenant:
    """One `TenantPipeline` of the app: its stack and the logical ids of its resources."""

    id: str
    prefix: str
    stack: str
    queue: str
    rule: str  # the rule that sends its uploads to the queue
    state_machine: str
    functions: dict[str, str]  # kind ("controller", "split", "register", ...) -> logical id


@dataclass(frozen=True)
class Synthesized:
    """The cloud assembly of one tenants file."""

    stacks: tuple[SynthesizedStack, ...]
    assets: dict[str, CodeAsset]  # by object key (a function's `Code.S3Key`)
    tenants: tuple[SynthesizedTenant, ...]

    @property
    def templates(self) -> dict[str, dict[str, Any]]:
        return {stack.name: stack.template for stack in self.stacks}


def ensure_node_on_path() -> None:
    """jsii needs Node; the repo pins it under node_modules/.bin (see the Makefile)."""
    node_bin = REPO_ROOT / "node_modules" / ".bin"
    path = os.environ.get("PATH", "")
    if node_bin.is_dir() and path.split(os.pathsep)[0] != str(node_bin):
        os.environ["PATH"] = f"{node_bin}{os.pathsep}{path}"
    os.environ.setdefault("CDK_DISABLE_CLI_TELEMETRY", "true")
    os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")


#: A team's own app (`examples/embedded/app.py`): ``build(outdir) -> App``.
AppBuilder = Callable[[str], Any]


def synthesize(source: str | Path | AppBuilder, outdir: str | Path) -> Synthesized:
    """Synthesize into ``outdir`` the app of ``source``: a tenants file (`build_app`, cdk-nag off:
    it only adds a report), or a function that builds an app of its own with that outdir.

    A tenants file's `notifications` is left out: the local account reaches none of its
    endpoints or topic (SNS would fail the closer's publish), and the runtime captures what the
    app's own topic gets (`observation.py`). An app of its own is run as it is."""
    ensure_node_on_path()
    outdir = Path(outdir)
    if callable(source):
        app = source(str(outdir))
    else:
        app = _tenants_file_app(Path(source), outdir)
    assembly = app.synth()
    stacks = tuple(
        SynthesizedStack(stack.stack_name, stack.template, tuple(dep.id for dep in stack.dependencies))
        for stack in assembly.stacks
    )
    return Synthesized(stacks=stacks, assets=_code_assets(outdir), tenants=_tenants(app))


def _tenants_file_app(tenants_file: Path, outdir: Path) -> Any:
    # deferred: importing aws_cdk starts the jsii Node process
    from aws_cdk import Annotations

    from pipeline_constructs.application import build_app, new_app
    from pipeline_constructs.config import ALARMS_REACH_NOBODY_ID, NotificationsConfig, load_config

    own = load_config(tenants_file)
    config = own.model_copy(update={"notifications": NotificationsConfig()})
    built = build_app(tenants_file, app=new_app(outdir=str(outdir)), nag=False, config=config)
    if built.config.targets:
        raise ValueError(
            f"{tenants_file} declares deployment targets: the local runtime runs the layout "
            "without 'targets:' only (one deployment); use a tenants file without them"
        )
    if built.shared is not None and not own.notifications.reach_nobody:
        # Nobody is reached here because the notifications were left out above, not because the
        # file reaches nobody: the warning would be about this run, not the file.
        Annotations.of(built.shared).acknowledge_warning(
            ALARMS_REACH_NOBODY_ID, "left out by the local runtime"
        )
    return built.app


def _tenants(app: Any) -> tuple[SynthesizedTenant, ...]:
    from aws_cdk import Stack

    from pipeline_constructs.tenant_pipeline import TenantPipeline

    def logical_id(construct: Any) -> str:
        stack = Stack.of(construct)
        return stack.resolve(stack.get_logical_id(construct.node.default_child))

    return tuple(
        SynthesizedTenant(
            id=pipeline.tenant_id,
            prefix=pipeline.landing_prefix,
            stack=Stack.of(pipeline).stack_name,
            queue=logical_id(pipeline.queue),
            rule=logical_id(pipeline.rule),
            state_machine=logical_id(pipeline.state_machine),
            functions={kind: logical_id(function) for kind, function in pipeline.functions.items()},
        )
        for pipeline in app.node.find_all()
        if isinstance(pipeline, TenantPipeline)
    )


def _code_assets(outdir: Path) -> dict[str, CodeAsset]:
    """Directory assets listed in every `*.assets.json` manifest of the assembly."""
    found: dict[str, CodeAsset] = {}
    for manifest in sorted(outdir.glob("*.assets.json")):
        for asset in json.loads(manifest.read_text()).get("files", {}).values():
            if asset.get("source", {}).get("packaging") != "zip":
                continue
            for destination in asset.get("destinations", {}).values():
                code = CodeAsset(
                    (outdir / asset["source"]["path"]).resolve(),
                    destination["bucketName"],
                    destination["objectKey"],
                )
                found[code.key] = code
    return found
