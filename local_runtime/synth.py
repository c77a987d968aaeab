"""Synthesize the CDK app in-process and read back what the local run needs.

The local runtime never re-describes the pipeline in Python: it takes the templates (and
the Lambda code assets) exactly as `cdk synth` would produce them for the tenants file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class SynthesizedStack:
    """One stack of the cloud assembly."""

    name: str
    template: dict[str, Any]
    dependencies: tuple[str, ...]

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return self.template.get("Resources") or {}


@dataclass(frozen=True)
class Synthesized:
    """The cloud assembly of one tenants file: stacks in deployment order, assets, config."""

    outdir: Path
    stacks: tuple[SynthesizedStack, ...]
    config: Any  # pipeline_constructs.config.AppConfig
    asset_dirs: dict[str, Path]  # asset hash -> staged directory

    def stack(self, name: str) -> SynthesizedStack:
        for stack in self.stacks:
            if stack.name == name:
                return stack
        raise KeyError(f"no stack named {name!r} (have: {', '.join(s.name for s in self.stacks)})")

    @property
    def templates(self) -> dict[str, dict[str, Any]]:
        return {stack.name: stack.template for stack in self.stacks}

    def code_dir(self, s3_key: str) -> Path:
        """The staged asset directory of a Lambda `Code.S3Key` (`<hash>.zip`)."""
        asset_hash = s3_key.rsplit("/", 1)[-1].removesuffix(".zip")
        try:
            return self.asset_dirs[asset_hash]
        except KeyError:
            raise KeyError(f"Lambda code asset {s3_key!r} is not a directory asset of this assembly") from None


def ensure_node_on_path() -> None:
    """jsii needs Node; the repo pins it under node_modules/.bin (see the Makefile)."""
    node_bin = REPO_ROOT / "node_modules" / ".bin"
    path = os.environ.get("PATH", "")
    if node_bin.is_dir() and path.split(os.pathsep)[0] != str(node_bin):
        os.environ["PATH"] = f"{node_bin}{os.pathsep}{path}"
    os.environ.setdefault("CDK_DISABLE_CLI_TELEMETRY", "true")
    os.environ.setdefault("JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION", "1")


def synthesize(tenants_file: str | Path, outdir: str | Path) -> Synthesized:
    """Build the app of ``tenants_file`` with `build_app` and synthesize it into ``outdir``.

    cdk-nag is left out (it only adds a report; the templates are the same).
    """
    ensure_node_on_path()
    from aws_cdk import App  # deferred: importing aws_cdk starts the jsii Node process

    from pipeline_constructs.application import build_app

    outdir = Path(outdir)
    built = build_app(tenants_file, app=App(outdir=str(outdir)), nag=False)
    assembly = built.app.synth()
    stacks = tuple(
        SynthesizedStack(
            name=stack.stack_name,
            template=stack.template,
            dependencies=tuple(dep.id for dep in stack.dependencies),
        )
        for stack in assembly.stacks
    )
    return Synthesized(outdir=outdir, stacks=stacks, config=built.config, asset_dirs=_asset_dirs(outdir))


def _asset_dirs(outdir: Path) -> dict[str, Path]:
    """Directory assets listed in every `*.assets.json` manifest of the assembly."""
    found: dict[str, Path] = {}
    for manifest in outdir.glob("*.assets.json"):
        files = json.loads(manifest.read_text()).get("files", {})
        for asset_hash, asset in files.items():
            source = asset.get("source", {})
            if source.get("packaging") == "zip":
                found[asset_hash] = (outdir / source["path"]).resolve()
    return found
