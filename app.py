#!/usr/bin/env python3
"""CDK entry point: `cdk synth|diff|deploy`. The tenants file is `tenants.yaml`, or the
context value `tenants` (`cdk synth -c tenants=path/to/tenants.yaml`)."""

import sys

from pipeline_constructs.application import build_app, new_app
from pipeline_constructs.config import ConfigError

app = new_app()
try:
    build_app(app.node.try_get_context("tenants") or "tenants.yaml", app=app)
except ConfigError as error:
    print(error, file=sys.stderr)
    sys.exit(1)
app.synth()
