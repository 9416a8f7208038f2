#pragma once

/*
 * What the daemon's files share: daemon.c (the lifecycle and the
 * composition of the parts), assemble.c (opening the parts), listen.c (the
 * listening socket) and datadir.c (the data directory). Not for use outside
 * daemon/app.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct config;
struct daemon;
struct store_config;

/* ---- passphrase.c ---- */

/*
 * The passphrase of an encrypted store, from the sources the config (ctx,
 * a const struct config *) names (recovery_parts.passphrase): 0 with a
 * malloc'd copy the caller wipes, or negative errno with the reason logged.
 */
int app_passphrase(void *ctx, char **out, size_t *len);

/* ---- listen.c ---- */

/* Listens on the socket systemd passed, else binds `path`: 0, or DAEMON_E_* with err. */
int daemon_listen(struct daemon *d, const char *path, char *err, size_t err_len);
/* Stops accepting; a socket of our own is removed (systemd's stays with its unit). */
void daemon_stop_listening(struct daemon *d);

/* ---- assemble.c ---- */

/*
 * The metadata database (d->db): read-only with cfg->read_only; else one of
 * format 1 is converted first, one of format 2 made anew. 0 or
 * DAEMON_E_SETUP with err.
 */
int daemon_open_db(struct daemon *d, const struct config *cfg, const char *url, const char *db_path,
                   char *err, size_t err_len);
/* A remote backend's read cache (d->rc), where one is wanted: 0 or DAEMON_E_SETUP with err. */
int daemon_open_read_cache(struct daemon *d, const struct config *cfg, char *err, size_t err_len);
/*
 * The store and the parts built on it (d->store, d->pk, d->search,
 * d->refresh, d->gc; with cfg->read_only only the store and the search):
 * 0 or negative errno, -ESTALE, -ERANGE, -EKEYREJECTED or -ENOKEY as
 * recovery_replay.
 */
int daemon_open_store(struct daemon *d, const struct config *cfg, const struct store_config *scfg,
                      const char *index_path);

/* ---- datadir.c ---- */

/* Makes the data directory's own entry in its parent durable: 0 or negative errno. */
int daemon_sync_data_dir(const char *data_dir);
/* --read-only: a data directory that holds a store; 0, -errno or DAEMON_E_SETUP with err. */
int daemon_open_data_dir_read_only(const char *data_dir, char *err, size_t err_len);
/* Refuses a data directory another user owns or may write: 0, or DAEMON_E_SETUP with err. */
int daemon_check_data_dir(const char *data_dir, char *err, size_t err_len);
/*
 * Takes cairnd.lock in the data directory, writing this daemon's pid in it;
 * `shared` (cairnd --read-only): shared with other read-only daemons, no
 * pid written and no lock file made. 0, or DAEMON_E_* with err.
 */
int daemon_lock_data_dir(struct daemon *d, const char *data_dir, bool shared, char *err,
                         size_t err_len);
/*
 * Moves the database aside as DB.WHY.NOW (--rebuild-index: "before-rebuild";
 * a database of format 2: "format2") and removes the index. 0, or
 * DAEMON_E_SETUP.
 */
int daemon_set_aside_db(const char *db_path, const char *index_path, const char *why, long now,
                        char *err, size_t err_len);
/*
 * DB.stale: the database lacks what another writer's gc removed, and the
 * next start makes it anew from the bucket (the old one kept as DB.stale.NOW).
 * Mark: 0 or negative errno (errno set); is: whether it is marked; clear:
 * after the new database stands.
 */
int daemon_mark_stale(const char *db_path);
bool daemon_is_stale(const char *db_path);
void daemon_clear_stale(const char *db_path);
/* A failed rebuild: what it wrote goes aside, the old database comes back (closed db). */
void daemon_undo_rebuild(const struct daemon *d);
/*
 * This daemon's writer id (DATA_DIR/writer, made at the first start) and
 * whether writer 0's packs are its own: they are when the data directory
 * held a store from before writers had ids (`had_store` at that first start).
 * `read_only` makes no file: without one the id is 0. 0, or DAEMON_E_SETUP
 * with err.
 */
int daemon_writer(const char *data_dir, bool had_store, bool read_only, uint64_t *id, bool *owns0,
                  char *err, size_t err_len);
