/*
 * Unit tests of the pack writer (daemon/packer.c) against a real local
 * backend in a temporary directory, a real database and a real libuv loop:
 * groups queued together go out in one append and one transaction, and
 * their records are in the database (chunk, segment and journal rows) by
 * the time their callbacks come; a group whose own change fails is rolled
 * back alone; event groups go in ticket order, and a cancelled ticket lets
 * later ones through; packs are sealed at pack_size and by packer_rotate()
 * with an index and trailer that storage/pack.h reads back; a failed append
 * fails its groups and later groups still go out. Every test ends with the
 * packer, the backend and the database freed, uv_loop_close() == 0 and the
 * directory removed.
 */
#include "daemon/packer.h"

#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/sha.h>

#include "daemon/db.h"
#include "daemon/manifest.h"
#include "daemon/objects.h"
#include "daemon/record.h"
#include "proto/util.h"
#include "storage/backend.h"

/* ---- environment --------------------------------------------------------------------- */

struct env {
    char dir[PATH_MAX / 2];
    char root[PATH_MAX / 2 + 16];
    char url[PATH_MAX];
    char dbpath[PATH_MAX];
    uv_loop_t loop;
    struct backend *be;
    struct db *db;
    struct packer *pk;
    int seq; /* group completions so far */
};

static void env_init(struct env *e, uint64_t pack_size)
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
    if (backend_new(&e->be, &e->loop, e->url, &msg) != 0)
        fail_msg("backend_new: %s", msg ? msg : "?");
    assert_int_equal(db_new(&e->db, &e->loop, e->dbpath), 0);
    assert_int_equal(packer_new(&e->pk, &e->loop, e->be, e->db, &cfg, &resume), 0);
    assert_int_equal(packer_open_seq(e->pk), 1);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void env_finish(struct env *e)
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

static void run(struct env *e)
{
    assert_int_equal(uv_run(&e->loop, UV_RUN_DEFAULT), 0);
}

static void pack_path(const struct env *e, uint64_t seq, char *out, size_t len)
{
    char key[BACKEND_MAX_KEY];

    packer_pack_key(key, sizeof(key), seq);
    snprintf(out, len, "%s/%s", e->root, key);
}

