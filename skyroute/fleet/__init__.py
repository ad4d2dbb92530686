"""The demo fleet: a routing policy built by hand from public price and latency data.

``demo-policy.yaml`` is the policy; ``demo_prices.csv`` and ``demo_rtt.csv`` are the rows
of the shared reference data it was built from. See README.md in this directory.
"""
