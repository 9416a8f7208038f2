#pragma once

/*
 * The daemon object: owns the loop, the listening socket, the lock on the
 * data directory, the backend, the metadata database and the store, and runs
 * until SIGTERM or SIGINT. On a signal it stops accepting, answers new
 * requests with `shutting_down`, lets requests in progress finish, closes
 * every connection and returns.
 */

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

#include "daemon/app/config.h"
#include "daemon/base/reserve.h"

struct backend;
struct db;
struct gc;
struct packer;
struct readcache;
struct refresh;
struct search;
struct server;
struct store;

/* Expected outcomes of daemon_new (positive); the message is in `err`. */
enum {
    DAEMON_E_LOCKED = 1, /* another cairnd uses the data directory */
    DAEMON_E_SETUP,      /* socket, directories, database or backend setup failed */
};

/*
 * The daemon owns every part and hands each the others it uses (the
 * composition in daemon.c; ARCHITECTURE.md draws it).
 */
struct daemon {
    uv_loop_t loop;
    uv_pipe_t listener;
    uv_signal_t sig_term, sig_int;
    uv_timer_t stop_timer;
    uv_timer_t watchdog_timer; /* WATCHDOG=1 at half of WATCHDOG_USEC */
    uv_timer_t status_timer;   /* STATUS= when the connection count changed */
    uv_timer_t sweep_timer;    /* server_sweep() every second */
    struct backend *be;
    struct db *db;
    struct readcache *rc; /* remote backends only */
    struct packer *pk;
    struct store *store;
    struct search *search;
    struct gc *gc;
    struct refresh *refresh; /* the other writers' packs, while serving */
    struct server *srv;
    char replay_summary[512]; /* what recovery brought back from the packs */
    char key_used[33];        /* the key object that opened an encrypted store ("": plain) */
    uint64_t writer;          /* this daemon's writer id (DATA_DIR/writer) */
    bool owns_writer0;        /* writer 0's packs are its own too */
    bool db_renewed;          /* the database is made anew at this start (rebuild, format 2) */
    bool stale; /* another writer's gc removed what this database has: rebuilt at the next start */
    bool stopping, listening;
    bool activated;  /* the listener came from systemd (socket activation) */
    bool notify;     /* NOTIFY_SOCKET is set */
    bool ready_sent; /* READY=1 went out */
    unsigned status_ticks;
    unsigned status_conns; /* the count in the last STATUS= */
    int listen_fd;         /* the socket from systemd until it is opened, else -1 */
    bool upgraded;         /* the data directory was converted from format 1 at this start */
    int lock_fd;
    int spare_fd;           /* given up to refuse a client when descriptors run out (listen.c) */
    uint64_t shed_logged;   /* when a refusal for want of descriptors was last logged (ms) */
    struct reserve reserve; /* room for deletes and gc on a full disk */
    bool reserve_set;
    uv_work_t reserve_work; /* taking the reserve again once there is room */
    bool reserve_busy;
    unsigned sweep_ticks;
    char socket_path[sizeof(((struct config *)0)->socket_path)];
    char backend_desc[256];
    /*
     * --rebuild-index: the old database is set aside as
     * cairn.db.before-rebuild.<aside_stamp> and put back by daemon_free()
     * unless the rebuild succeeded, so that a rebuild cut short by a backend
     * that fails to read never leaves an emptier database in place.
     */
    bool rebuilding, rebuilt;
    long aside_stamp;
    char db_path[sizeof(((struct config *)0)->data_dir) + 16];
    char index_path[sizeof(((struct config *)0)->data_dir) + 16];
};

/*
 * With cfg->rebuild_index or cfg->upgrade the daemon does not listen: call
 * daemon_rebuild() instead of run.
 */
int daemon_new(struct daemon **out, const struct config *cfg, char *err, size_t err_len);
/* After a rebuild or upgrade: waits for the index, and says what came back from the packs. */
int daemon_rebuild(struct daemon *d, char *summary, size_t summary_len);
/* Runs until a stop signal; returns 0 after a clean stop. */
int daemon_run(struct daemon *d);
/* Stops serving, as SIGTERM does: the loop ends once the clients are gone. */
void daemon_stop(struct daemon *d);
/* Runs the loop until the background work is done and the search index has caught up. */
int daemon_drain(struct daemon *d);
struct daemon *daemon_free(struct daemon *d);