/* A pack file's bytes (malloc'd); its size in *len, or -1 when it does not exist. */
static uint8_t *read_pack(const struct env *e, uint64_t seq, ssize_t *len)
{
    char path[PATH_MAX * 2];
    uint8_t *buf;
    FILE *f;
    long n;

    pack_path(e, seq, path, sizeof(path));
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

struct tgroup {
    struct packer_group g;
    struct packer_rec recs[4];
    struct env *env;
    int done_calls, status, order;
    /* Whether every record's row was in the database when the callback came. */
    bool located_at_done;
    /* Runs in the batch's transaction (writer thread): its result, and whether it ran. */
    int apply_result;
    bool applied;
    void (*on_done)(struct tgroup *g);
    void *ctx;
};

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
static void rec_block(struct packer_rec *rec, uint64_t seed, size_t n, size_t size)
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
static void rec_segment(struct packer_rec *rec, uint8_t seed)
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
static void rec_entry(struct packer_rec *rec, uint8_t doc, uint64_t time_ns, bool is_delete)
{
    struct entry ent = {.is_delete = is_delete, .time_ns = time_ns, .size = 0};
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
    rec->is_delete = is_delete;
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
    struct tgroup *t = container_of(g, struct tgroup, g);

    t->applied = true; /* writer thread: no asserts here */
    return t->apply_result;
}

static void group_done(struct packer_group *g, int status)
{
    struct tgroup *t = container_of(g, struct tgroup, g);

    t->done_calls++;
    t->status = status;
    t->order = t->env->seq++;
    t->located_at_done = status == 0;
    for (size_t i = 0; status == 0 && i < g->nrecs; i++)
        t->located_at_done &= rec_located(t->env->db, &g->recs[i]);
    if (t->on_done)
        t->on_done(t);
}

static void group_init(struct tgroup *t, struct env *e, size_t nrecs, uint64_t ticket)
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

static void group_free(struct tgroup *t)
{
    for (size_t i = 0; i < t->g.nrecs; i++) {
        free(t->recs[i].bytes);
        free(t->recs[i].idx);
    }
}

/* Each record of the group at its place in the pack file: the same bytes. */
static void expect_in_file(const uint8_t *file, ssize_t len, const struct tgroup *t, uint64_t seq)
{
    for (size_t i = 0; i < t->g.nrecs; i++) {
        const struct packer_rec *r = &t->recs[i];
        assert_int_equal(r->pack, seq);
        assert_true(r->offset + r->len <= (uint64_t)len);
        assert_memory_equal(file + r->offset, r->bytes, r->len);
    }
}

/* Runs `fn` on the loop once the packer has started the batch of this turn. */
struct after_kick {
    uv_idle_t idle;
    void (*fn)(struct after_kick *a);
    struct env *env;
    bool appending; /* an append was running when fn ran */
    void *ctx;
    int result;
};

static void after_kick_cb(uv_idle_t *h)
{
    struct after_kick *a = container_of(h, struct after_kick, idle);
    struct packer_stats st;

    uv_idle_stop(h);
    packer_get_stats(a->env->pk, &st);
    a->appending = packer_busy(a->env->pk) && st.appends > 0;
    a->fn(a);
    uv_close((uv_handle_t *)h, NULL);
}

/* Started before packer_submit: libuv runs the idle handle started last (the packer's) first. */
static void after_kick_start(struct after_kick *a, struct env *e, void (*fn)(struct after_kick *))
{
    a->fn = fn;
    a->env = e;
    a->appending = false;
    assert_int_equal(uv_idle_init(&e->loop, &a->idle), 0);
    assert_int_equal(uv_idle_start(&a->idle, after_kick_cb), 0);
}

/* ---- batching and locations ------------------------------------------------------------ */

static void test_batch(void **state)
{
    struct env e;
    struct tgroup a = {0}, b = {0}, c = {0}, d = {0};
    struct packer_stats st;
    struct db_pack *packs;
    size_t npacks;
    ssize_t len;
    uint8_t *file;

    env_init(&e, 16u << 20);
    rec_block(&a.recs[0], 1, 3, 5000);
    rec_segment(&a.recs[1], 1);
    group_init(&a, &e, 2, 0);
    rec_block(&b.recs[0], 2, 1, 70000);
    rec_entry(&b.recs[1], 0xb0, 1000, false);
    group_init(&b, &e, 2, 0);
    rec_entry(&c.recs[0], 0xb0, 2000, true);
    group_init(&c, &e, 1, 0);

    /* Queued in one turn: one batch, one append, one pack. */
    packer_submit(e.pk, &a.g);
    packer_submit(e.pk, &b.g);
    packer_submit(e.pk, &c.g);
    assert_true(packer_busy(e.pk));
    assert_int_equal(a.done_calls, 0); /* never from inside submit */
    run(&e);
    struct tgroup *all[] = {&a, &b, &c};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(all[i]->done_calls, 1);
        assert_int_equal(all[i]->status, 0);
        assert_int_equal(all[i]->order, i);
        assert_true(all[i]->applied);
        assert_true(all[i]->located_at_done);
    }
    packer_get_stats(e.pk, &st);
    assert_int_equal(st.batches, 1);
    assert_int_equal(st.appends, 1);
    assert_int_equal(st.records, 5);
    assert_int_equal(st.packs_sealed, 0);

    /* Laid out one after another behind the pack header, in submission order. */
    uint64_t off = PACK_HEADER_SIZE;
    for (int i = 0; i < 3; i++) {
        for (size_t k = 0; k < all[i]->g.nrecs; k++) {
            assert_int_equal(all[i]->recs[k].offset, off);
            off += all[i]->recs[k].len;
        }
    }
    assert_int_equal(st.bytes, off);
    file = read_pack(&e, 1, &len);
    assert_non_null(file);
    assert_int_equal(len, off);
    uint64_t seq = 0;
    assert_int_equal(pack_header_decode(file, (size_t)len, &seq), 0);
    assert_int_equal(seq, 1);
    for (int i = 0; i < 3; i++)
        expect_in_file(file, len, all[i], 1);
    uint64_t valid_end = 0;
    bool sealed = true;
    assert_int_equal(pack_scan(file, (size_t)len, NULL, NULL, &valid_end, &sealed), 0);
    assert_int_equal(valid_end, len);
    assert_false(sealed);
    free(file);

    /* The pack's row says how far it is applied. */
    assert_int_equal(db_packs(e.db, &packs, &npacks), 0);
    assert_int_equal(npacks, 1);
    assert_int_equal(packs[0].seq, 1);
    assert_int_equal(packs[0].size, off);
    assert_int_equal(packs[0].state, DB_PACK_OPEN);
    free(packs);

    /* Chunk rows: where in the block, and a share of the block's bytes by size. */
    struct db_loc loc;
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(db_chunk_find(e.db, a.recs[0].idx[i].id, &loc), 0);
        assert_int_equal(loc.sub, 5000 * i);
        assert_int_equal(loc.size, 5000);
        assert_int_equal(loc.stored, a.recs[0].len / 3);
    }
    assert_int_equal(db_segment_find(e.db, a.recs[1].id, &loc), 0);
    assert_int_equal(loc.size, MANIFEST_SEGMENT_HEADER + 3 * MANIFEST_ENTRY);
    /* Journal rows: applied with their batch, so nothing is pending for replay. */
    struct db_pending_entry *pending;
    size_t npending;
    uint64_t newest;
    assert_int_equal(db_pending_entries(e.db, 10, &pending, &npending), 0);
    assert_int_equal(npending, 0);
    free(pending);
    assert_int_equal(db_journal_newest(e.db, &newest), 0);
    assert_int_equal(newest, 2000);

    /* A later group is appended to the same pack, at its end. */
    rec_block(&d.recs[0], 4, 2, 100);
    group_init(&d, &e, 1, 0);
    packer_submit(e.pk, &d.g);
    run(&e);
    assert_int_equal(d.status, 0);
    assert_int_equal(d.recs[0].pack, 1);
    assert_int_equal(d.recs[0].offset, off);
    assert_true(d.located_at_done);
    packer_get_stats(e.pk, &st);
    assert_int_equal(st.appends, 2);
    file = read_pack(&e, 1, &len);
    assert_int_equal(len, off + d.recs[0].len);
    expect_in_file(file, len, &a, 1);
    expect_in_file(file, len, &d, 1);
    free(file);

    for (int i = 0; i < 3; i++)
        group_free(all[i]);
    group_free(&d);
    env_finish(&e);
}

