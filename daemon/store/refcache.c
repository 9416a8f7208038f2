#include "daemon/store/refcache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct rc_entry {
    struct rc_entry *hnext, *prev, *next;
    char *key;
    size_t key_len;
    struct db_doc doc; /* name and root owned */
    size_t cost;
};

struct refcache {
    struct rc_entry **buckets;
    size_t nbuckets, count, bytes, max_bytes;
    struct rc_entry *head, *tail; /* most recent first */
    uint64_t epoch;
};

/* FNV-1a: refs are short strings. */
static size_t hash_str(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (uint8_t)s[i];
        h *= 1099511628211ull;
    }
    return (size_t)h;
}

int refcache_new(struct refcache **out, size_t max_bytes)
{
    struct refcache *rc = calloc(1, sizeof(*rc));

    if (!rc)
        return -ENOMEM;
    rc->nbuckets = 1024;
    rc->buckets = calloc(rc->nbuckets, sizeof(*rc->buckets));
    if (!rc->buckets) {
        free(rc);
        return -ENOMEM;
    }
    rc->max_bytes = max_bytes;
    *out = rc;
    return 0;
}

static void entry_free(struct rc_entry *e)
{
    free(e->key);
    db_doc_clear(&e->doc);
    free(e);
}

struct refcache *refcache_free(struct refcache *rc)
{
    if (!rc)
        return NULL;
    for (struct rc_entry *e = rc->head, *next; e; e = next) {
        next = e->next;
        entry_free(e);
    }
    free(rc->buckets);
    free(rc);
    return NULL;
}

uint64_t refcache_epoch(const struct refcache *rc)
{
    return rc->epoch;
}

/* Hash refs are case-insensitive: they are kept in lower case. */
static bool normalize(const char *ref, size_t len, char *out)
{
    if (len != PROTO_HASH_HEX || !proto_is_hex(ref, len))
        return false;
    for (size_t i = 0; i < len; i++)
        out[i] = (char)(ref[i] >= 'A' && ref[i] <= 'F' ? ref[i] + 32 : ref[i]);
    out[len] = '\0';
    return true;
}

static struct rc_entry **find(struct refcache *rc, const char *key, size_t len)
{
    struct rc_entry **pp = &rc->buckets[hash_str(key, len) & (rc->nbuckets - 1)];
    while (*pp && ((*pp)->key_len != len || memcmp((*pp)->key, key, len) != 0))
        pp = &(*pp)->hnext;
    return pp;
}

static void list_unlink(struct refcache *rc, struct rc_entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        rc->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        rc->tail = e->prev;
}

static void list_front(struct refcache *rc, struct rc_entry *e)
{
    e->prev = NULL;
    e->next = rc->head;
    if (rc->head)
        rc->head->prev = e;
    rc->head = e;
    if (!rc->tail)
        rc->tail = e;
}

static void remove_entry(struct refcache *rc, struct rc_entry *e)
{
    struct rc_entry **pp = find(rc, e->key, e->key_len);
    *pp = e->hnext;
    list_unlink(rc, e);
    rc->bytes -= e->cost;
    rc->count--;
    entry_free(e);
}

static int doc_copy(struct db_doc *dst, const struct db_doc *src)
{
    *dst = (struct db_doc){0};
    dst->rowid = src->rowid;
    memcpy(dst->hash, src->hash, sizeof(dst->hash));
    memcpy(dst->mime, src->mime, sizeof(dst->mime));
    dst->size = src->size;
    dst->stored_size = src->stored_size;
    dst->created = src->created;
    dst->nchunks = src->nchunks;
    dst->depth = src->depth;
    dst->root_len = src->root_len;
    if (src->name && !(dst->name = strdup(src->name)))
        return -ENOMEM;
    dst->root = malloc(src->root_len ? src->root_len : 1);
    if (!dst->root) {
        db_doc_clear(dst);
        return -ENOMEM;
    }
    if (src->root_len)
        memcpy(dst->root, src->root, src->root_len);
    return 0;
}

bool refcache_lookup(struct refcache *rc, const char *ref, size_t len, struct db_doc *doc)
{
    char lower[PROTO_HASH_HEX + 1];
    struct rc_entry *e;

    if (rc->max_bytes == 0)
        return false;
    if (normalize(ref, len, lower))
        ref = lower;
    e = *find(rc, ref, len);
    if (!e || doc_copy(doc, &e->doc) < 0)
        return false;
    list_unlink(rc, e);
    list_front(rc, e);
    return true;
}

void refcache_insert(struct refcache *rc, const char *ref, size_t len, const struct db_doc *doc,
                     uint64_t epoch)
{
    char lower[PROTO_HASH_HEX + 1];
    struct rc_entry *e, **pp;
    bool by_hash = normalize(ref, len, lower);

    if (rc->max_bytes == 0 || epoch != rc->epoch || doc->root_len > REFCACHE_MAX_ROOT)
        return;
    /*
     * A prefix may become ambiguous with any add: only full hashes and names
     * are kept. A ref that looks like a hash is kept only when it is the
     * document's hash: a name that looks like one is answered by the
     * database, which tells the two apart (and a document added later with
     * that hash would take the ref over).
     */
    if (by_hash) {
        if (strcmp(lower, doc->hash) != 0)
            return;
        ref = lower;
    } else if (!doc->name || strlen(doc->name) != len || memcmp(doc->name, ref, len) != 0) {
        return;
    }
    pp = find(rc, ref, len);
    if (*pp)
        return;
    e = calloc(1, sizeof(*e));
    if (!e)
        return;
    e->key = strndup(ref, len);
    e->key_len = len;
    if (!e->key || doc_copy(&e->doc, doc) < 0) {
        free(e->key);
        free(e);
        return;
    }
    e->cost = sizeof(*e) + len + doc->root_len + (doc->name ? strlen(doc->name) : 0);
    e->hnext = NULL;
    *pp = e;
    list_front(rc, e);
    rc->bytes += e->cost;
    rc->count++;
    while (rc->bytes > rc->max_bytes && rc->tail && rc->tail != e)
        remove_entry(rc, rc->tail);
}

void refcache_forget_name(struct refcache *rc, const char *name)
{
    struct rc_entry **pp;

    rc->epoch++;
    if (!name || !name[0])
        return;
    pp = find(rc, name, strlen(name));
    if (*pp)
        remove_entry(rc, *pp);
}

void refcache_forget_doc(struct refcache *rc, const char *hash_hex)
{
    rc->epoch++;
    /* Names that resolved to it fall back to older versions: drop them all. */
    for (struct rc_entry *e = rc->head, *next; e; e = next) {
        next = e->next;
        if (strcmp(e->doc.hash, hash_hex) == 0)
            remove_entry(rc, e);
    }
}

void refcache_forget_all(struct refcache *rc)
{
    rc->epoch++;
    while (rc->head)
        remove_entry(rc, rc->head);
}
