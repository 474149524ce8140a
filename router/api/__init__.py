"""Route handlers by surface. Each module exports `HANDLERS`: handler name -> coroutine.

The names are the `handler` field of the route table in router/classify.py.
"""
