"""Trace-driven simulation of a skyroute fleet: replay a request trace against routing
policies with an autoscaler in the loop, and bound them with the offline optimum.

``skyroute simulate`` (``skyroute.simulate_cmd``) is the entry point; ``compare.compare`` the
library one.
"""
