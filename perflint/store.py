"""What perflint keeps between runs, in one SQLite database: `<cache dir>/cache.sqlite3`.

The result cache (`cache.Cache`) and the module summaries and import lines of the project
phase (`projectrun`) each keep their entries
in a *namespace*, named by what they are and by everything that decides them (perflint's
version, a stamp of its code, the settings).  A namespace is read whole when a run starts
and only what changed is written when it ends, in one transaction.

Eviction: an entry not used for `KEEP_DAYS` is deleted, and of the namespaces of one kind
only the `KEEP_NAMESPACES` most recently used are kept (a new perflint, or an edited rule,
starts new ones).  A database that cannot be opened, written or read (read-only folder,
another process holding the lock, a damaged file) costs the cache, never the run; a damaged
file is replaced.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

DB_NAME = "cache.sqlite3"
KEEP_DAYS = 30
KEEP_NAMESPACES = 12
_DAY = 86400

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS entries (ns TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,"
    " used INTEGER NOT NULL, PRIMARY KEY (ns, key)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS spaces (ns TEXT PRIMARY KEY, kind TEXT NOT NULL, used INTEGER NOT NULL)",
)


def prepare_dir(directory: Path) -> None:
    """Create the cache folder with a `.gitignore` and a `CACHEDIR.TAG` (as ruff does)."""
    directory.mkdir(parents=True, exist_ok=True)
    marker = directory / ".gitignore"
    if not marker.exists():
        marker.write_text("# Created by perflint automatically.\n*\n", encoding="utf-8")
        (directory / "CACHEDIR.TAG").write_text(
            "Signature: 8a477f597d28d172789f06886806bc55\n# perflint cache\n", encoding="utf-8")


class Store:
    """One database; `None` as the folder gives a store that keeps nothing."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self._db: sqlite3.Connection | None = None
        self._broken = directory is None
        # What `load` saw: per namespace, the keys whose use date is due for a refresh, and
        # whether the namespace's own date is (a run that changes nothing then writes nothing).
        self._due: dict[str, set[str]] = {}
        self._space_due: dict[str, bool] = {}

    @property
    def path(self) -> Path | None:
        return self.directory / DB_NAME if self.directory is not None else None

    def _open(self, create: bool) -> sqlite3.Connection | None:
        if self._db is not None or self._broken:
            return self._db
        path = self.path
        assert path is not None
        if not create and not path.is_file():
            return None
        for attempt in (0, 1):
            db = None
            try:
                if create:
                    prepare_dir(path.parent)
                db = sqlite3.connect(str(path), timeout=5.0, isolation_level=None, check_same_thread=False)
                for statement in _SCHEMA:
                    db.execute(statement)
                self._db = db
                return db
            except sqlite3.OperationalError:  # locked, or cannot be opened: no cache this run
                if db is not None:
                    db.close()
                break
            except sqlite3.DatabaseError:
                # Not a database (damaged, or something else under that name): read as empty;
                # the first write starts it afresh.
                if db is not None:
                    db.close()
                if not create:
                    return None
                if attempt:
                    break
                try:
                    path.unlink()
                except OSError:
                    break
            except (sqlite3.Error, OSError):
                break
        self._broken = True
        return None

    def load(self, ns: str) -> dict:
        """Every entry of a namespace (key → decoded JSON value); empty when there is none."""
        db = self._open(create=False)
        if db is None:
            return {}
        out = {}
        due = self._due.setdefault(ns, set())
        stale = int(time.time()) - _DAY  # a used entry's date is refreshed at most once a day
        try:
            for key, value, used in db.execute("SELECT key, value, used FROM entries WHERE ns = ?", (ns,)):
                try:
                    out[key] = json.loads(value)
                except ValueError:
                    continue
                if used < stale:
                    due.add(key)
            row = db.execute("SELECT used FROM spaces WHERE ns = ?", (ns,)).fetchone()
        except sqlite3.Error:
            return {}
        self._space_due[ns] = row is None or row[0] < stale
        return out

    def save(self, ns: str, kind: str, changed: dict, used: set[str] | frozenset[str] = frozenset(),
             drop: set[str] | frozenset[str] = frozenset()) -> bool:
        """Write the `changed` entries, mark the `used` ones as used now, delete `drop`, and
        evict what is stale.  False when nothing could be written (the run goes on)."""
        if self.directory is None:
            return False
        due = self._due.get(ns)
        refresh = [k for k in used if k not in changed and (due is None or k in due)]
        if not changed and not refresh and not drop and not self._space_due.get(ns, True):
            return True  # nothing to write
        db = self._open(create=True)
        if db is None:
            return False
        now = int(time.time())
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany("INSERT OR REPLACE INTO entries (ns, key, value, used) VALUES (?, ?, ?, ?)",
                               [(ns, k, json.dumps(v, separators=(",", ":")), now) for k, v in changed.items()])
                db.executemany("UPDATE entries SET used = ? WHERE ns = ? AND key = ?",
                               [(now, ns, k) for k in refresh])
                db.executemany("DELETE FROM entries WHERE ns = ? AND key = ?", [(ns, k) for k in drop])
                db.execute("INSERT OR REPLACE INTO spaces (ns, kind, used) VALUES (?, ?, ?)", (ns, kind, now))
                self._evict(db, kind, now)
                db.execute("COMMIT")
                self._due.pop(ns, None)
                self._space_due[ns] = False
            except BaseException:
                db.execute("ROLLBACK")
                raise
        except sqlite3.Error:
            return False
        return True

    @staticmethod
    def _evict(db: sqlite3.Connection, kind: str, now: int) -> None:
        old = now - KEEP_DAYS * _DAY
        gone = [r[0] for r in db.execute(
            "SELECT ns FROM spaces WHERE kind = ? AND (used < ? OR ns NOT IN "
            "(SELECT ns FROM spaces WHERE kind = ? ORDER BY used DESC, ns LIMIT ?))",
            (kind, old, kind, KEEP_NAMESPACES))]
        for ns in gone:
            db.execute("DELETE FROM entries WHERE ns = ?", (ns,))
            db.execute("DELETE FROM spaces WHERE ns = ?", (ns,))
        db.execute("DELETE FROM entries WHERE used < ?", (old,))

    def close(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
            self._db = None
