"""docs/routes.md's table, generated from `ROUTES` (`python -m router.classify` prints it)."""

from __future__ import annotations

from router.classify.nodes import ROUTES


def routes_markdown() -> str:
    """The table for docs/routes.md, one row per Route, in matching order."""
    rows = [
        "| Template | Methods | Surface | Lane | Role | Handler | Selector | Body | Flags | Served by |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in ROUTES:
        flags = [
            n
            for n, on in (
                ("model-required", r.model_required),
                ("origin-strict", r.origin_strict),
                ("vllm", r.vllm),
                ("state-changing", r.state_changing),
                (f"names-node:{r.names_node}", bool(r.names_node)),
            )
            if on
        ]
        rows.append(
            f"| `{r.template}` | {' '.join(sorted(r.allowed))} | {r.surface} | {r.lane or '-'} "
            f"| {r.role} | `{r.handler}` | {r.selector.describe()} | {r.body} "
            f"| {', '.join(flags) or '-'} | {', '.join(sorted(r.served_by)) or 'router'} |"
        )
    return "\n".join(rows) + "\n"
