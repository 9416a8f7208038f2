/* The environment, records and groups of the pack writer's unit tests (test-packer.h). */
#include "daemon/pack/test-packer.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "daemon/meta/db.h"
#include "daemon/format/manifest.h"
#include "daemon/format/objects.h"
#include "daemon/format/record.h"
#include "proto/util.h"
#include "storage/backend.h"
#include "storage/pack/pack.h"

/* ---- environment --------------------------------------------------------------------- */

void test_env_init(struct test_env *e, uint64_t pack_size)
{
    test_env_init_ops(e, pack_size, NULL);
}

void test_env_init_ops(struct test_env *e, uint64_t pack_size, const struct backend_ops *ops)
{
    struct packer_config cfg = {.pack_size = pack_size, .compression_level = 3};
    struct packer_resume resume = {0};
    const char *tmp = getenv("TMPDIR"), *msg = NULL;

    memset(e, 0, sizeof(*e));
    if (!tmp || !*tmp)
        tmp = "/tmp";
    snprintf(e->dir, sizeof(e->dir), "%s/cairn-test-packer-XXXXXX", tmp);
    assert_non_null(mkdtemp(e->dir));
    snprintf(e->root, sizeof(e->root), "%s/objects", e->dir);
    snprintf(e->url, sizeof(e->url), "local:%s", e->root);
    snprintf(e->dbpath, sizeof(e->dbpath), "%s/cairn.db", e->dir);
    assert_int_equal(uv_loop_init(&e->loop), 0);
    if ((ops ? backend_new_ops(&e->be, &e->loop, ops, e->url, &msg)
             : backend_new(&e->be, &e->loop, e->url, &msg)) != 0)
        fail_msg("backend_new: %s", msg ? msg : "?");
    assert_int_equal(db_new(&e->db, &e->loop, e->dbpath), 0);
    assert_int_equal(packer_new(&e->pk, &e->loop, e->be, e->db, &cfg, &resume), 0);
    assert_int_equal(packer_open_seq(e->pk), 1);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

void test_env_finish(struct test_env *e)
{
    assert_false(packer_busy(e->pk));
    assert_false(db_busy(e->db));
    assert_int_equal(e->be->inflight, 0);
    e->pk = packer_free(e->pk);
    e->be = backend_free(e->be);
    e->db = db_free(e->db);
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&e->loop), 0);
    assert_int_equal(nftw(e->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
}

void test_run(struct test_env *e)
{
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
}

void test_pack_path(const struct test_env *e, uint64_t seq, char *out, size_t len)
{
    char key[BACKEND_MAX_KEY];

    pack_key(key, sizeof(key), 0, seq);
    snprintf(out, len, "%s/%s", e->root, key);
}

uint8_t *test_read_pack(const struct test_env *e, uint64_t seq, ssize_t *len)
{
    char path[PATH_MAX * 2];
    uint8_t *buf;
    FILE *f;
    long n;

    test_pack_path(e, seq, path, sizeof(path));
    f = fopen(path, "rb");
    if (!f) {
        *len = -1;
        return NULL;
    }
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    rewind(f);
    buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = n;
    return buf;
}

/* ---- records and groups ------------------------------------------------------------------ */

static void random_bytes(uint8_t *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 7;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (uint8_t)(x >> 32);
    }
}

/* A block of `n` random chunks of `size` bytes each. */
void test_rec_block(struct packer_rec *rec, uint64_t seed, size_t n, size_t size)
{
    struct record_piece p[8];
    uint8_t *data = malloc(n * size);

    assert_true(n <= 8);
    assert_non_null(data);
    random_bytes(data, n * size, seed);
    for (size_t i = 0; i < n; i++) {
        p[i].data = data + i * size;
        p[i].len = size;
        SHA256(p[i].data, size, p[i].hash);
    }
    memset(rec, 0, sizeof(*rec));
    assert_int_equal(record_block_build(p, n, 3, &rec->bytes, &rec->len, rec->id, &rec->idx), 0);
    rec->type = PACK_REC_BLOCK;
    rec->nidx = n;
    free(data);
}

/* A manifest segment of three entries. */
void test_rec_segment(struct packer_rec *rec, uint8_t seed)
{
    struct manifest_entry e[3];
    uint8_t raw[MANIFEST_SEGMENT_HEADER + 3 * MANIFEST_ENTRY];
    size_t len;

    for (int i = 0; i < 3; i++) {
        memset(e[i].hash, seed + i, PROTO_HASH_LEN);
        e[i].bytes = 1000u * (seed + 1) + (uint64_t)i;
    }
    len = manifest_segment_encode(0, e, 3, raw);
    memset(rec, 0, sizeof(*rec));
    assert_int_equal(record_seal_build(PACK_REC_MANIFEST, raw, len, 3, &rec->bytes, &rec->len,
                                       rec->id, &rec->idx),
                     0);
    rec->type = PACK_REC_MANIFEST;
    rec->nidx = 1;
}

