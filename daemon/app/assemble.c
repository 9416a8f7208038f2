/*
 * The parts a daemon is made of, opened in turn by daemon_new (daemon.c):
 * the metadata database, the read cache, and the store with what is built
 * on it - read-only (cairnd --read-only) or writing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/app/app-int.h"
#include "daemon/app/daemon.h"
#include "daemon/app/systemd.h"
#include "daemon/base/log.h"
#include "daemon/gc/gc.h"
#include "daemon/meta/db.h"
#include "daemon/pack/packer.h"
#include "daemon/readcache/readcache.h"
#include "daemon/recovery/recovery.h"
#include "daemon/search/search.h"
#include "daemon/store/store.h"
#include "storage/backend.h"

/* --read-only: the database as it is, or why it cannot be served so. */
static int open_db_read_only(struct daemon *d, const char *db_path, char *err, size_t err_len)
{
    int r = db_open_read_only(&d->db, &d->loop, db_path);

    if (r == 0)
        return 0;
    snprintf(err, err_len, "metadata database %s: %s", db_path,
             r == -ENOENT ? "none here: the data directory holds no store"
             : r == -EUCLEAN
                 ? "its last commits are in its -wal file, which cannot be read on a read-only "
                   "file system: start cairnd once without --read-only where it may write"
             : r > 0 ? "of an older format: start cairnd once without --read-only to convert it"
                     : strerror(-r));
    return DAEMON_E_SETUP;
}

/*
 * Opens the metadata database; one of format 1 is converted first (on the
 * first start that finds it, or with --upgrade), and the store then rebuilds
 * the database from the new packs.
 */
int daemon_open_db(struct daemon *d, const struct config *cfg, const char *url, const char *db_path,
                   char *err, size_t err_len)
{
    int r;

    if (cfg->read_only)
        return open_db_read_only(d, db_path, err, err_len);
    r = db_new(&d->db, &d->loop, db_path);
    if (r == DB_E_OLD_FORMAT) {
        if (d->notify)
            sysd_notify("STATUS=upgrading a format 1 data directory");
        r = upgrade_run(&d->loop, d->be, url, db_path, cfg->pack_size, cfg->compression_level,
                        cfg->max_text, err, err_len);
        if (r < 0)
            return DAEMON_E_SETUP;
        d->upgraded = true;
        r = db_new(&d->db, &d->loop, db_path);
    }
    if (r == DB_E_FORMAT2) {
        /*
         * Format 2 ordered names by arrival and knew one writer: the
         * database is made anew from the packs, the old one kept aside.
         */
        long now = (long)time(NULL);
        if ((r = daemon_set_aside_db(db_path, d->index_path, "format2", now, err, err_len)) != 0)
            return r;
        log_info("the database was of format 2: made anew from the packs (the old one is "
                 "%s.format2.%ld)",
                 db_path, now);
        d->db_renewed = true;
        r = db_new(&d->db, &d->loop, db_path);
    }
    if (r != 0) {
        snprintf(err, err_len, "metadata database %s: %s", db_path,
                 r == DB_E_OLD_FORMAT ? "still format 1"
                 : r > 0              ? "of an older format"
                                      : strerror(-r));
        return DAEMON_E_SETUP;
    }
    return 0;
}

static int read_cache_pack_size(void *ctx, uint64_t pack, uint64_t *size)
{
    int r = db_pack_size(ctx, pack, size);

    return r == DB_E_NOT_FOUND ? -ENOENT : r > 0 ? -EIO : r;
}

static int read_cache_pack_key(void *ctx, uint64_t pack, char *key, size_t len)
{
    return db_pack_key(ctx, pack, key, len);
}

/*
 * A remote backend gets a read cache (the local backend reads its own files,
 * and the page cache keeps them). Not for --rebuild-index or --upgrade, which
 * read every pack once, nor for --read-only, which writes nothing.
 */
int daemon_open_read_cache(struct daemon *d, const struct config *cfg, char *err, size_t err_len)
{
    uint64_t size =
        cfg->read_cache_auto ? readcache_default_size(cfg->read_cache_dir) : cfg->read_cache_size;
    const char *msg;
    int r;

    /* A database made anew numbers packs anew: what the cache kept is another pack's. */
    if (d->db_renewed && (r = readcache_clear(cfg->read_cache_dir)) < 0)
        log_warn("read cache %s: cannot empty it: %s", cfg->read_cache_dir, strerror(-r));
    if (backend_has(d->be, BACKEND_CAP_READ_SYNC) || size == 0 || cfg->rebuild_index ||
        cfg->upgrade || cfg->read_only)
        return 0;
    r = readcache_new(&d->rc, &d->loop, d->be, cfg->read_cache_dir, size, read_cache_pack_size,
                      read_cache_pack_key, d->db, &msg);
    if (r < 0) {
        snprintf(err, err_len, "read cache %s: %s: %s", cfg->read_cache_dir,
                 msg ? msg : "cannot open", strerror(-r));
        return DAEMON_E_SETUP;
    }
    log_info("read cache in %s, up to %llu MiB", cfg->read_cache_dir,
             (unsigned long long)(size >> 20));
    return 0;
}

