"""Delivery tools: the offline template diff (`make diff`), the reading of `cdk diff` output
that gates destructive changes in pull requests, and the actionlint runner."""
