"""The API of every served kind, as pydantic models.

These models are the one source for the CRD schemas (deploy/crds/ is generated from them), for
workflow inputs and for status writes.
"""
