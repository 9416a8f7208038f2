#!/usr/bin/env python3
"""Database files to query through `cairn mount`: an SQLite and a DuckDB
database with the same tables and rows, the queries run on them, and how to
run those queries read-only (Python 3 standard library only; DuckDB through
node and tests/duckdb/query.js). Used by test_mount_s3.py and by the bench
suite `mount` (bench/cairnbench/suite_mount.py, which loads this file by
path).

    dbfixture.make_sqlite(path, rows)
    dbfixture.make_duckdb(path, rows)          # needs duckdb_missing() None
    dbfixture.run_queries("sqlite", path, [sql, ...])
        -> {"open_ms": T, "results": [{"columns", "rows", "ms"}, ...]}

Both databases hold `customers` (20,000 rows: id, name, region) and `orders`
(`rows` rows: id, customer_id, amount, a 32-hex-digit note) with an index on
orders.customer_id, every value computed from the row number by the same SQL
in both engines, so both answer every query alike (normalized() makes their
values comparable: DuckDB's JSON gives 64- and 128-bit integers as strings).

As a script, it is SQLite's counterpart of query.js, with the same output:

    python3 dbfixture.py sqlite DBFILE SQL [SQL...]

opens DBFILE read-only (`mode=ro`: the way a program opens a database it
only reads, locks included) and times the open and each query itself, so
the Python interpreter's start is not in the numbers.
"""

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.parse

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DUCKDB_DIR = os.path.join(REPO, "tests", "duckdb")
QUERY_JS = os.path.join(DUCKDB_DIR, "query.js")
DUCKDB_MODULE = os.path.join(DUCKDB_DIR, "node_modules", "@duckdb", "node-api")
CUSTOMERS = 20000
ENGINES = ("sqlite", "duckdb")

# Four multiplicative hashes of the row number, each kept to 32 bits: the note
# looks random and hardly compresses, in both engines alike.
_NOTE = ("printf('%08x%08x%08x%08x', (i * 2654435761) % 4294967296, (i * 40503) % 4294967296, "
         "(i * 2246822519) % 4294967296, (i * 3266489917) % 4294967296)")


def _series(n, engine):
    if engine == "duckdb":
        return "range(1, %d) r(i)" % (n + 1)
    return ("(WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) "
            "SELECT i FROM s)" % n)


def schema_sql(rows, engine):
    """The statements that build the database, in `engine`'s dialect."""
    return [
        "CREATE TABLE customers (id INTEGER PRIMARY KEY, name VARCHAR, region INTEGER)",
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount INTEGER, "
        "note VARCHAR)",
        "INSERT INTO customers SELECT i, 'customer ' || i, (i * 37) %% 50 FROM %s"
        % _series(CUSTOMERS, engine),
        "INSERT INTO orders SELECT i, 1 + (i * 7919) %% %d, (i * 104729) %% 100000, %s FROM %s"
        % (CUSTOMERS, _NOTE, _series(rows, engine)),
        "CREATE INDEX orders_customer ON orders (customer_id)",
    ]


def queries(rows):
    """[(name, sql)]: aggregates over a whole table, a join with GROUP BY, a
    point lookup by primary key joined to its customer, and a lookup through
    the secondary index. The same SQL for both engines."""
    point = rows * 2 // 3 + 1
    return [
        ("aggregate", "SELECT COUNT(*), SUM(amount), MIN(amount), MAX(amount), "
                      "COUNT(DISTINCT customer_id) FROM orders"),
        ("join", "SELECT c.region, COUNT(*), SUM(o.amount) FROM orders o "
                 "JOIN customers c ON c.id = o.customer_id GROUP BY c.region ORDER BY c.region"),
        ("point", "SELECT o.id, o.customer_id, o.amount, o.note, c.name FROM orders o "
                  "JOIN customers c ON c.id = o.customer_id WHERE o.id = %d" % point),
        ("index", "SELECT COUNT(*), SUM(amount), MIN(note) FROM orders WHERE customer_id = 777"),
    ]


def node_path():
    return os.environ.get("CAIRN_TEST_NODE") or shutil.which("node") or shutil.which("nodejs")


def duckdb_missing():
    """Why DuckDB cannot run here (node or tests/duckdb/node_modules missing), or None."""
    if node_path() is None:
        return "node is not installed (Debian package nodejs)"
    if not os.path.isdir(DUCKDB_MODULE):
        return "%s is missing: run tests/duckdb/setup.sh (npm ci)" % os.path.relpath(
            DUCKDB_MODULE, REPO)
    return None


def make_sqlite(path, rows):
    db = sqlite3.connect(path)
    try:
        for sql in schema_sql(rows, "sqlite"):
            db.execute(sql)
        db.commit()
    finally:
        db.close()


def make_duckdb(path, rows, timeout=600):
    argv = [node_path(), QUERY_JS, "--create", path] + schema_sql(rows, "duckdb") + ["CHECKPOINT"]
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("query.js --create failed (%d): %s"
                           % (p.returncode, p.stderr.decode(errors="replace")[-600:]))


def sqlite_queries(path, sqls):
    """Runs `sqls` on the database at `path`, opened read-only; the output of
    query.js: {"open_ms", "results": [{"columns", "rows", "ms"}]}."""
    t0 = time.perf_counter()
    db = sqlite3.connect("file:%s?mode=ro" % urllib.parse.quote(os.path.abspath(path)), uri=True)
    open_ms = (time.perf_counter() - t0) * 1000
    results = []
    try:
        for sql in sqls:
            q0 = time.perf_counter()
            cur = db.execute(sql)
            rows = [list(r) for r in cur.fetchall()]
            ms = (time.perf_counter() - q0) * 1000
            results.append({"columns": [d[0] for d in cur.description], "rows": rows, "ms": ms})
    finally:
        db.close()
    return {"open_ms": open_ms, "results": results}


def query_argv(engine, path, sqls):
    """The command that runs `sqls` on `path` read-only in a process of its own."""
    if engine == "duckdb":
        return [node_path(), QUERY_JS, path] + list(sqls)
    return [sys.executable, os.path.abspath(__file__), "sqlite", path] + list(sqls)


def run_queries(engine, path, sqls, timeout=600):
    """query_argv's command, run; its parsed output. Raises RuntimeError with
    its stderr when it fails."""
    p = subprocess.run(query_argv(engine, path, sqls), stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError("%s query on %s failed (%d): %s" % (
            engine, path, p.returncode, p.stderr.decode(errors="replace")[-600:]))
    return json.loads(p.stdout)


def normalized(rows):
    """Rows with every value as a string: SQLite's and DuckDB's answers compare."""
    return [[None if v is None else str(v) for v in row] for row in rows]


def main(argv):
    if len(argv) < 3 or argv[0] != "sqlite":
        sys.stderr.write("usage: dbfixture.py sqlite DBFILE SQL [SQL...]\n")
        return 2
    try:
        out = sqlite_queries(argv[1], argv[2:])
    except sqlite3.Error as e:
        sys.stderr.write("dbfixture.py: %s\n" % e)
        return 1
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
