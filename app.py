#!/usr/bin/env python3
"""CDK entry point: `cdk synth|diff|deploy`. The tenants file is `tenants.yaml`, or the
context value `tenants` (`cdk synth -c tenants=path/to/tenants.yaml`)."""

import sys

from aws_cdk import App

from pipeline_constructs.application import build_app
from pipeline_constructs.config import ConfigError

app = App()
try:
    build_app(app.node.try_get_context("tenants") or "tenants.yaml", app=app)
except ConfigError as error:
    print(error, file=sys.stderr)
    sys.exit(1)
app.synth()
