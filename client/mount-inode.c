/*
 * The inode table of `cairn mount`: numbers derived from what a node is (see
 * mount.h), and the nodes the kernel holds references to, by number.
 */

#include "client/mount.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define INODE_BUCKETS_MIN 256

/* ---- inode numbers ---- */

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *s = p;

    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ULL; /* FNV-1a */
    }
    return h;
}

static uint64_t hash_str(uint64_t h, const char *s)
{
    return hash_bytes(h, s, strlen(s) + 1); /* the NUL separates the fields */
}

/* FNV's low bits are weak; the finaliser of splitmix64 spreads them. */
static uint64_t hash_end(uint64_t h)
{
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebULL;
    return h ^ (h >> 31);
}

#define FNV_BASIS 0xcbf29ce484222325ULL

uint64_t mount_ino_of(enum mount_kind kind, const char *path, const char *hash)
{
    uint64_t h = hash_bytes(FNV_BASIS, &(char){(char)('0' + kind)}, 1);

    if (kind == MOUNT_BLOB) {
        /* A SHA-256 is spread already: its first 16 digits will do. */
        char first[17];
        memcpy(first, hash, 16);
        first[16] = '\0';
        return strtoull(first, NULL, 16);
    }
    h = hash_str(h, path);
    if (kind == MOUNT_NAMED)
        h = hash_str(h, hash);
    return hash_end(h);
}

/* ---- the table ---- */

static bool same_node(const struct mount_node *a, const struct mount_node *b)
{
    if (a->kind != b->kind)
        return false;
    switch (a->kind) {
    case MOUNT_DIR:
        return strcmp(a->path, b->path) == 0;
    case MOUNT_NAMED:
        return strcmp(a->path, b->path) == 0 && strcmp(a->hash, b->hash) == 0;
    case MOUNT_BLOB:
        return strcmp(a->hash, b->hash) == 0;
    default:
        return true;
    }
}

static void free_client(void *c)
{
    client_free(c);
}

int mount_fs_init(struct mount_fs *fs, const char *socket)
{
    int r;

    *fs = (struct mount_fs){.socket = socket, .ino_of = mount_ino_of};
    fs->nbuckets = INODE_BUCKETS_MIN;
    fs->buckets = calloc(fs->nbuckets, sizeof(*fs->buckets));
    fs->homes = calloc(fs->nbuckets, sizeof(*fs->homes));
    if (!fs->buckets || !fs->homes) {
        free(fs->buckets);
        free(fs->homes);
        return -ENOMEM;
    }
    /* A thread's connection closes when the thread ends. */
    if ((r = pthread_key_create(&fs->client_key, free_client)) != 0) {
        free(fs->buckets);
        free(fs->homes);
        return -r;
    }
    pthread_mutex_init(&fs->lock, NULL);
    fs->root = (struct mount_node){.ino = MOUNT_INO_ROOT, .kind = MOUNT_DIR, .path = ""};
    fs->hashdir = (struct mount_node){.ino = MOUNT_INO_HASHDIR, .kind = MOUNT_HASHDIR};
    return 0;
}

void mount_fs_deinit(struct mount_fs *fs)
{
    for (size_t i = 0; i < fs->nbuckets; i++) {
        struct mount_node *n = fs->buckets[i], *next;
        for (; n; n = next) {
            next = n->next;
            free(n->path);
            free(n);
        }
    }
    free(fs->buckets);
    free(fs->homes);
    fs->buckets = fs->homes = NULL;
    /* The workers have ended; this thread's connection, if it made one, is left. */
    free_client(pthread_getspecific(fs->client_key));
    pthread_key_delete(fs->client_key);
    pthread_mutex_destroy(&fs->lock);
}

static struct mount_node **bucket(struct mount_fs *fs, uint64_t ino)
{
    return &fs->buckets[hash_end(ino) & (fs->nbuckets - 1)];
}

static struct mount_node **home_bucket(struct mount_fs *fs, uint64_t home)
{
    return &fs->homes[hash_end(home) & (fs->nbuckets - 1)];
}

static struct mount_node *find(struct mount_fs *fs, uint64_t ino)
{
    if (ino == MOUNT_INO_ROOT)
        return &fs->root;
    if (ino == MOUNT_INO_HASHDIR)
        return &fs->hashdir;
    for (struct mount_node *n = *bucket(fs, ino); n; n = n->next) {
        if (n->ino == ino)
            return n;
    }
    return NULL;
}