/* Whether the database knows a writer other than this daemon (and writer 0). */
static bool other_writers(struct daemon *d)
{
    uint64_t id;

    for (unsigned widx = 1; db_writer_id(d->db, widx, &id) == 0; widx++)
        if (id != d->writer)
            return true;
    return false;
}

/* A refresh found the database lacking what another writer's gc removed (recovery.h). */
static void on_stale(void *ctx)
{
    struct daemon *d = ctx;

    if (d->stale)
        return;
    d->stale = true;
    if (daemon_mark_stale(d->db_path) < 0)
        log_error("cannot mark the database for a rebuild: %s", strerror(errno));
    log_error("the database lacks what another daemon's gc removed while this one was away: "
              "cairnd stops, and its next start makes the database anew from the bucket");
    daemon_stop(d);
}

/*
 * --read-only: the store reads, its keys opened, and the search index as it
 * is. No replay (it would write what it recovered), no pack writer, no
 * refresh, no gc: what a crash left in the packs beyond the database shows
 * after a start that may write.
 */
static int open_store_read_only(struct daemon *d, const struct config *cfg,
                                const struct store_config *scfg, const char *index_path)
{
    struct recovery_parts parts = {.loop = &d->loop,
                                   .be = d->be,
                                   .db = d->db,
                                   .writer = d->writer,
                                   .passphrase = app_passphrase,
                                   .passphrase_ctx = (void *)cfg,
                                   .key_used = d->key_used};
    int r;

    if ((r = store_new(&d->store, &d->loop, d->be, d->db, NULL, scfg)) < 0)
        return r;
    parts.st = d->store;
    if ((r = recovery_open_keys(&parts)) < 0)
        return r;
    return search_new(&d->search, &d->loop, d->store, d->db, index_path, cfg->max_text);
}

/*
 * The store and what is built on it, each part given what it uses: the
 * store reads at once; recovery brings the database up to the packs (a
 * crash may have lost its last commits) through it; then the pack writer
 * goes on where the packs end, and the search index and gc join.
 */
int daemon_open_store(struct daemon *d, const struct config *cfg, const struct store_config *scfg,
                      const char *index_path)
{
    struct packer_resume resume = {0};
    struct packer_config pcfg = {cfg->pack_size, cfg->compression_level};
    struct recovery_parts parts = {.loop = &d->loop,
                                   .st = NULL,
                                   .be = d->be,
                                   .db = d->db,
                                   .writer = d->writer,
                                   .owns_writer0 = d->owns_writer0,
                                   .gc_grace_ms = cfg->gc_grace_ms,
                                   .fresh_db = d->db_renewed,
                                   .max_clock_skew_s = cfg->max_clock_skew_ms / 1000,
                                   .stale = on_stale,
                                   .stale_ctx = d,
                                   .encryption = cfg->encryption == CONFIG_ENC_ON ? RECOVERY_ENC_ON
                                                 : cfg->encryption == CONFIG_ENC_OFF
                                                     ? RECOVERY_ENC_OFF
                                                     : RECOVERY_ENC_UNSET,
                                   .passphrase = app_passphrase,
                                   .passphrase_ctx = (void *)cfg,
                                   .key_used = d->key_used};
    int r;

    if (cfg->read_only)
        return open_store_read_only(d, cfg, scfg, index_path);
    if ((r = store_new(&d->store, &d->loop, d->be, d->db, d->rc, scfg)) < 0)
        return r;
    parts.st = d->store;
    r = recovery_replay(&parts, cfg->rebuild_index, &resume, d->replay_summary,
                        sizeof(d->replay_summary));
    if (r == 0 && d->rc)
        readcache_forget_unknown(d->rc);
    if (r == 0)
        r = packer_new(&d->pk, &d->loop, d->be, d->db, &pcfg, &resume);
    free(resume.index);
    if (r < 0)
        return r;
    store_set_writer(d->store, d->pk);
    /* What dedup knows of the bucket's gc marks is as of the replay (store.h). */
    store_set_gc_grace(d->store, cfg->gc_grace_ms);
    store_set_bucket_seen(d->store, uv_hrtime() / 1000000);
    if (other_writers(d))
        packer_set_shared(d->pk);
    if ((r = search_new(&d->search, &d->loop, d->store, d->db, index_path, cfg->max_text)) < 0)
        return r;
    /* A rebuild or an upgrade ends once done: what others write meanwhile is not its business. */
    if (!cfg->rebuild_index && !cfg->upgrade &&
        (r = refresh_new(&d->refresh, &parts, recovery_own_writer(&resume),
                         cfg->refresh_interval_ms)) < 0)
        return r;
    if (d->refresh)
        refresh_set_packer(d->refresh, d->pk);
    struct gc_config gcfg = {.repack_below = cfg->repack_threshold,
                             .pack_size = cfg->pack_size,
                             .compression_level = cfg->compression_level,
                             .own_widx = recovery_own_writer(&resume),
                             .owns_writer0 = d->owns_writer0};
    return gc_new(&d->gc, &d->loop,
                  &(struct gc_parts){.rf = d->refresh,
                                     .st = d->store,
                                     .search = d->search,
                                     .db = d->db,
                                     .be = d->be,
                                     .pk = d->pk,
                                     .rc = d->rc,
                                     .reserve = &d->reserve},
                  &gcfg);
}