/* A group whose own change fails is rolled back alone; the others' records are located. */
static void test_group_apply_fails(void **state)
{
    struct env e;
    struct tgroup a = {0}, b = {0};
    struct db_loc loc;

    env_init(&e, 16u << 20);
    rec_block(&a.recs[0], 10, 2, 300);
    group_init(&a, &e, 1, 0);
    a.apply_result = -EINVAL;
    rec_block(&b.recs[0], 11, 2, 300);
    group_init(&b, &e, 1, 0);
    packer_submit(e.pk, &a.g);
    packer_submit(e.pk, &b.g);
    run(&e);
    assert_int_equal(a.status, -EINVAL);
    assert_int_equal(b.status, 0);
    assert_true(a.applied && b.applied);
    /* Both went into the pack; only b's rows are in the database. */
    assert_int_equal(b.recs[0].offset, a.recs[0].offset + a.recs[0].len);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(db_chunk_find(e.db, a.recs[0].idx[i].id, &loc), DB_E_NOT_FOUND);
        assert_int_equal(db_chunk_find(e.db, b.recs[0].idx[i].id, &loc), 0);
    }
    assert_true(b.located_at_done);
    group_free(&a);
    group_free(&b);
    env_finish(&e);
}

/* ---- tickets --------------------------------------------------------------------------- */

