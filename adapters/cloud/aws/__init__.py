"""AWS EC2 Auto Scaling groups (boto3). Importing this registers the ``aws`` provider."""

from adapters.cloud.aws.nodegroup import AsgNodeGroup

__all__ = ["AsgNodeGroup"]
