#include "daemon/app/daemon.h"

#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "daemon/app/app-int.h"
#include "daemon/app/systemd.h"
#include "daemon/base/crash.h"
#include "daemon/base/log.h"
#include "daemon/gc/gc.h"
#include "daemon/meta/db.h"
#include "daemon/net/net.h"
#include "daemon/pack/packer.h"
#include "daemon/readcache/readcache.h"
#include "daemon/crypto/seal.h"
#include "daemon/recovery/recovery.h"
#include "daemon/search/search.h"
#include "daemon/store/store.h"
#include "proto/util.h"
#include "storage/backend.h"

/* How long a stop waits for requests in progress before dropping their clients. */
#define DAEMON_STOP_GRACE_MS 30000
/* How often STATUS= is brought up to date (only sent when it changed). */
#define DAEMON_STATUS_MS 1000
/* Before READY=1: the start-up time asked for (EXTEND_TIMEOUT_USEC) every ..._EVERY status ticks.
 */
#define DAEMON_EXTEND_EVERY 10
#define DAEMON_EXTEND_USEC 30000000ull

/* ---- systemd notifications ---- */

static void on_watchdog(uv_timer_t *t)
{
    sysd_notify("WATCHDOG=1");
}

static unsigned connections(const struct daemon *d)
{
    return d->srv ? server_connections(d->srv) : 0;
}

static void send_status(struct daemon *d)
{
    unsigned n = connections(d);

    if (d->stopping)
        sysd_notify("STATUS=stopping: %u connection%s left", n, n == 1 ? "" : "s");
    else
        sysd_notify("STATUS=serving %u connection%s", n, n == 1 ? "" : "s");
    d->status_conns = n;
}

static void reserve_work(uv_work_t *w)
{
    reserve_retake(&container_of(w, struct daemon, reserve_work)->reserve);
}

static void reserve_done(uv_work_t *w, int status)
{
    (void)status;
    container_of(w, struct daemon, reserve_work)->reserve_busy = false;
}

/* How often (in sweep ticks) the reserve, once given away, is looked at again. */
#define DAEMON_RESERVE_TICKS 5

static void on_sweep_tick(uv_timer_t *t)
{
    struct daemon *d = t->data;

    if (d->srv)
        server_sweep(d->srv);
    if (++d->sweep_ticks % DAEMON_RESERVE_TICKS == 0 && d->reserve_set && !d->reserve_busy &&
        !d->stopping && reserve_given(&d->reserve) &&
        uv_queue_work(&d->loop, &d->reserve_work, reserve_work, reserve_done) == 0)
        d->reserve_busy = true;
}

static void on_status_tick(uv_timer_t *t)
{
    struct daemon *d = t->data;

    d->status_ticks++;
    if (!d->ready_sent) {
        /* Start-up (replaying packs, an upgrade) is still making progress: ask for more time. */
        if (d->status_ticks % DAEMON_EXTEND_EVERY == 0)
            sysd_notify("EXTEND_TIMEOUT_USEC=%llu", DAEMON_EXTEND_USEC);
        return;
    }
    if (connections(d) != d->status_conns)
        send_status(d);
}

/*
 * With NOTIFY_SOCKET: the watchdog, when systemd asked for one, and the
 * status timer. Both are unreferenced: they never keep the loop alive.
 */
static void notify_start(struct daemon *d)
{
    uint64_t wd;

    d->notify = sysd_notify_enabled();
    if (!d->notify)
        return;
    sysd_notify("STATUS=starting");
    wd = sysd_watchdog_usec();
    if (wd) {
        uint64_t ms = wd / 2000 ? wd / 2000 : 1;
        uv_timer_start(&d->watchdog_timer, on_watchdog, ms, ms);
        uv_unref((uv_handle_t *)&d->watchdog_timer);
        log_debug("watchdog: WATCHDOG=1 every %llu ms", (unsigned long long)ms);
    }
    uv_timer_start(&d->status_timer, on_status_tick, DAEMON_STATUS_MS, DAEMON_STATUS_MS);
    uv_unref((uv_handle_t *)&d->status_timer);
}

static void notify_ready(struct daemon *d)
{
    if (!d->notify)
        return;
    d->ready_sent = true;
    d->status_conns = connections(d);
    sysd_notify("READY=1\nSTATUS=serving %u connection%s", d->status_conns,
                d->status_conns == 1 ? "" : "s");
}