static void test_ticket_order(void **state)
{
    struct env e;
    struct tgroup g1 = {0}, g2 = {0}, plain = {0}, g4 = {0}, g5 = {0}, g7 = {0};
    struct packer_stats st;

    env_init(&e, 16u << 20);
    uint64_t t1 = packer_reserve(e.pk), t2 = packer_reserve(e.pk);
    assert_true(t1 != 0 && t2 > t1);
    rec_entry(&g1.recs[0], 1, 100, false);
    group_init(&g1, &e, 1, t1);
    rec_entry(&g2.recs[0], 1, 200, true);
    group_init(&g2, &e, 1, t2);

    /* The later ticket first: it waits for the earlier one. */
    packer_submit(e.pk, &g2.g);
    run(&e);
    assert_int_equal(g2.done_calls, 0);
    assert_true(packer_busy(e.pk));
    packer_get_stats(e.pk, &st);
    assert_int_equal(st.appends, 0);
    /* A group without a ticket does not wait. */
    rec_block(&plain.recs[0], 3, 1, 64);
    group_init(&plain, &e, 1, 0);
    packer_submit(e.pk, &plain.g);
    run(&e);
    assert_int_equal(plain.done_calls, 1);
    assert_int_equal(plain.status, 0);
    assert_int_equal(g2.done_calls, 0);

    packer_submit(e.pk, &g1.g);
    run(&e);
    assert_int_equal(g1.status, 0);
    assert_int_equal(g2.status, 0);
    assert_true(g1.order < g2.order);
    assert_true(g1.recs[0].offset < g2.recs[0].offset);
    assert_true(g2.located_at_done);

    /* A ticket given up lets the next one through. */
    uint64_t t3 = packer_reserve(e.pk), t4 = packer_reserve(e.pk);
    rec_entry(&g4.recs[0], 2, 400, false);
    group_init(&g4, &e, 1, t4);
    packer_submit(e.pk, &g4.g);
    run(&e);
    assert_int_equal(g4.done_calls, 0);
    packer_cancel(e.pk, t3);
    run(&e);
    assert_int_equal(g4.done_calls, 1);
    assert_int_equal(g4.status, 0);

    /* Given up before the earlier one came: both pass in turn, and later ones too. */
    uint64_t t5 = packer_reserve(e.pk), t6 = packer_reserve(e.pk);
    packer_cancel(e.pk, t6);
    rec_entry(&g5.recs[0], 3, 500, false);
    group_init(&g5, &e, 1, t5);
    packer_submit(e.pk, &g5.g);
    run(&e);
    assert_int_equal(g5.status, 0);
    assert_int_equal(g5.done_calls, 1);
    uint64_t t7 = packer_reserve(e.pk);
    assert_true(t7 > t6);
    rec_entry(&g7.recs[0], 3, 700, true);
    group_init(&g7, &e, 1, t7);
    packer_submit(e.pk, &g7.g);
    run(&e);
    assert_int_equal(g7.done_calls, 1);
    assert_int_equal(g7.status, 0);
    assert_false(packer_busy(e.pk));

    struct tgroup *all[] = {&g1, &g2, &plain, &g4, &g5, &g7};
    for (size_t i = 0; i < 6; i++)
        group_free(all[i]);
    env_finish(&e);
}

/* ---- sealing ----------------------------------------------------------------------------- */

/*
 * Pack `seq` is sealed: the database says so with its whole size, and its
 * trailer and index (storage/pack.h) list exactly the records of `groups`.
 */
