"""A small Python SDK for servingops: drive InferenceService rollouts through Temporal."""

from servingops.sdk.rollouts import NoActiveCanaryError, RolloutClient, RolloutStatus, RunUnavailable

__all__ = ["NoActiveCanaryError", "RolloutClient", "RolloutStatus", "RunUnavailable"]
