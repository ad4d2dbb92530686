"""autoscaler."""