static void expect_sealed(struct env *e, uint64_t seq, struct tgroup *const *groups, size_t n)
{
    struct pack_trailer t;
    struct pack_index_entry *idx;
    struct db_pack *packs;
    size_t npacks, nidx = 0, k = 0;
    ssize_t len;
    uint8_t *file = read_pack(e, seq, &len);
    uint64_t end = PACK_HEADER_SIZE, valid_end;
    bool sealed, found = false;

    assert_non_null(file);
    for (size_t g = 0; g < n; g++) {
        expect_in_file(file, len, groups[g], seq);
        for (size_t i = 0; i < groups[g]->g.nrecs; i++) {
            const struct packer_rec *r = &groups[g]->recs[i];
            nidx += r->nidx;
            if (r->offset + r->len > end)
                end = r->offset + r->len;
        }
    }
    assert_int_equal(pack_trailer_parse(file + len - PACK_TRAILER_SIZE, (uint64_t)len, &t), 0);
    assert_int_equal(t.seq, seq);
    assert_int_equal(t.index_off, end);
    assert_int_equal(t.count, nidx);
    assert_int_equal((uint64_t)len, end + pack_index_size(nidx));
    assert_int_equal(pack_index_parse(file + end, (size_t)len - PACK_TRAILER_SIZE - end, &t, &idx),
                     0);
    for (size_t g = 0; g < n; g++) {
        for (size_t i = 0; i < groups[g]->g.nrecs; i++) {
            const struct packer_rec *r = &groups[g]->recs[i];
            for (size_t j = 0; j < r->nidx; j++, k++) {
                assert_int_equal(idx[k].type, r->idx[j].type);
                assert_memory_equal(idx[k].id, r->idx[j].id, PROTO_HASH_LEN);
                assert_int_equal(idx[k].record_off, r->offset);
                assert_int_equal(idx[k].record_len, r->len);
                assert_int_equal(idx[k].sub_off, r->idx[j].sub_off);
                assert_int_equal(idx[k].raw_size, r->idx[j].raw_size);
            }
        }
    }
    free(idx);
    assert_int_equal(pack_scan(file, (size_t)len, NULL, NULL, &valid_end, &sealed), 0);
    assert_true(sealed);
    assert_int_equal(valid_end, end);
    free(file);

    assert_int_equal(db_packs(e->db, &packs, &npacks), 0);
    for (size_t i = 0; i < npacks; i++) {
        if (packs[i].seq == seq) {
            found = true;
            assert_int_equal(packs[i].state, DB_PACK_SEALED);
            assert_int_equal(packs[i].size, len);
        }
    }
    free(packs);
    assert_true(found);
}