static void close_handle(uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, NULL);
}

/*
 * No client is left. Closing the daemon's own handles lets uv_run return
 * once the work still queued (commits of abandoned requests) is done.
 */
static void on_clients_gone(void *ctx)
{
    struct daemon *d = ctx;

    close_handle((uv_handle_t *)&d->sig_term);
    close_handle((uv_handle_t *)&d->sig_int);
    close_handle((uv_handle_t *)&d->stop_timer);
}

static void on_stop_timeout(uv_timer_t *t)
{
    struct daemon *d = t->data;
    log_warn("requests still running after %d s; closing their connections",
             DAEMON_STOP_GRACE_MS / 1000);
    server_close_all(d->srv);
}

static void on_signal(uv_signal_t *s, int signum)
{
    struct daemon *d = s->data;

    if (d->stopping) {
        log_warn("second stop signal: closing every connection now");
        on_stop_timeout(&d->stop_timer);
        return;
    }
    log_info("received %s: stopping", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    daemon_stop(d);
}

/* The protocol's `shutdown`: what SIGTERM does. */
static void on_shutdown_op(void *ctx)
{
    struct daemon *d = ctx;

    log_info("a client asked for a shutdown: stopping");
    daemon_stop(d);
}

void daemon_stop(struct daemon *d)
{
    if (d->stopping)
        return;
    d->stopping = true;
    if (d->notify) {
        unsigned n = connections(d);
        sysd_notify("STOPPING=1\nSTATUS=stopping: %u connection%s left", n, n == 1 ? "" : "s");
        d->status_conns = n;
    }
    daemon_stop_listening(d);
    uv_timer_start(&d->stop_timer, on_stop_timeout, DAEMON_STOP_GRACE_MS, 0);
    uv_unref((uv_handle_t *)&d->stop_timer);
    server_stop(d->srv, on_clients_gone, d);
}

/*
 * "local" means the data directory's objects/; the backend itself only takes
 * full URLs. The [backend] options of a remote backend go after the URL's own
 * parameters, which therefore win (the backend keeps a parameter's first value).
 */
static int backend_url(const struct config *cfg, char *out, size_t len, char *err, size_t err_len)
{
    bool local = strcmp(cfg->backend_url, "local") == 0 ||
                 strncmp(cfg->backend_url, "local:", 6) == 0 ||
                 strncmp(cfg->backend_url, "file:", 5) == 0;
    int n;

    if (local && cfg->backend_params[0]) {
        snprintf(err, err_len,
                 "[backend] options other than url apply to remote (sftp, s3, r2) backends only");
        return -EINVAL;
    }
    if (strcmp(cfg->backend_url, "local") == 0)
        n = snprintf(out, len, "local:%s/objects", cfg->data_dir);
    else if (cfg->backend_params[0])
        n = snprintf(out, len, "%s%c%s", cfg->backend_url,
                     strchr(cfg->backend_url, '?') ? '&' : '?', cfg->backend_params + 1);
    else
        n = snprintf(out, len, "%s", cfg->backend_url);
    if (n < 0 || (size_t)n >= len) {
        snprintf(err, err_len, "backend URL too long");
        return -ENAMETOOLONG;
    }
    return 0;
}

static void log_backend(enum backend_log_level level, const char *msg)
{
    switch (level) {
    case BACKEND_LOG_ERROR:
        log_error("%s", msg);
        break;
    case BACKEND_LOG_WARN:
        log_warn("%s", msg);
        break;
    default:
        log_info("%s", msg);
        break;
    }
}

/* Lets a daemon serving a thousand clients have the descriptors for them. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int daemon_new(struct daemon **out, const struct config *cfg, char *err, size_t err_len)
{
    struct daemon *d = calloc(1, sizeof(*d));
    struct store_config scfg = {
        .compression_level = cfg->compression_level,
        .chunk_min = cfg->chunk_min,
        .chunk_avg = cfg->chunk_avg,
        .chunk_max = cfg->chunk_max,
        .max_text = cfg->max_text,
        .cache_size = cfg->cache_size,
    };
    char db_path[PATH_MAX + 16], index_path[PATH_MAX + 16], threads[16], url[PATH_MAX + 16];
    const char *msg;
    int r;

    if (!d) {
        snprintf(err, err_len, "out of memory");
        return DAEMON_E_SETUP;
    }
    d->lock_fd = -1;
    d->listen_fd = -1;
    d->spare_fd = -1;
    /* The threadpool size is read once, at the first queued job. */
    snprintf(threads, sizeof(threads), "%u", cfg->threads ? cfg->threads : 8);
    setenv("UV_THREADPOOL_SIZE", threads, 1);
    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();
    /*
     * Small buffers (chunk lists, records, segments' pieces) come and go on
     * many threads: they stay in the heap, where freed memory is reused
     * without new page faults (mapping every buffer over 128 KiB anew cost a
     * sixth of an ingest's CPU). Segments and blocks, 1 MiB and more, are
     * mapped and given back when freed, and two arenas keep freed memory of
     * one thread usable by the others: peak memory follows what is in use.
     */
    mallopt(M_MMAP_THRESHOLD, 1024 * 1024);
    mallopt(M_ARENA_MAX, 2);
    crash_init();

    uv_loop_init(&d->loop);
    uv_timer_init(&d->loop, &d->stop_timer);
    d->stop_timer.data = d;
    uv_signal_init(&d->loop, &d->sig_term);
    uv_signal_init(&d->loop, &d->sig_int);
    d->sig_term.data = d->sig_int.data = d;
    uv_timer_init(&d->loop, &d->watchdog_timer);
    uv_timer_init(&d->loop, &d->status_timer);
    uv_timer_init(&d->loop, &d->sweep_timer);
    d->watchdog_timer.data = d->status_timer.data = d->sweep_timer.data = d;
    *out = d;
    notify_start(d);
    /* A socket from systemd is checked first: a wrong one fails at once. */
    if (!cfg->rebuild_index && !cfg->upgrade && sysd_listen_fd(&d->listen_fd, err, err_len) < 0)
        return DAEMON_E_SETUP;

    /* --read-only makes, syncs and reserves nothing: the directory is taken as it is. */
    backend_set_read_only(cfg->read_only);
    if (cfg->read_only)
        r = daemon_open_data_dir_read_only(cfg->data_dir, err, err_len);
    else if ((r = util_mkdir_p(cfg->data_dir, 0700)) == 0)
        r = daemon_sync_data_dir(cfg->data_dir);
    if (r > 0)
        return r;
    if (r < 0) {
        snprintf(err, err_len, "data dir %s: %s", cfg->data_dir, strerror(-r));
        return DAEMON_E_SETUP;
    }
    r = daemon_check_data_dir(cfg->data_dir, err, err_len);
    if (r)
        return r;
    r = daemon_lock_data_dir(d, cfg->data_dir, cfg->read_only, err, err_len);
    if (r)
        return r;
    if (!cfg->read_only) {
        reserve_init(&d->reserve, cfg->data_dir);
        d->reserve_set = true;
        scfg.reserve = &d->reserve;
    }
    if (backend_url(cfg, url, sizeof(url), err, err_len) < 0)
        return DAEMON_E_SETUP;
    backend_set_log(log_backend);
    r = backend_new(&d->be, &d->loop, url, &msg);
    if (r < 0) {
        /*
         * The URL without its parameters: they may name key files. A message
         * says what failed; an errno after it would be the wrong word
         * ("Protocol error" for a certificate), so it comes only without one.
         */
        if (msg)
            snprintf(err, err_len, "backend %.*s: %s", (int)strcspn(url, "?"), url, msg);
        else
            snprintf(err, err_len, "backend %.*s: cannot open: %s", (int)strcspn(url, "?"), url,
                     strerror(-r));
        return DAEMON_E_SETUP;
    }
    d->be->ops->describe(d->be, d->backend_desc, sizeof(d->backend_desc));
    snprintf(db_path, sizeof(db_path), "%s/cairn.db", cfg->data_dir);
    snprintf(index_path, sizeof(index_path), "%s/search.db", cfg->data_dir);
    snprintf(d->db_path, sizeof(d->db_path), "%s", db_path);
    snprintf(d->index_path, sizeof(d->index_path), "%s", index_path);
    /* A data directory with a database and no writer id held a store from before writer ids. */
    r = daemon_writer(cfg->data_dir, access(db_path, F_OK) == 0, cfg->read_only, &d->writer,
                      &d->owns_writer0, err, err_len);
    if (r)
        return r;
    if (cfg->rebuild_index) {
        /* From here on daemon_free() puts the old database back unless the rebuild succeeds. */
        d->rebuilding = true;
        d->db_renewed = true;
        d->aside_stamp = (long)time(NULL);
        r = daemon_set_aside_db(db_path, index_path, "before-rebuild", d->aside_stamp, err,
                                err_len);
        if (r)
            return r;
    }
    bool stale = !cfg->rebuild_index && daemon_is_stale(db_path);
    if (stale && cfg->read_only) {
        snprintf(err, err_len,
                 "the database lacks what another daemon's gc removed: start cairnd once "
                 "without --read-only to make it anew from the bucket");
        return DAEMON_E_SETUP;
    }
    if (stale) {
        long now = (long)time(NULL);
        if ((r = daemon_set_aside_db(db_path, index_path, "stale", now, err, err_len)) != 0)
            return r;
        log_info("the database lacked what another daemon's gc removed: made anew from the "
                 "bucket (the old one is %s.stale.%ld)",
                 db_path, now);
        d->db_renewed = true;
    }
    if ((r = daemon_open_db(d, cfg, url, db_path, err, err_len)) != 0)
        return r;
    if ((r = daemon_open_read_cache(d, cfg, err, err_len)) != 0)
        return r;
    if (d->notify)
        sysd_notify("STATUS=replaying packs");
    if ((r = daemon_open_store(d, cfg, &scfg, index_path)) == -ESTALE) {
        if (daemon_mark_stale(db_path) < 0)
            log_error("cannot mark the database for a rebuild: %s", strerror(errno));
        snprintf(err, err_len,
                 "the database lacks what another daemon's gc removed while this one "
                 "was away: start cairnd again to make it anew from the bucket");
        return DAEMON_E_SETUP;
    }
    if (r == -ERANGE) {
        snprintf(err, err_len,
                 "this machine's clock is too far off the bucket server's (see the "
                 "log; [store] max_clock_skew)");
        return DAEMON_E_SETUP;
    }
    /* Encryption at rest (recovery.h, keyring.c): the log has said more. */
    if (r == -EKEYREJECTED || r == -ENOKEY) {
        snprintf(err, err_len, "%s",
                 r == -EKEYREJECTED
                     ? "wrong passphrase: no key of this encrypted store opens with it"
                     : "this store is encrypted and no passphrase was given");
        return DAEMON_E_SETUP;
    }
    if (r < 0) {
        snprintf(err, err_len, "%s: %s",
                 cfg->rebuild_index ? "rebuild: reading the packs from the backend failed"
                                    : "store",
                 strerror(-r));
        return DAEMON_E_SETUP;
    }
    if (stale || cfg->rebuild_index)
        daemon_clear_stale(db_path);
    if (d->replay_summary[0])
        log_info("recovered from the packs: %s", d->replay_summary);
    /* Format 1 objects left by an upgrade go once the new database stands. */
    if (!cfg->read_only)
        upgrade_cleanup(url);
    if (cfg->rebuild_index || cfg->upgrade)
        return 0;
    r = server_new(&d->srv, &(struct server_parts){
                                .loop = &d->loop,
                                .st = d->store,
                                .search = d->search,
                                .gc = d->gc,
                                .refresh = d->refresh,
                                .db = d->db,
                                .writer = d->writer,
                                .backend_desc = d->backend_desc,
                                .max_connections = cfg->max_connections,
                                .client_timeout_ms = cfg->client_timeout_ms,
                                .connection_memory = cfg->connection_memory,
                                .shutdown = on_shutdown_op,
                                .shutdown_ctx = d,
                            });
    if (r < 0) {
        snprintf(err, err_len, "out of memory");
        return DAEMON_E_SETUP;
    }
    if (cfg->metrics_listen[0] &&
        server_metrics_listen(d->srv, cfg->metrics_listen, err, err_len) < 0)
        return DAEMON_E_SETUP;
    /* Unreferenced: it never keeps the loop alive. */
    uv_timer_start(&d->sweep_timer, on_sweep_tick, 1000, 1000);
    uv_unref((uv_handle_t *)&d->sweep_timer);
    r = daemon_listen(d, cfg->socket_path, err, err_len);
    if (r)
        return r;
    uv_signal_start(&d->sig_term, on_signal, SIGTERM);
    uv_signal_start(&d->sig_int, on_signal, SIGINT);
    log_info("cairnd %s listening on %s%s, data in %s%s, backend %s", CAIRN_VERSION, d->socket_path,
             d->activated ? " (socket from systemd)" : "", cfg->data_dir,
             cfg->read_only ? " (read-only)" : "", d->backend_desc);
    return 0;
}

