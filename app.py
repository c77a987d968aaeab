#!/usr/bin/env python3
"""CDK entry point: `cdk synth|diff|deploy`. The tenants file is `tenants.yaml`, or the
context value `tenants` (`cdk synth -c tenants=path/to/tenants.yaml`).

Past `parallel_synth.MIN_TENANTS_PER_WORKER` tenants per core, the app is built by several
processes whose cloud assemblies are merged (`-c synth_workers=N` sets their number; 1 builds
it here). The CDK library is imported only when this process builds the app itself."""

import os
import sys

from pipeline_constructs import parallel_synth
from pipeline_constructs.config import ConfigError, load_config

context = parallel_synth.cli_context()
tenants_file = context.get("tenants") or "tenants.yaml"
try:
    config = load_config(tenants_file)
    workers = parallel_synth.workers_for(len(config.tenants), context.get(parallel_synth.WORKERS_CONTEXT, "auto"))
except (ConfigError, ValueError) as error:
    print(error, file=sys.stderr)
    sys.exit(1)

outdir = os.environ.get(parallel_synth.OUTDIR_ENV)
if workers > 1 and outdir:
    try:
        parallel_synth.synthesize(tenants_file, outdir, workers)
    except parallel_synth.ParallelSynthError as error:
        print(error, file=sys.stderr)
        sys.exit(1)
    sys.exit(0)

from pipeline_constructs import jsii_channel  # noqa: E402

jsii_channel.install()  # before the CDK library starts its kernel
from pipeline_constructs.application import build_app, new_app  # noqa: E402 (after the decision)

app = new_app()
build_app(tenants_file, app=app, config=config)
app.synth()
