#!/usr/bin/env node
// Runs SQL on a DuckDB database file and prints the results as one line of
// JSON:
//
//   node query.js DBFILE SQL [SQL...]            the file opened READ_ONLY
//   node query.js --create DBFILE SQL [SQL...]   opened read-write (made if
//                                                missing), to build a fixture
//
// Output: {"open_ms": T, "results": [{"columns": [...], "rows": [[...]],
// "ms": T}, ...]}, one result per SQL argument in order. Values are DuckDB's
// JSON forms (getRowsJson: BIGINT and HUGEINT as strings, so nothing loses
// precision). open_ms is the time to open the database and connect, ms the
// time to run one statement and read all its rows; both are measured here,
// so node's start and the loading of DuckDB itself are not in them.
//
// Read-only, DuckDB neither writes nor locks the file for writing, so it can
// read a database on a read-only file system such as `cairn mount`. Extension
// autoloading is off: nothing is fetched from the network.
//
// Exit status: 0 when every statement ran, 1 with the error on stderr
// otherwise, 2 for a bad command line. Needs node_modules (setup.sh).
'use strict';

const { DuckDBInstance } = require('@duckdb/node-api');

function usage() {
  process.stderr.write('usage: node query.js [--create] DBFILE SQL [SQL...]\n');
  process.exit(2);
}

async function main(argv) {
  let create = false;
  if (argv[0] === '--create') {
    create = true;
    argv = argv.slice(1);
  }
  if (argv.length < 2 || argv[0].startsWith('-')) usage();
  const [path, ...statements] = argv;
  const options = {
    access_mode: create ? 'READ_WRITE' : 'READ_ONLY',
    autoinstall_known_extensions: 'false',
    autoload_known_extensions: 'false',
  };
  const t0 = process.hrtime.bigint();
  const instance = await DuckDBInstance.create(path, options);
  const connection = await instance.connect();
  const openMs = Number(process.hrtime.bigint() - t0) / 1e6;
  const results = [];
  try {
    for (const sql of statements) {
      const q0 = process.hrtime.bigint();
      const reader = await connection.runAndReadAll(sql);
      const rows = reader.getRowsJson();
      const ms = Number(process.hrtime.bigint() - q0) / 1e6;
      results.push({ columns: reader.columnNames(), rows, ms });
    }
  } finally {
    connection.closeSync();
    instance.closeSync();
  }
  process.stdout.write(JSON.stringify({ open_ms: openMs, results }) + '\n');
}

main(process.argv.slice(2)).catch((err) => {
  process.stderr.write('query.js: ' + (err && err.message ? err.message : String(err)) + '\n');
  process.exit(1);
});
