"""`python -m router.classify`: print docs/routes.md's table."""

from router.classify.markdown import routes_markdown

print(routes_markdown(), end="")