int mount_node_get(struct mount_fs *fs, uint64_t ino, struct mount_node *copy)
{
    struct mount_node *n;
    int r = 0;

    pthread_mutex_lock(&fs->lock);
    n = find(fs, ino);
    if (!n) {
        r = -ESTALE;
    } else {
        *copy = *n;
        copy->next = NULL;
        if (n->path && !(copy->path = strdup(n->path)))
            r = -ENOMEM;
    }
    pthread_mutex_unlock(&fs->lock);
    return r;
}

/* Doubles the buckets when the chains grow long; failing to is harmless. */
static void maybe_grow(struct mount_fs *fs)
{
    size_t old = fs->nbuckets;
    struct mount_node **prev = fs->buckets, **prev_homes = fs->homes, **grown, **grown_homes;

    if (fs->nnodes < old * 2)
        return;
    grown = calloc(old * 2, sizeof(*grown));
    grown_homes = calloc(old * 2, sizeof(*grown_homes));
    if (!grown || !grown_homes) {
        free(grown);
        free(grown_homes);
        return;
    }
    fs->buckets = grown;
    fs->homes = grown_homes;
    fs->nbuckets = old * 2;
    for (size_t i = 0; i < old; i++) {
        for (struct mount_node *n = prev[i], *next; n; n = next) {
            next = n->next;
            struct mount_node **b = bucket(fs, n->ino);
            n->next = *b;
            *b = n;
        }
        for (struct mount_node *n = prev_homes[i], *next; n; n = next) {
            next = n->hnext;
            struct mount_node **h = home_bucket(fs, n->home);
            n->hnext = *h;
            *h = n;
        }
    }
    free(prev);
    free(prev_homes);
}

static struct mount_node *node_ref(struct mount_fs *fs, const struct mount_node *want)
{
    struct mount_node *n;
    uint64_t ino, home;

    if (want->kind == MOUNT_HASHDIR || (want->kind == MOUNT_DIR && !want->path[0])) {
        n = want->kind == MOUNT_HASHDIR ? &fs->hashdir : &fs->root;
        n->nlookup++;
        return n;
    }
    home = fs->ino_of(want->kind, want->path, want->hash);
    for (n = *home_bucket(fs, home); n; n = n->hnext) {
        if (n->home == home && same_node(n, want)) {
            /* The same version again: the time it got its name may be newer. */
            n->mtime = want->mtime;
            n->mode = want->mode;
            n->nlookup++;
            return n;
        }
    }
    /* Another identity on the number: the next free one, for as long as that one lives. */
    for (ino = home; ino <= MOUNT_INO_HASHDIR || find(fs, ino); ino++)
        ;
    n = malloc(sizeof(*n));
    if (!n)
        return NULL;
    *n = *want;
    n->path = want->path ? strdup(want->path) : NULL;
    if (want->path && !n->path) {
        free(n);
        return NULL;
    }
    n->ino = ino;
    n->home = home;
    n->nlookup = 1;
    struct mount_node **b = bucket(fs, ino), **h = home_bucket(fs, home);
    n->next = *b;
    *b = n;
    n->hnext = *h;
    *h = n;
    fs->nnodes++;
    maybe_grow(fs);
    return n;
}

int mount_node_ref(struct mount_fs *fs, const struct mount_node *want, uint64_t *ino)
{
    struct mount_node *n;

    pthread_mutex_lock(&fs->lock);
    n = node_ref(fs, want);
    if (n)
        *ino = n->ino;
    pthread_mutex_unlock(&fs->lock);
    return n ? 0 : -ENOMEM;
}

void mount_node_forget(struct mount_fs *fs, uint64_t ino, uint64_t count)
{
    struct mount_node **p, *n;

    if (ino == MOUNT_INO_ROOT || ino == MOUNT_INO_HASHDIR)
        return;
    pthread_mutex_lock(&fs->lock);
    for (p = bucket(fs, ino); (n = *p); p = &n->next) {
        if (n->ino != ino)
            continue;
        n->nlookup = count < n->nlookup ? n->nlookup - count : 0;
        if (n->nlookup == 0) {
            struct mount_node **h = home_bucket(fs, n->home);
            *p = n->next;
            while (*h != n)
                h = &(*h)->hnext;
            *h = n->hnext;
            free(n->path);
            free(n);
            fs->nnodes--;
        }
        break;
    }
    pthread_mutex_unlock(&fs->lock);
}
