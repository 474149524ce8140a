"""Hugging Face downloads (docs/downloads.md): pure decisions (`names`, `ssrf`, `plan`,
`queries`), the hub client (`hub`), the byte transfer (`transfer`), jobs, the library's listing
and scan (`library`) and the service."""

from router.downloads.hub import Hub
from router.downloads.jobs import Job, State
from router.downloads.names import UnsafeName
from router.downloads.plan import Plan, Repository
from router.downloads.queries import flag, plan_request, repository_of, search_query
from router.downloads.service import Downloads, downloads_service

__all__ = [
    "Downloads",
    "Hub",
    "Job",
    "Plan",
    "Repository",
    "State",
    "UnsafeName",
    "downloads_service",
    "flag",
    "plan_request",
    "repository_of",
    "search_query",
]
