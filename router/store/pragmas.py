"""The connection settings every writer of the store's file uses (standard library only).

db.py applies them to the router's connections and event_writer.py to the helper process's,
so the two writers of one file cannot drift apart.
"""

BUSY_TIMEOUT_MS = 5000
# Checkpoint the WAL every 64 MiB (x 4 KiB pages) instead of SQLite's 4 MiB: the index pages
# that every analytics row touches are copied into the file once per checkpoint, so rarer
# checkpoints do less work in total. POST .../analytics/flush still folds the WAL back at once.
WAL_CHECKPOINT_PAGES = 16384

WRITER_PRAGMAS = (
    f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}",
    # NORMAL is durable across process crashes in WAL mode; only power loss can cost the last
    # transactions, which the analytics contract already allows.
    "PRAGMA synchronous = NORMAL",
    f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}",
)
