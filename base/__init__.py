"""The ground floor: the error hierarchy, array type aliases and the key digest.

Every layer may import it; it imports nothing of skyroute's.
"""
