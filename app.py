#!/usr/bin/env python3
"""CDK entry point: `cdk synth|diff|deploy`. The tenants file is `tenants.yaml`, or the
context value `tenants` (`cdk synth -c tenants=path/to/tenants.yaml`).

`-c cell=<name>` synthesizes one cell of the file (`pipeline_constructs/cell_plan.py`,
`python -m tools.cells list` names them); without it, every cell, in one assembly.

Started with a Python that lacks aws-cdk-lib, it runs again with `.venv`'s (tools/project_env.py)."""

import sys

from tools.project_env import say_when_no_account, use_project_environment

use_project_environment()

# The project environment is set before the CDK is imported (it reads it at import).
from pipeline_constructs.application import CELL_CONTEXT, build_app, new_app  # noqa: E402  # after use_project_environment()
from pipeline_constructs.cell_plan import UnknownCell  # noqa: E402  # after use_project_environment()
from pipeline_constructs.config import ConfigError, load_config  # noqa: E402  # after use_project_environment()

app = new_app()
tenants_file = app.node.try_get_context("tenants") or "tenants.yaml"
try:
    config = load_config(tenants_file)
    build_app(tenants_file, app=app, config=config, cell=app.node.try_get_context(CELL_CONTEXT))
except (ConfigError, UnknownCell) as error:
    print(error, file=sys.stderr)
    sys.exit(1)
app.synth()
say_when_no_account()
