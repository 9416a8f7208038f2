#pragma once

/*
 * Resolved references, kept on the loop thread so a get of a hot document
 * needs no database lookup: a full hash or a name maps to what a get needs
 * (hash, name, size, mime, manifest root). Only small manifests are kept,
 * and the cache is bounded in bytes.
 *
 * Staleness: every change that can make an entry wrong invalidates it (an
 * add under a name, a delete of a document), and bumps the epoch. A lookup
 * that ran on a worker is only inserted if the epoch it started at is still
 * current, so a result read before a change never outlives that change.
 * Loop thread only.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/meta/db.h"

/* Manifests up to this size (bytes of root entries) are kept. */
#define REFCACHE_MAX_ROOT 1024u

struct refcache;

int refcache_new(struct refcache **out, size_t max_bytes);
struct refcache *refcache_free(struct refcache *rc);

uint64_t refcache_epoch(const struct refcache *rc);
/* Fills *doc (a copy the caller clears with db_doc_clear) and returns true on a hit. */
bool refcache_lookup(struct refcache *rc, const char *ref, size_t len, struct db_doc *doc);
/*
 * Remembers what `ref` resolved to, if the epoch is still `epoch` and ref is
 * a full hash or the name the document was found by.
 */
void refcache_insert(struct refcache *rc, const char *ref, size_t len, const struct db_doc *doc,
                     uint64_t epoch);
/* A name now points elsewhere. */
void refcache_forget_name(struct refcache *rc, const char *name);
/* A document is gone: every entry that resolves to it goes. */
void refcache_forget_doc(struct refcache *rc, const char *hash_hex);
/* The database changed in ways the store did not make (another writer's events): all go. */
void refcache_forget_all(struct refcache *rc);
