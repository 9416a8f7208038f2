#pragma once

/*
 * What the files of recovery from the packs share (recovery_replay, declared
 * in recovery.h): replay.c runs it and holds the packs on the backend against
 * the database, replay-pack.c reads one pack (through its index, or record
 * by record), replay-events.c applies the journal entries found in time
 * order. Recovery runs before the daemon serves anyone, so it drives the
 * loop itself: each replay_* call here waits for its request. Not for use
 * outside these files.
 */

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/meta/db.h"
#include "daemon/recovery/recovery.h"
#include "daemon/format/objects.h"
#include "storage/backend.h"
#include "storage/pack/pack.h"

struct packer_resume;

/* Rows written per transaction. */
#define REPLAY_ROWS 1024

/* A row found in a pack, on its way to the database. */
struct replay_row {
    enum db_row_kind kind;
    uint8_t hash[PROTO_HASH_LEN];
    struct db_loc loc;
    uint8_t doc[PROTO_HASH_LEN]; /* entries */
    uint64_t time_ns;
    enum entry_op op;
};

struct replay_prefetch;

/* Packs read ahead at once, and bytes read ahead at each end of one (replay-prefetch.c). */
#define REPLAY_PREFETCH_WINDOW 64
#define REPLAY_PREFETCH_SPAN (64u * 1024)

struct replay {
    struct recovery_parts rv;
    struct replay_bridge *bridge; /* a refresh's, on its thread; NULL: at start, on the loop */
    unsigned own_widx;            /* this daemon's writer in the database (db.h) */
    bool rebuild;    /* the database started empty: every chunk is read back and checked */
    bool relocating; /* replay_relocate: a known pack read again for the rows of marked packs */
    struct replay_prefetch *prefetch; /* the window read ahead, or NULL */
    struct replay_row rows[REPLAY_ROWS];
    size_t nrows;
    /* The pack being read. */
    uint64_t seq;
    char key[BACKEND_MAX_KEY];
    struct pack_index_entry *index; /* all its records (to seal it, or to resume it) */
    size_t nindex, index_cap;
    /* Totals for the summary. */
    uint64_t packs_read, records, torn_bytes, damaged, sealed, added, deleted, refused;
    uint64_t max_time;
    /* What the entries applied changed, for the search index (a refresh tells it). */
    int64_t *changed; /* documents created, or whose names, tags or metadata changed */
    size_t nchanged, changed_cap;
    bool removed; /* some document was deleted */
};

/*
 * The store's encryption (keyring.c), first thing at start: the mode from
 * the bucket's config object, the master key unwrapped (seal_set_master)
 * or, for a new store asked to be encrypted, made. 0, or negative errno
 * (logged): -EKEYREJECTED for a wrong passphrase, -EPERM for a store that
 * cannot be opened as asked.
 */
int keyring_open(struct replay *rp);
/* Runs a key job (recovery.h); current is the key this daemon uses, updated by passwd. */
int keyring_job(struct replay *rp, struct recovery_key_job *job,
                char current[RECOVERY_KEY_ID_LEN + 1]);

/* ---- waiting for the loop (replay-loop.c) ---- */

/* A ranged read: 0 with a malloc'd buffer, BACKEND_E_*, or negative errno. */
int replay_get(struct replay *rp, const char *key, uint64_t off, uint64_t len, uint8_t **out,
               size_t *out_len);
/*
 * Reads ahead the packs `seqs` (of `sizes` bytes; at most
 * REPLAY_PREFETCH_WINDOW of them) with all their reads in flight at once,
 * and waits for them; replay_get() then serves from them what it can. 0 or
 * -ENOMEM (a failed read is only not served).
 */
int replay_prefetch_start(struct replay *rp, const uint64_t *seqs, const uint64_t *sizes, size_t n);
/* A malloc'd copy of [off, off + len) of `key` if it was read ahead. */
bool replay_prefetch_take(struct replay *rp, const char *key, uint64_t off, uint64_t len,
                          uint8_t **out, size_t *out_len);
void replay_prefetch_free(struct replay *rp);
/* A whole object (flags: BACKEND_PUT_*): 0, BACKEND_E_*, or negative errno. */
int replay_put(struct replay *rp, const char *key, const void *data, size_t len, unsigned flags);
/* An append at `off` (with no iovecs: cut the object there, and make it durable). */
int replay_append(struct replay *rp, const char *key, uint64_t off, const struct iovec *iov,
                  unsigned iovcnt);
/* One page of a listing (the caller fills in the prefix and cursor): its status. */
int replay_list(struct replay *rp, struct backend_list *list);
/* A delete; an object already gone is not a failure. */
int replay_del(struct replay *rp, const char *key);
/* One database transaction running `apply`. */
int replay_commit(struct replay *rp, int (*apply)(struct db_txn *txn, void *ctx), void *ctx);
/* Runs fn on a worker (where store reads may block) while the loop keeps turning. */
int replay_job(struct replay *rp, void (*fn)(void *ctx), void *ctx);
/* The same for n (at most REPLAY_JOBS_MAX) contexts at once, on as many workers. */
#define REPLAY_JOBS_MAX 16
int replay_jobs(struct replay *rp, void (*fn)(void *ctx), void *const *ctxs, size_t n);

