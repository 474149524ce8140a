"""The inference pipeline: what happens to a client's inference request between the handler
that reads it (router/api/inference) and the backend or node that answers it: choose the
configuration, place it (here, on another node, through a lending link, or to the guardian),
lease a runtime, forward, record. It serves no route itself (docs/architecture.md).
"""
