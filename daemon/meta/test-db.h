#pragma once

/*
 * Helpers shared by the database unit tests, one program in five files:
 * test-db.c (documents and references), test-db-write.c (lists, deletes,
 * the search index's queue, the writer), test-db-store.c (packs, record locations and the journal),
 * test-db-gc.c (gc's queries). Each
 * test gets a database in a temporary directory on a real libuv loop; changes go through db_write()
 * and its group-committing writer. Every test ends with the database freed, the loop run dry,
 * uv_loop_close() == 0 and the directory removed.
 *
 * The read functions are documented for worker threads; the tests call them
 * on the main thread while no batch runs, which is equivalent.
 */

#include "daemon/meta/db.h"
#include "daemon/format/manifest.h"

#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

struct test_db {
    char dir[PATH_MAX / 2]; /* mkdtemp result, removed at the end */
    char path[PATH_MAX];    /* the database file */
    uv_loop_t loop;
    struct db *db;
};

/* cmocka setup and teardown: *state is a struct test_db. */
int test_db_setup(void **state);
int test_db_teardown(void **state);

/*
 * A change of its own through db_write(): fn runs on the writer thread (no
 * cmocka asserts there). Checks that it was applied and completed exactly
 * once, and returns its status.
 */
typedef int test_db_fn(struct db_txn *txn, void *ctx);
int test_db_run(struct test_db *e, test_db_fn *fn, void *ctx, bool durable);

/* A hash whose bytes all derive from `seed`; the first byte is `first`. */
void test_hash(uint8_t hash[PROTO_HASH_LEN], uint8_t first, uint8_t seed);
void test_hex(const uint8_t hash[PROTO_HASH_LEN], char hex[PROTO_HASH_HEX + 1]);

/* A document to add, with a made-up depth-0 manifest of `nroot` entries. */
#define TEST_DOC_MAX 4
struct test_doc {
    uint8_t hash[PROTO_HASH_LEN];
    uint64_t size, stored;
    const char *mime, *name;
    const char *tags[TEST_DOC_MAX];
    const char *meta_keys[TEST_DOC_MAX], *meta_values[TEST_DOC_MAX];
    unsigned depth;
    size_t nroot;
    bool text;
    int64_t created_at;
    uint8_t root[TEST_DOC_MAX * MANIFEST_ENTRY]; /* filled by test_doc_add */
};

/* Runs db_txn_add for the document; *out (may be NULL) gets the db_add with its outputs. */
int test_doc_add(struct test_db *e, struct test_doc *d, struct db_add *out);
/* Adds and expects success; returns the outputs. */
struct db_add test_doc_add_ok(struct test_db *e, struct test_doc *d);
/* Runs db_txn_delete for a hash in hex. */
int test_doc_delete(struct test_db *e, const char *hex);

/* Record locations and packs, each change a write of its own; each returns its status. */
int test_chunk_put(struct test_db *e, const uint8_t hash[PROTO_HASH_LEN], const struct db_loc *loc);
int test_segment_put(struct test_db *e, const uint8_t hash[PROTO_HASH_LEN],
                     const struct db_loc *loc);
int test_journal_put(struct test_db *e, const uint8_t id[PROTO_HASH_LEN], const struct db_loc *loc,
                     const uint8_t doc[PROTO_HASH_LEN], uint64_t time_ns, bool is_delete,
                     bool applied);
int test_journal_applied(struct test_db *e, const uint8_t id[PROTO_HASH_LEN], bool drop);
int test_pack_set(struct test_db *e, uint64_t seq, uint64_t size, enum db_pack_state state);
int test_pack_drop(struct test_db *e, uint64_t seq);

/* A set of hashes that gc's sweep treats as live; `calls` counts the questions. */
struct test_live {
    const uint8_t (*hashes)[PROTO_HASH_LEN];
    size_t n;
    unsigned calls;
};
/* A db_live_fn over a struct test_live. */
bool test_live_has(void *ctx, const uint8_t hash[PROTO_HASH_LEN]);
/*
 * Sweeps a whole table with db_txn_condemn_page, `page` rows at a time, one
 * write per page; returns the status and adds up the counts. *pages gets the
 * number of pages (may be NULL).
 */
int test_sweep(struct test_db *e, enum db_record_table table, struct test_live *live, uint64_t gen,
               size_t page, uint64_t *condemned, uint64_t *revived, unsigned *pages);

/*
 * Runs a query on a connection of its own to the database file, for what no
 * API shows; returns the first column of the first row, or -1 when no row.
 */
int64_t test_db_query(struct test_db *e, const char *sql);

/* fsync() and fdatasync() calls of this process so far (the test program interposes them). */
uint64_t test_syncs(void);
/* The path of the file the last of them synced. */
void test_last_sync(char *path, size_t len);
/* From now on, sqlite3_exec() of exactly `sql` fails (SQLITE_FULL); NULL: none does. */
void test_fail_exec(const char *sql);

/* The groups of the other files; each returns its number of failures. */
int test_db_write_run(void);
int test_db_store_run(void);
int test_db_gc_run(void);
