"""The catalog of a ModelCatalogSource: the policy rule, the Hugging Face index scan and the index document.

- `policy` (pure): is the source's `spec.policy` scoped and bounded? A blocked verdict names its reason
  (`PolicyScopeMissing`, `PolicyBoundsMissing`, `PolicyBoundsExceeded`) and what to set.
- `huggingface_index`: the scan with the real `huggingface_hub` client, resumable at a refresh budget, and
  the activity `catalog.index_huggingface`.
- `index_document` (pure): the index as canonical JSON and its sha256 digest (the future catalogRevision).
- `types`: what travels in payloads (import-light, for workflows); `secrets`: the token Secret reader.
"""
