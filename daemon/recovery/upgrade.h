#pragma once

/*
 * Upgrading a data directory of format 1 (one file per chunk and per
 * journal entry, on the local backend) to packs: cairnd does it on the
 * first start that finds such a directory, or when asked with --upgrade.
 * After upgrade_run the directory holds packs and no database; the store's
 * replay then builds the new database from the packs.
 */

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

struct backend;

/*
 * Converts the format 1 database at db_path and the objects under the
 * local backend's directory into packs, then moves the old database aside
 * (cairn.db.v1-<time>). Runs the loop itself. 0, or negative errno with the
 * reason in err (the directory is then unchanged).
 */
int upgrade_run(uv_loop_t *loop, struct backend *be, const char *backend_url,
                const char *db_path, uint64_t pack_size, int level, size_t max_text, char *err,
                size_t err_len);
/* Removes format 1 objects left beside packs (after an upgrade, or one cut short). */
void upgrade_cleanup(const char *backend_url);
/* The directory of a local backend URL ("local:/path", "file:///path"). */
int upgrade_local_root(const char *url, char *root, size_t len);