static void drained(void *ctx, int status)
{
    *(bool *)ctx = true;
}

/* Background work still running: pack writes, indexing, fetches, pack deletions. */
static bool busy(const struct daemon *d)
{
    return (d->pk && packer_busy(d->pk)) || (d->search && search_busy(d->search)) ||
           (d->gc && gc_busy(d->gc)) || (d->rc && readcache_busy(d->rc)) ||
           (d->refresh && refresh_busy(d->refresh));
}

int daemon_drain(struct daemon *d)
{
    bool caught_up = false;
    int r = search_wait(d->search, drained, &caught_up);

    if (r < 0)
        return r;
    while (!caught_up || busy(d))
        uv_run(&d->loop, UV_RUN_ONCE);
    return 0;
}

int daemon_rebuild(struct daemon *d, char *summary, size_t summary_len)
{
    /* The replay in daemon_new did the work; the index catches up before the exit. */
    int r = daemon_drain(d);

    struct db_totals t;

    d->rebuilt = r == 0;
    if (d->replay_summary[0]) {
        snprintf(summary, summary_len, "%s", d->replay_summary);
    } else if (db_totals(d->db, 0, &t) == 0 && t.documents > 0) {
        /* Nothing to replay: the database already held everything (--upgrade of a current store).
         */
        snprintf(summary, summary_len,
                 "the store is current: %" PRIu64 " document%s in %" PRIu64 " pack%s", t.documents,
                 t.documents == 1 ? "" : "s", t.packs, t.packs == 1 ? "" : "s");
    } else {
        snprintf(summary, summary_len, "the packs hold nothing");
    }
    return r;
}

