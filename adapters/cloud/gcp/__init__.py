"""GCP managed instance groups (google-cloud-compute). Importing this registers ``gcp``."""

from adapters.cloud.gcp.nodegroup import MigNodeGroup

__all__ = ["MigNodeGroup"]