/* A journal entry: an add or a delete of document `doc`, at `time_ns`. */
void test_rec_entry(struct packer_rec *rec, uint8_t doc, uint64_t time_ns, bool is_delete)
{
    struct entry ent = {.op = is_delete ? ENTRY_DELETE : ENTRY_ADD, .time_ns = time_ns, .size = 0};
    uint8_t *raw;
    size_t len;

    memset(ent.doc, doc, PROTO_HASH_LEN);
    assert_int_equal(objects_entry_encode(&ent, &raw, &len), 0);
    memset(rec, 0, sizeof(*rec));
    assert_int_equal(
        record_seal_build(PACK_REC_ENTRY, raw, len, 3, &rec->bytes, &rec->len, rec->id, &rec->idx),
        0);
    free(raw);
    rec->type = PACK_REC_ENTRY;
    rec->nidx = 1;
    memcpy(rec->doc, ent.doc, PROTO_HASH_LEN);
    rec->time_ns = time_ns;
    rec->op = ent.op;
}

/* Whether the database has the row a record of the group should have made, where it went. */
static bool rec_located(struct db *db, const struct packer_rec *rec)
{
    struct db_loc loc;
    struct db_pack_row *rows;
    size_t n;
    bool found = false;

    switch (rec->type) {
    case PACK_REC_BLOCK:
        for (size_t i = 0; i < rec->nidx; i++) {
            if (db_chunk_find(db, rec->idx[i].id, &loc) != 0 || loc.pack != rec->pack ||
                loc.off != rec->offset || loc.len != rec->len)
                return false;
        }
        return true;
    case PACK_REC_MANIFEST:
        return db_segment_find(db, rec->id, &loc) == 0 && loc.pack == rec->pack &&
               loc.off == rec->offset && loc.len == rec->len;
    case PACK_REC_ENTRY:
        if (db_pack_rows(db, rec->pack, 0, &rows, &n) != 0)
            return false;
        for (size_t i = 0; i < n; i++) {
            if (rows[i].kind == DB_ROW_ENTRY && memcmp(rows[i].hash, rec->id, PROTO_HASH_LEN) == 0)
                found = rows[i].loc.off == rec->offset && rows[i].loc.len == rec->len;
        }
        free(rows);
        return found;
    }
    return false;
}

static int group_apply(struct db_txn *txn, struct packer_group *g)
{
    struct test_group *t = container_of(g, struct test_group, g);

    t->applied = true; /* writer thread: no asserts here */
    return t->apply_result;
}

static void group_done(struct packer_group *g, int status)
{
    struct test_group *t = container_of(g, struct test_group, g);

    t->done_calls++;
    t->status = status;
    t->order = t->env->seq++;
    t->located_at_done = status == 0;
    for (size_t i = 0; status == 0 && i < g->nrecs; i++)
        t->located_at_done &= rec_located(t->env->db, &g->recs[i]);
    if (t->on_done)
        t->on_done(t);
}

void test_group_init(struct test_group *t, struct test_env *e, size_t nrecs, uint64_t ticket)
{
    t->g = (struct packer_group){.recs = t->recs,
                                 .nrecs = nrecs,
                                 .ticket = ticket,
                                 .apply = group_apply,
                                 .done = group_done};
    t->env = e;
    t->done_calls = t->status = 0;
    t->order = -1;
}

void test_group_free(struct test_group *t)
{
    for (size_t i = 0; i < t->g.nrecs; i++) {
        free(t->recs[i].bytes);
        free(t->recs[i].idx);
    }
}

void test_expect_in_file(const uint8_t *file, ssize_t len, const struct test_group *t, uint64_t seq)
{
    for (size_t i = 0; i < t->g.nrecs; i++) {
        const struct packer_rec *r = &t->recs[i];
        assert_int_equal(r->pack, seq);
        assert_true(r->offset + r->len <= (uint64_t)len);
        assert_memory_equal(file + r->offset, r->bytes, r->len);
    }
}

static void after_kick_cb(uv_idle_t *h)
{
    struct test_after_kick *a = container_of(h, struct test_after_kick, idle);
    struct packer_stats st;

    uv_idle_stop(h);
    packer_get_stats(a->env->pk, &st);
    a->appending = packer_busy(a->env->pk) && st.appends > 0;
    a->fn(a);
    uv_close((uv_handle_t *)h, NULL);
}

void test_after_kick_start(struct test_after_kick *a, struct test_env *e,
                           void (*fn)(struct test_after_kick *))
{
    a->fn = fn;
    a->env = e;
    a->appending = false;
    assert_int_equal(uv_idle_init(&e->loop, &a->idle), 0);
    assert_int_equal(uv_idle_start(&a->idle, after_kick_cb), 0);
}
