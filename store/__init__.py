"""The system of record: tenants, API keys, the usage ledger and spend, in SQL.

Redis (``live/``) is the hot tier and can be rebuilt from here at any time; nothing
on the request path waits on this package.
"""
