#pragma once

/*
 * Recovery: bringing the metadata database up to what the packs hold, at
 * every start (replay.c) and from nothing for `cairnd --rebuild-index`; and
 * upgrading a data directory of an older format (upgrade.c). Both run before
 * the daemon serves anyone, driving the loop themselves.
 *
 * Replay: the packs are the log of the database (commits are not synced, the
 * pack appends are), so after a crash the database may lack its last
 * transactions. Recovery reads what it lacks from the packs, cuts torn
 * tails, seals packs a crash left open (but the newest, which the pack
 * writer continues), finishes interrupted pack deletions, and applies the
 * journal entries it found in time order.
 *
 * Upgrading a data directory of format 1 (one file per chunk and per
 * journal entry, on the local backend) to packs: cairnd does it on the
 * first start that finds such a directory, or when asked with --upgrade.
 * After upgrade_run the directory holds packs and no database; the store's
 * replay then builds the new database from the packs.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

struct backend;
struct db;
struct packer;
struct packer_resume;
struct store;

/* What a start asks of the store's encryption ([store] encryption, README). */
enum recovery_enc {
    RECOVERY_ENC_UNSET, /* whatever the store is */
    RECOVERY_ENC_OFF,   /* a new store stays plain; an encrypted one is still opened */
    RECOVERY_ENC_ON,    /* a new store is made encrypted; a plain one is refused */
};
/* A key object's id (daemon/crypto/keys.h), hex digits. */
#define RECOVERY_KEY_ID_LEN 32

/* What recovery works on; all stay the caller's. */
struct recovery_parts {
    uv_loop_t *loop;
    struct store *st; /* reads records back; its journal times start after the newest found */
    struct backend *be;
    struct db *db;
    /* This daemon's writer id (pack.h), and whether writer 0's packs are its own too. */
    uint64_t writer;
    bool owns_writer0;
    /* How long a gc run of the shared bucket waits for writers that do not acknowledge it. */
    uint64_t gc_grace_ms;
    /* The database was made anew at this start (from the bucket): it cannot lack anything. */
    bool fresh_db;
    /* Refuse to start (-ERANGE) when the local clock is further off the server's (0: never). */
    uint64_t max_clock_skew_s;
    /*
     * A refresh found a gc of another writer finished without this daemon
     * while it still had records in the packs that gc deleted: the database
     * may lack what that gc removed and must be rebuilt from the bucket (on
     * the loop thread; NULL: only logged).
     */
    void (*stale)(void *ctx);
    void *stale_ctx;
    /*
     * Encryption at rest: what is asked for, and where the passphrase comes
     * from, asked only when the store is (or is to be made) encrypted: 0
     * with a malloc'd passphrase the caller wipes, or negative errno, its
     * reason logged. key_used (RECOVERY_KEY_ID_LEN + 1 bytes, or NULL)
     * gets the id of the key object that opened the store ("": plain).
     */
    enum recovery_enc encryption;
    int (*passphrase)(void *ctx, char **pass, size_t *len);
    void *passphrase_ctx;
    char *key_used;
};

/*
 * Only opens the store's keys (cairnd --read-only): nothing is written to
 * the bucket or the database, and no key is made (parts->encryption is not
 * looked at). 0, -EKEYREJECTED, -ENOKEY or another negative errno (logged),
 * as recovery_replay.
 */
int recovery_open_keys(const struct recovery_parts *parts);
/*
 * Replays what the database lacks from the packs, every writer's, after
 * making this daemon's writer known in the bucket (writers/); with
 * `rebuild` (an empty database) every chunk is read back and checked. Only
 * this daemon's own packs are ever changed (a torn tail cut, an open pack
 * sealed); another writer's pack is read once it is sealed. Fills *resume
 * with where the pack writer goes on (its writer's index in the database,
 * its next pack, an open pack to continue), and summary with what came
 * back, in a sentence (empty when nothing). 0 or negative errno (logged);
 * -ESTALE when the database lacks what another writer's gc removed while
 * this daemon was away (it must be rebuilt), -ERANGE when this machine's
 * clock is further off the bucket server's than max_clock_skew_s.
 */
int recovery_replay(const struct recovery_parts *parts, bool rebuild, struct packer_resume *resume,
                    char *summary, size_t summary_len);
/* The index of this daemon's own writer in the database (after recovery_replay). */
unsigned recovery_own_writer(const struct packer_resume *resume);

/*
 * Converts the format 1 database at db_path and the objects under the
 * local backend's directory into packs, then moves the old database aside
 * (cairn.db.v1-<time>). Runs the loop itself. 0, or negative errno with the
 * reason in err (the directory is then unchanged).
 */
int upgrade_run(uv_loop_t *loop, struct backend *be, const char *backend_url, const char *db_path,
                uint64_t pack_size, int level, size_t max_text, char *err, size_t err_len);
/* ---- the writers of a bucket ---- */

/*
 * Each writer has an object of its own under writers/ ("writers/<id>", the
 * id in sixteen hex digits), put once, at its first start: how the others
 * learn that it exists before it has written a pack.
 */
#define RECOVERY_WRITERS_DIR "writers/"
/* The writer id of a key under writers/: 0, or -EINVAL. */
int recovery_writer_key_parse(const char *key, uint64_t *id);

/* ---- refresh: the other writers' packs, while serving ---- */

struct refresh;