/* Runs fn(ctx) on the loop thread (what belongs to it: the store's operations, the search index).
 */
void replay_on_loop(struct replay *rp, void (*fn)(void *ctx), void *ctx);
/*
 * Runs fn(ctx, c) on the loop thread, and waits until what it started there
 * calls replay_call_end(c) (on the loop thread too).
 */
struct replay_call;
void replay_start_on_loop(struct replay *rp, void (*fn)(void *ctx, struct replay_call *c),
                          void *ctx);
void replay_call_end(struct replay_call *c);

/*
 * A refresh's way to the loop: calls queued by its thread, started by the
 * loop when `async` fires (replay_bridge_run), each waited for under `lock`.
 */
struct replay_call;
struct replay_bridge {
    uv_async_t async;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct replay_call *queue;
};
/* On the loop thread: starts the calls queued. */
void replay_bridge_run(struct replay_bridge *b);

/* ---- the packs on the backend against the database (replay.c) ---- */

/* The number in the database of a writer's pack seq, its writer made known when new. */
int replay_pack_number(struct replay *rp, uint64_t writer, uint64_t seq, uint64_t *pack);
/*
 * A pack listed with `size` bytes, with its row in the database (p) or
 * without one (NULL): read as far as the database lacks it, and its row
 * brought up to date. `newest` and `resume` as for replay_read_pack.
 */
int replay_pack_listed(struct replay *rp, uint64_t pack, uint64_t size, const struct db_pack *p,
                       bool newest, struct packer_resume *resume);

/* ---- one pack (replay-pack.c) ---- */

/*
 * Brings the database up to what pack `seq` (`size` bytes on the backend)
 * holds beyond `known`, the size the database has for it (0: it knows none
 * of it). *state and *new_size are what its row must say now. Of this
 * daemon's `own` packs the newest, when open, is handed to the pack writer
 * in `resume`, and an older one left open is sealed. Another writer's pack
 * is only read: once it is sealed (or, of writer 0, record by record). 0, 1
 * when the pack is left alone (not a pack, unreadable as one, or another
 * writer's not sealed yet), BACKEND_E_* or negative errno.
 */
int replay_read_pack(struct replay *rp, uint64_t seq, uint64_t size, uint64_t known, bool own,
                     bool newest, struct packer_resume *resume, enum db_pack_state *state,
                     uint64_t *new_size);

/*
 * Reads the index of a sealed pack the database knows once more, so that the
 * rows still in marked packs move to the copies it holds (a gc's copies, read
 * before their mark was). A pack not known yet is left for its first read.
 */
int replay_relocate(struct replay *rp, uint64_t seq);

/* ---- the shared bucket's gc (marks.c) ---- */

/* What the refresh thread knows of the gc runs of the bucket; its own, but for what it hands on. */
struct refresh_marks {
    uint64_t own;      /* this daemon's writer id */
    uint64_t grace_ms; /* how long a run waits for writers that do not acknowledge it */
    /* The lease. */
    bool lease_held;
    uint64_t lease_ttl_ms;
    int64_t lease_server_s;    /* the server's time when it was taken (its lock's mtime) */
    uint64_t lease_mono_ms;    /* the local monotonic time then */
    uint64_t lease_renewed_ms; /* when it was last put */
    uint64_t lease_holder;     /* the writer that holds it, when taking it failed */
    int64_t skew_s;            /* local clock minus the server's, when it was taken */
    /* Found by the last pass. */
    uint64_t *ready; /* this daemon's published runs that may finish */
    size_t nready;
    bool solo;  /* no other writer is registered */
    bool stale; /* a run finished without this daemon while it had rows in its packs */
    bool fresh; /* the database was made from the bucket just now: it cannot be stale */
};

/*
 * After a pass has read the packs of `writers` (ids, this daemon's own
 * among them): follows their gc objects (learns new marks, acknowledges
 * them, forgets finished runs' packs) and finds this daemon's own runs that
 * may finish.
 */
int marks_pass(struct replay *rp, struct refresh_marks *mk, const uint64_t *writers,
               size_t nwriters);
/* Puts this daemon's run gen's mark (its row DB_MARK_OWN_COPIED) or done object (FINISHED). */
int marks_publish(struct replay *rp, struct refresh_marks *mk, uint64_t gen);
/* 0 (held), REFRESH_E_BUSY (lease_holder has it), BACKEND_E_* or negative errno. */
int marks_lease_take(struct replay *rp, struct refresh_marks *mk);
int marks_lease_renew(struct replay *rp, struct refresh_marks *mk);
int marks_lease_drop(struct replay *rp, struct refresh_marks *mk);

/* ---- journal entries (replay-events.c) ---- */

/* Applies every unapplied journal entry, oldest first. */
int replay_events(struct replay *rp);
