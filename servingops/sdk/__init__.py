"""A small Python SDK for servingops: drive InferenceService rollouts and Instance migrations through Temporal."""

from servingops.sdk.migrations import MigrationClient, MigrationRefused
from servingops.sdk.rollouts import NoActiveCanaryError, RolloutClient, RolloutStatus, RunUnavailable

__all__ = ["MigrationClient", "MigrationRefused", "NoActiveCanaryError", "RolloutClient", "RolloutStatus",
           "RunUnavailable"]