int daemon_run(struct daemon *d)
{
    notify_ready(d);
    uv_run(&d->loop, UV_RUN_DEFAULT);
    log_info("stopped");
    return d->stale ? 1 : 0;
}

struct daemon *daemon_free(struct daemon *d)
{
    if (!d)
        return NULL;
    daemon_stop_listening(d);
    if (d->srv)
        server_metrics_close(d->srv);
    close_handle((uv_handle_t *)&d->sig_term);
    close_handle((uv_handle_t *)&d->sig_int);
    close_handle((uv_handle_t *)&d->stop_timer);
    close_handle((uv_handle_t *)&d->watchdog_timer);
    close_handle((uv_handle_t *)&d->status_timer);
    close_handle((uv_handle_t *)&d->sweep_timer);
    /* Let close callbacks and any queued work finish before freeing what they use. */
    uv_run(&d->loop, UV_RUN_DEFAULT);
    /* Each part before the parts it uses. */
    d->srv = server_free(d->srv);
    d->refresh = refresh_free(d->refresh);
    d->gc = gc_free(d->gc);
    d->search = search_free(d->search);
    d->store = store_free(d->store);
    d->pk = packer_free(d->pk);
    d->rc = readcache_free(d->rc);
    d->db = db_free(d->db);
    d->be = backend_free(d->be);
    uv_run(&d->loop, UV_RUN_DEFAULT); /* the backend's handles close asynchronously */
    if (uv_loop_close(&d->loop) != 0)
        log_error("event loop still has open handles at exit");
    seal_forget(); /* an encrypted store's master key, once nothing reads records any more */
    if (d->rebuilding && !d->rebuilt)
        daemon_undo_rebuild(d); /* before the lock goes */
    if (d->reserve_set)
        reserve_destroy(&d->reserve);
    if (d->lock_fd >= 0)
        close(d->lock_fd);
    if (d->listen_fd >= 0)
        close(d->listen_fd);
    free(d);
    return NULL;
}
