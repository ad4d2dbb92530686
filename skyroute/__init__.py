"""skyroute."""
