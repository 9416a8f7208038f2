/*
 * The local backend's descriptor cache (see local-fdcache.h). The table is
 * small enough that a linear scan over the slots' hashes is faster than
 * anything cleverer, and it keeps eviction trivial.
 */
#include "storage/local/local-fdcache.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* FNV-1a: the scan compares hashes first and strings only on a match. */
static uint64_t key_hash(const char *key)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (const unsigned char *p = (const unsigned char *)key; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ull;
    }
    return h;
}

int local_fdcache_init(struct local_fdcache *c)
{
    memset(c, 0, sizeof(*c));
    return uv_mutex_init(&c->lock);
}

void local_fdcache_deinit(struct local_fdcache *c)
{
    for (size_t i = 0; i < LOCAL_FDCACHE_SIZE; i++) {
        struct local_fd *file = c->slots[i].file;
        if (file) {
            close(file->fd);
            free(file);
            c->slots[i].file = NULL;
        }
    }
    uv_mutex_destroy(&c->lock);
}

/* Under the lock. */
static struct local_fdcache_slot *find(struct local_fdcache *c, const char *key, uint64_t hash)
{
    for (size_t i = 0; i < LOCAL_FDCACHE_SIZE; i++) {
        struct local_fdcache_slot *s = &c->slots[i];
        if (s->file && s->hash == hash && strcmp(s->key, key) == 0)
            return s;
    }
    return NULL;
}

/*
 * Under the lock: takes the cache's reference away from a slot. Returns the
 * file when that was its last reference, for the caller to close after
 * unlocking.
 */
static struct local_fd *empty_slot(struct local_fdcache_slot *s)
{
    struct local_fd *file = s->file;

    s->file = NULL;
    return --file->refs == 0 ? file : NULL;
}

static void destroy(struct local_fd *file)
{
    if (file) {
        close(file->fd);
        free(file);
    }
}

struct local_fd *local_fdcache_lookup(struct local_fdcache *c, const char *key)
{
    uint64_t hash = key_hash(key);
    struct local_fdcache_slot *s;
    struct local_fd *file = NULL;

    uv_mutex_lock(&c->lock);
    s = find(c, key, hash);
    if (s) {
        s->last_use = ++c->clock;
        file = s->file;
        file->refs++;
    }
    uv_mutex_unlock(&c->lock);
    return file;
}

/*
 * Under the lock: caches `file` (which has the caller's reference) in a free
 * slot or in place of the least recently used one. Returns a file that lost
 * its last reference to the eviction, for the caller to close after
 * unlocking.
 */
static struct local_fd *insert(struct local_fdcache *c, const char *key, uint64_t hash,
                               struct local_fd *file)
{
    struct local_fdcache_slot *victim = NULL;
    struct local_fd *evicted = NULL;

    for (size_t i = 0; i < LOCAL_FDCACHE_SIZE; i++) {
        struct local_fdcache_slot *s = &c->slots[i];
        if (!s->file) {
            victim = s;
            break;
        }
        if (!victim || s->last_use < victim->last_use)
            victim = s;
    }
    if (victim->file)
        evicted = empty_slot(victim);
    victim->file = file;
    victim->hash = hash;
    victim->last_use = ++c->clock;
    /* Keys are shorter than BACKEND_MAX_KEY: the caller checked them. */
    strcpy(victim->key, key);
    file->refs++;
    return evicted;
}

int local_fdcache_open(struct local_fdcache *c, int root_fd, const char *key, struct local_fd **out)
{
    uint64_t hash = key_hash(key), drops;
    struct local_fdcache_slot *s;
    struct local_fd *file, *loser = NULL;
    int fd;

    *out = local_fdcache_lookup(c, key);
    if (*out)
        return 0;
    if (strlen(key) >= BACKEND_MAX_KEY)
        return -ENAMETOOLONG;
    uv_mutex_lock(&c->lock);
    drops = c->drops;
    uv_mutex_unlock(&c->lock);

    fd = openat(root_fd, key, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT || errno == ENOTDIR ? BACKEND_E_NOT_FOUND : -errno;
    file = malloc(sizeof(*file));
    if (!file) {
        close(fd);
        return -ENOMEM;
    }
    file->fd = fd;
    file->refs = 1;

    uv_mutex_lock(&c->lock);
    s = find(c, key, hash);
    if (s) {
        /* Another reader cached it meanwhile: use theirs, so there is one per key. */
        loser = file;
        file = s->file;
        file->refs++;
        s->last_use = ++c->clock;
    } else if (c->drops == drops) {
        loser = insert(c, key, hash, file);
    }
    uv_mutex_unlock(&c->lock);
    destroy(loser);
    *out = file;
    return 0;
}

void local_fdcache_release(struct local_fdcache *c, struct local_fd *file)
{
    bool last;

    uv_mutex_lock(&c->lock);
    last = --file->refs == 0;
    uv_mutex_unlock(&c->lock);
    if (last)
        destroy(file);
}

void local_fdcache_drop(struct local_fdcache *c, const char *key)
{
    uint64_t hash = key_hash(key);
    struct local_fdcache_slot *s;
    struct local_fd *file = NULL;

    uv_mutex_lock(&c->lock);
    c->drops++;
    s = find(c, key, hash);
    if (s)
        file = empty_slot(s);
    uv_mutex_unlock(&c->lock);
    destroy(file);
}
