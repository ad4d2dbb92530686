"""The live tier: Redis tables (the only code that spells a key), leases, and the
running policy file. Rebuildable at any time from the store and the policy.
"""