static void test_seal_at_pack_size(void **state)
{
    struct env e;
    struct tgroup a = {0}, b = {0}, c = {0};
    struct packer_stats st;

    env_init(&e, 8192);
    /* Two groups in one batch that together pass pack_size: the batch stays whole. */
    rec_block(&a.recs[0], 20, 1, 5000);
    rec_entry(&a.recs[1], 5, 10, false);
    group_init(&a, &e, 2, 0);
    rec_block(&b.recs[0], 21, 2, 2000);
    rec_segment(&b.recs[1], 7);
    group_init(&b, &e, 2, 0);
    packer_submit(e.pk, &a.g);
    packer_submit(e.pk, &b.g);
    run(&e);
    assert_int_equal(a.status, 0);
    assert_int_equal(b.status, 0);
    assert_int_equal(b.recs[1].pack, 1);
    packer_get_stats(e.pk, &st);
    assert_int_equal(st.packs_sealed, 1);
    assert_int_equal(packer_open_seq(e.pk), 2);
    expect_sealed(&e, 1, (struct tgroup *const[]){&a, &b}, 2);

    /* The next record starts pack 2. */
    rec_block(&c.recs[0], 22, 1, 100);
    group_init(&c, &e, 1, 0);
    packer_submit(e.pk, &c.g);
    run(&e);
    assert_int_equal(c.status, 0);
    assert_int_equal(c.recs[0].pack, 2);
    assert_int_equal(c.recs[0].offset, PACK_HEADER_SIZE);
    assert_true(c.located_at_done);
    struct db_pack *packs;
    size_t n;
    assert_int_equal(db_packs(e.db, &packs, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(packs[1].seq, 2);
    assert_int_equal(packs[1].state, DB_PACK_OPEN);
    free(packs);
    group_free(&a);
    group_free(&b);
    group_free(&c);
    env_finish(&e);
}

static void count_cb(void *ctx)
{
    (*(int *)ctx)++;
}

struct rotate_ctx {
    int calls, second_calls, r1, r2;
};

static void rotate_during_append(struct after_kick *a)
{
    struct rotate_ctx *rc = a->ctx;

    rc->r1 = packer_rotate(a->env->pk, count_cb, &rc->calls);
    /* One rotation at a time. */
    rc->r2 = packer_rotate(a->env->pk, count_cb, &rc->second_calls);
}

static void test_rotate(void **state)
{
    struct env e;
    struct tgroup a = {0}, b = {0}, c = {0};
    struct rotate_ctx rc = {0};
    struct after_kick ak;
    int calls = 0;

    env_init(&e, 16u << 20);
    /* Nothing written yet: nothing to seal, and no callback. */
    assert_int_equal(packer_rotate(e.pk, count_cb, &calls), 1);
    run(&e);
    assert_int_equal(calls, 0);

    rec_block(&a.recs[0], 30, 2, 1000);
    group_init(&a, &e, 1, 0);
    packer_submit(e.pk, &a.g);
    run(&e);
    assert_int_equal(packer_rotate(e.pk, count_cb, &calls), 0);
    assert_int_equal(packer_open_seq(e.pk), 2);
    assert_int_equal(calls, 0); /* when the seal is written */
    run(&e);
    assert_int_equal(calls, 1);
    expect_sealed(&e, 1, (struct tgroup *const[]){&a}, 1);
    assert_int_equal(packer_rotate(e.pk, count_cb, &calls), 1);

    /* Asked while an append runs: the seal follows that append, which goes into the pack. */
    rec_block(&b.recs[0], 31, 1, 3000);
    rec_entry(&b.recs[1], 9, 99, false);
    group_init(&b, &e, 2, 0);
    after_kick_start(&ak, &e, rotate_during_append);
    ak.ctx = &rc;
    packer_submit(e.pk, &b.g);
    run(&e);
    assert_true(ak.appending);
    assert_int_equal(rc.r1, 0);
    assert_int_equal(rc.r2, 1);
    assert_int_equal(rc.calls, 1);
    assert_int_equal(rc.second_calls, 0);
    assert_int_equal(b.status, 0);
    assert_int_equal(b.recs[0].pack, 2);
    expect_sealed(&e, 2, (struct tgroup *const[]){&b}, 1);
    assert_int_equal(packer_open_seq(e.pk), 3);

    rec_block(&c.recs[0], 32, 1, 10);
    group_init(&c, &e, 1, 0);
    packer_submit(e.pk, &c.g);
    run(&e);
    assert_int_equal(c.recs[0].pack, 3);
    struct packer_stats st;
    packer_get_stats(e.pk, &st);
    assert_int_equal(st.packs_sealed, 2);
    group_free(&a);
    group_free(&b);
    group_free(&c);
    env_finish(&e);
}

/* ---- failed appends ------------------------------------------------------------------ */

struct failure {
    char packs_dir[PATH_MAX * 2], moved[PATH_MAX * 2], pack1[PATH_MAX * 2];
    struct tgroup *later;
};

static void submit_later(struct after_kick *a)
{
    struct failure *f = a->ctx;
    packer_submit(a->env->pk, &f->later->g);
}

/* The packs directory is a file: no pack can be created. Put the directory back. */
static void restore_dir(struct tgroup *t)
{
    struct failure *f = t->ctx;
    assert_int_equal(unlink(f->packs_dir), 0);
}

static void test_failed_append_new_pack(void **state)
{
    struct env e;
    struct tgroup a = {0}, b = {0};
    struct failure f = {.later = &b};
    struct after_kick ak;
    struct db_loc loc;
    ssize_t len;
    FILE *file;

    env_init(&e, 16u << 20);
    snprintf(f.packs_dir, sizeof(f.packs_dir), "%s/packs", e.root);
    file = fopen(f.packs_dir, "w");
    assert_non_null(file);
    fclose(file);

    rec_block(&a.recs[0], 40, 2, 500);
    group_init(&a, &e, 1, 0);
    a.on_done = restore_dir;
    a.ctx = &f;
    rec_block(&b.recs[0], 41, 2, 500);
    rec_entry(&b.recs[1], 4, 44, false);
    group_init(&b, &e, 2, 0);
    /* b is queued while a's append runs, and goes out after it failed. */
    after_kick_start(&ak, &e, submit_later);
    ak.ctx = &f;
    packer_submit(e.pk, &a.g);
    run(&e);
    assert_true(ak.appending);
    assert_int_equal(a.done_calls, 1);
    assert_true(a.status < 0);
    assert_false(a.applied);
    assert_int_equal(b.done_calls, 1);
    assert_int_equal(b.status, 0);
    assert_true(b.located_at_done);
    /* Nothing of a anywhere; b went to a new pack. */
    assert_int_equal(db_chunk_find(e.db, a.recs[0].idx[0].id, &loc), DB_E_NOT_FOUND);
    assert_int_equal(b.recs[0].offset, PACK_HEADER_SIZE);
    uint64_t bseq = b.recs[0].pack;
    assert_int_equal(packer_open_seq(e.pk), bseq);
    free(read_pack(&e, bseq, &len));
    assert_int_equal(len, b.recs[1].offset + b.recs[1].len);
    if (bseq != 1) {
        free(read_pack(&e, 1, &len));
        assert_int_equal(len, -1);
    }
    struct db_pack *packs;
    size_t n;
    assert_int_equal(db_packs(e.db, &packs, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(packs[0].seq, bseq);
    free(packs);
    group_free(&a);
    group_free(&b);
    env_finish(&e);
}

/* The open pack's file is gone for a moment: the append to it fails. Put it back. */
static void restore_pack(struct tgroup *t)
{
    struct failure *f = t->ctx;
    assert_int_equal(rename(f->moved, f->pack1), 0);
}

static void test_failed_append_open_pack(void **state)
{
    struct env e;
    struct tgroup a = {0}, b = {0}, c = {0};
    struct failure f = {.later = &c};
    struct after_kick ak;
    struct db_loc loc;
    uint8_t *file;
    ssize_t len;

    env_init(&e, 16u << 20);
    rec_block(&a.recs[0], 50, 1, 800);
    group_init(&a, &e, 1, 0);
    packer_submit(e.pk, &a.g);
    run(&e);
    assert_int_equal(a.status, 0);
    uint64_t end = a.recs[0].offset + a.recs[0].len;

    pack_path(&e, 1, f.pack1, sizeof(f.pack1));
    snprintf(f.moved, sizeof(f.moved), "%s/moved", e.dir);
    assert_int_equal(rename(f.pack1, f.moved), 0);
    rec_block(&b.recs[0], 51, 1, 800);
    rec_entry(&b.recs[1], 5, 55, false);
    group_init(&b, &e, 2, 0);
    b.on_done = restore_pack;
    b.ctx = &f;
    rec_block(&c.recs[0], 52, 2, 300);
    group_init(&c, &e, 1, 0);
    after_kick_start(&ak, &e, submit_later);
    ak.ctx = &f;
    packer_submit(e.pk, &b.g);
    run(&e);
    assert_true(ak.appending);
    assert_true(b.status < 0);
    assert_false(b.applied);
    assert_int_equal(c.status, 0);
    assert_true(c.located_at_done);
    /* c takes the place b could not: right after a, in the same pack. */
    assert_int_equal(c.recs[0].pack, 1);
    assert_int_equal(c.recs[0].offset, end);
    assert_int_equal(db_chunk_find(e.db, b.recs[0].idx[0].id, &loc), DB_E_NOT_FOUND);
    file = read_pack(&e, 1, &len);
    assert_int_equal(len, end + c.recs[0].len);
    expect_in_file(file, len, &a, 1);
    expect_in_file(file, len, &c, 1);
    free(file);
    struct db_pack *packs;
    size_t n;
    assert_int_equal(db_packs(e.db, &packs, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(packs[0].size, end + c.recs[0].len);
    free(packs);
    group_free(&a);
    group_free(&b);
    group_free(&c);
    env_finish(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_group_apply_fails),
        cmocka_unit_test(test_ticket_order),
        cmocka_unit_test(test_seal_at_pack_size),
        cmocka_unit_test(test_rotate),
        cmocka_unit_test(test_failed_append_new_pack),
        cmocka_unit_test(test_failed_append_open_pack),
    };
    return cmocka_run_group_tests_name("pack writer", tests, NULL, NULL);
}