struct refresh_writer {
    uint64_t id;
    unsigned widx;    /* its index in the database */
    uint64_t newest;  /* the newest of its packs this daemon knows (its seq) */
    uint64_t packs;   /* its packs a refresh read */
    uint64_t seen_ms; /* when its packs were last listed (monotonic ms; 0: never) */
};

/* The gc lease belongs to another writer (refresh_lease_take). */
#define REFRESH_E_BUSY 70

struct refresh_stats {
    uint64_t passes, failures;
    uint64_t added, deleted, refused; /* the other writers' entries applied */
    uint64_t last_ok_ms;              /* monotonic ms of the last pass that succeeded (0: none) */
};

/*
 * Starts the refresh of a daemon whose own writer has index own_widx: a
 * pass every interval_ms (0: only when asked), on a thread of its own, the
 * loop doing its requests and commits. 0 or negative errno.
 */
int refresh_new(struct refresh **out, const struct recovery_parts *parts, unsigned own_widx,
                uint64_t interval_ms);
/* Stops it (a running pass is waited for); its handles close asynchronously. Returns NULL. */
struct refresh *refresh_free(struct refresh *rf);
/* Once a pass finds another writer, the pack writer goes shared (packer_set_shared). */
void refresh_set_packer(struct refresh *rf, struct packer *pk);
/* A pass runs, or is asked for. */
bool refresh_busy(const struct refresh *rf);
/* cb(ctx, status) once a pass that starts after this call has ended. 0 or -ENOMEM. */
typedef void refresh_cb(void *ctx, int status);
int refresh_now(struct refresh *rf, refresh_cb *cb, void *ctx);
/* Counters, and a copy of the writers known (malloc'd, the caller frees it). */
void refresh_get_stats(struct refresh *rf, struct refresh_stats *out,
                       struct refresh_writer **writers, size_t *nwriters);
/* When the last pass that succeeded ended (monotonic ms; 0: none yet). */
uint64_t refresh_last_ok(const struct refresh *rf);

/*
 * The shared bucket's gc (marks.c), for gc, on the loop thread; each
 * callback comes on the loop thread.
 *
 * The lease: taken (0), another writer's (REFRESH_E_BUSY: see
 * refresh_lease_holder), or the backend's failure. While it is held the
 * refresh thread renews it; refresh_lease_ok says whether it still holds
 * for certain (renewed within half its time to live).
 */
int refresh_lease_take(struct refresh *rf, refresh_cb *cb, void *ctx);
int refresh_lease_drop(struct refresh *rf, refresh_cb *cb, void *ctx);
bool refresh_lease_ok(struct refresh *rf);
/* The lease's time to live for a grace period: a minute, less for grace periods under one. */
uint64_t refresh_lease_ttl(uint64_t grace_ms);
uint64_t refresh_lease_holder(struct refresh *rf);
/* Puts this daemon's run gen's mark, or its done object, as its row in the database says. */
int refresh_publish(struct refresh *rf, uint64_t gen, refresh_cb *cb, void *ctx);
/*
 * What the last pass found: this daemon's published runs that may finish
 * (malloc'd copy), and whether the bucket has no other writer.
 */
int refresh_gc_view(struct refresh *rf, uint64_t **ready, size_t *n, bool *solo);

/*
 * The key objects of an encrypted store (keyring.c; README "Encryption at
 * rest"), run on the refresh thread, where scrypt may take its time: list
 * them; add one for a new passphrase; remove one (never the last, nor the
 * one this daemon opened the store with); passwd: add one for a new
 * passphrase, then remove the one this daemon opened the store with, which
 * the new one replaces as its own.
 */
enum recovery_key_op {
    RECOVERY_KEY_LIST,
    RECOVERY_KEY_ADD,
    RECOVERY_KEY_REMOVE,
    RECOVERY_KEY_PASSWD,
};
struct recovery_key_info {
    char id[RECOVERY_KEY_ID_LEN + 1];
    int64_t created; /* unix time */
    uint64_t n;      /* scrypt's N, r and p */
    uint32_t r, p;
    bool current; /* the key this daemon opened the store with */
};
struct recovery_key_job {
    enum recovery_key_op op;
    char *pass; /* add, passwd: the new passphrase (malloc'd; the job wipes and frees it) */
    size_t plen;
    char id[RECOVERY_KEY_ID_LEN + 1]; /* remove: the key; add, passwd: the new key's id */
    struct recovery_key_info *keys;   /* list: the keys (malloc'd, the caller frees it) */
    size_t nkeys;
    char why[160]; /* the reason of a refusal */
};
/* Refusals of a key job (positive; why says more). */
enum {
    RECOVERY_KEY_E_PLAIN = 80, /* the store is not encrypted */
    RECOVERY_KEY_E_NO_KEY,     /* no such key object */
    RECOVERY_KEY_E_REFUSED,    /* the last key, or the one in use */
};
/* Runs job on the refresh thread; cb(ctx, status) on the loop: 0, RECOVERY_KEY_E_*, BACKEND_E_*,
 * -errno. */
int refresh_keys(struct refresh *rf, struct recovery_key_job *job, refresh_cb *cb, void *ctx);
/* Wipes and frees what a job holds (its passphrase and its list). */
void recovery_key_job_clear(struct recovery_key_job *job);

/* Removes format 1 objects left beside packs (after an upgrade, or one cut short). */
void upgrade_cleanup(const char *backend_url);
/* The directory of a local backend URL ("local:/path", "file:///path"). */
int upgrade_local_root(const char *url, char *root, size_t len);
