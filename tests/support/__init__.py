"""What the tests share: the router harness, router processes, stream readers and helpers."""
