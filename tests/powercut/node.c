/* powercutfs's tree: see node.h. */
#define FUSE_USE_VERSION 31

#include "node.h"

#include <errno.h>
#include <fuse.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct nodes nodes;

/* ---- nodes and directory entries ---------------------------------------------- */

static void entries_clear(struct entries *e, bool current);

void node_unref(struct node *nd)
{
    if (!nd || --nd->refs > 0)
        return;
    if (nd->prev)
        nd->prev->next = nd->next;
    else
        nodes.all = nd->next;
    if (nd->next)
        nd->next->prev = nd->prev;
    content_clear(&nd->cur);
    content_clear(&nd->dur);
    entries_clear(&nd->cur_e, true);
    entries_clear(&nd->dur_e, false);
    free(nd);
}

struct node *node_new(mode_t mode, const struct fuse_context *owner)
{
    struct node *nd = calloc(1, sizeof(*nd));

    if (!nd)
        return NULL;
    nd->mode = mode;
    nd->uid = owner ? owner->uid : getuid();
    nd->gid = owner ? owner->gid : getgid();
    nd->ino = ++nodes.next_ino;
    clock_gettime(CLOCK_REALTIME, &nd->mtime);
    nd->ctime = nd->mtime;
    nd->next = nodes.all;
    if (nodes.all)
        nodes.all->prev = nd;
    nodes.all = nd;
    return nd;
}

void node_touch(struct node *nd)
{
    clock_gettime(CLOCK_REALTIME, &nd->mtime);
    nd->ctime = nd->mtime;
    nd->dirty = true;
}

struct entry *entries_find(const struct entries *e, const char *name)
{
    for (size_t i = 0; i < e->n; i++) {
        if (strcmp(e->v[i].name, name) == 0)
            return &e->v[i];
    }
    return NULL;
}

int entries_add(struct entries *e, const char *name, struct node *nd, bool current)
{
    char *copy;

    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 8;
        struct entry *v = realloc(e->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        e->v = v;
        e->cap = cap;
    }
    if (!(copy = strdup(name)))
        return -ENOMEM;
    e->v[e->n++] = (struct entry){copy, nd};
    nd->refs++;
    if (current)
        nd->nlink++;
    return 0;
}

void entries_remove(struct entries *e, struct entry *ent, bool current)
{
    struct node *nd = ent->node;

    free(ent->name);
    *ent = e->v[--e->n];
    if (current)
        nd->nlink--;
    node_unref(nd);
}

static void entries_clear(struct entries *e, bool current)
{
    while (e->n > 0)
        entries_remove(e, &e->v[e->n - 1], current);
    free(e->v);
    *e = (struct entries){0};
}

static int entries_assign(struct entries *dst, const struct entries *src, bool current)
{
    struct entries copy = {0};
    int r = 0;

    for (size_t i = 0; r == 0 && i < src->n; i++)
        r = entries_add(&copy, src->v[i].name, src->v[i].node, current);
    if (r < 0) {
        entries_clear(&copy, current);
        return r;
    }
    entries_clear(dst, current);
    *dst = copy;
    return 0;
}

int node_sync(struct node *nd)
{
    int r;

    if (!nd->dirty)
        return 0;
    r = S_ISDIR(nd->mode) ? entries_assign(&nd->dur_e, &nd->cur_e, false)
                          : content_assign(&nd->dur, &nd->cur);
    if (r == 0) {
        nd->dirty = false;
        nodes.syncs++;
    }
    return r;
}

int node_revert(struct node *nd)
{
    int r;

    if (!nd->dirty)
        return 0;
    r = S_ISDIR(nd->mode) ? entries_assign(&nd->cur_e, &nd->dur_e, true)
                          : content_assign(&nd->cur, &nd->dur);
    if (r == 0) {
        nd->dirty = false;
        nodes.dropped++;
    }
    return r;
}

/*
 * Applies fn to every node. Each is held while the pass runs, so that a node
 * that a revert or sync drops from every list is freed only afterwards.
 */
int node_for_all(int (*fn)(struct node *))
{
    size_t n = 0, i = 0;
    struct node **held;
    int r = 0;

    for (struct node *nd = nodes.all; nd; nd = nd->next)
        n++;
    if (!(held = malloc((n ? n : 1) * sizeof(*held))))
        return -ENOMEM;
    for (struct node *nd = nodes.all; nd; nd = nd->next) {
        nd->refs++;
        held[i++] = nd;
    }
    for (i = 0; i < n; i++) {
        int e = fn(held[i]);
        if (e < 0 && r == 0)
            r = e;
    }
    for (i = 0; i < n; i++)
        node_unref(held[i]);
    free(held);
    return r;
}

/* ---- paths -------------------------------------------------------------------- */

struct node *node_lookup(const char *path)
{
    struct node *nd = nodes.root;
    char name[256];

    while (nd && *path) {
        size_t len;
        struct entry *ent;

        path += strspn(path, "/");
        len = strcspn(path, "/");
        if (len == 0)
            break;
        if (!S_ISDIR(nd->mode) || len >= sizeof(name))
            return NULL;
        memcpy(name, path, len);
        name[len] = '\0';
        ent = entries_find(&nd->cur_e, name);
        nd = ent ? ent->node : NULL;
        path += len;
    }
    return nd;
}

struct node *node_lookup_parent(const char *path, const char **name)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    struct node *nd;

    if (!slash || (size_t)(slash - path) >= sizeof(dir) || !slash[1])
        return NULL;
    memcpy(dir, path, slash - path);
    dir[slash - path] = '\0';
    nd = node_lookup(dir);
    *name = slash + 1;
    return nd && S_ISDIR(nd->mode) ? nd : NULL;
}
