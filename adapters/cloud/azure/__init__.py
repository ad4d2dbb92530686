"""Azure VM scale sets (azure-mgmt-compute). Importing this registers the ``azure`` provider."""

from adapters.cloud.azure.nodegroup import ScaleSetNodeGroup

__all__ = ["ScaleSetNodeGroup"]
