"""The local demo: the default tenants.yaml running end to end on one machine (``python -m demo``)."""
