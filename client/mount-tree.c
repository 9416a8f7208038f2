/*
 * The tree `cairn mount` shows: what cairnd says a path is and what a
 * directory holds.
 *
 * Names are paths. A name shows at its path when it is PATH, /PATH or ./PATH
 * (what `cairn add -r .` makes) with PATH made of non-empty components other
 * than "." and ".." and no trailing '/'; other names (a//b, a/./b, a/../b,
 * a/) are left out, because a lookup could only find them by scanning every
 * name. When several of PATH, /PATH and ./PATH exist, the first of them in
 * that order is shown; when a name is also the directory of other names, the
 * file wins at that path. At the root, by-hash is the directory of
 * documents whatever names say.
 */

#include "client/mount.h"
#include "client/util.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Names asked for at a time: pages stay small whatever the tree. */
#define TREE_PAGE 128
/* Documents asked for at a time when by-hash is listed. */
#define BLOB_PAGE 500
/*
 * U+10FFFF, the greatest character: "dir/sub/" followed by it sorts after
 * every name under dir/sub/ whose next character is smaller, so a listing
 * that has seen the subdirectory can jump past its names.
 */
#define TREE_MAX_CHAR "\xf4\x8f\xbf\xbf"

/* What may stand before a name's path, in the order of precedence. */
static const char *const leaders[] = {"", "/", "./"};
#define NLEADERS ARRAY_SIZE(leaders)

/* A directory's path below `parent`: "a/b" + "c" or "" + "c". NULL when out of memory. */
static char *child_path(const char *parent, const char *name, size_t len)
{
    char *p;

    if (asprintf(&p, "%s%s%.*s", parent, parent[0] ? "/" : "", (int)len, name) < 0)
        return NULL;
    return p;
}

/* ---- talking to cairnd ---- */

struct client *mount_client(struct mount_fs *fs)
{
    struct client *c = pthread_getspecific(fs->client_key);

    if (c && client_connected(c))
        return c;
    client_free(c);
    pthread_setspecific(fs->client_key, NULL);
    if (client_connect(&c, fs->socket, 5000) < 0)
        return NULL;
    if (pthread_setspecific(fs->client_key, c) != 0) {
        client_free(c);
        return NULL;
    }
    return c;
}

int mount_errno(struct client *c, int rc)
{
    if (rc == -ENOMEM)
        return -ENOMEM;
    if (rc < 0)
        return -EIO; /* the connection broke; the next request makes a new one */
    if (rc == CLIENT_E_IO)
        return -client_error(c)->errnum;
    switch (client_error(c)->code) {
    case PROTO_E_NOT_FOUND:
        return -ENOENT;
    case PROTO_E_BUSY:
        return -EAGAIN;
    default:
        return -EIO;
    }
}

/*
 * client_list_req() on a working connection; once more on a new one if the
 * old one broke (cairnd restarted). The callbacks below tolerate seeing
 * items twice.
 */
static int list(struct mount_fs *fs, const struct client_list_req *req, client_doc_fn *fn,
                void *userdata)
{
    struct client *c = NULL;
    int r = -EIO;

    for (int tries = 0; tries < 2; tries++) {
        if (!(c = mount_client(fs)))
            return -EIO;
        r = client_list_req(c, req, fn, userdata);
        if (r >= 0)
            break;
    }
    return r < 0 || r == CLIENT_E_DAEMON ? mount_errno(c, r) : 0;
}

/* What a list item says; strings are copied so that they outlive the reply. */
struct item {
    char *name;
    char hash[PROTO_HASH_HEX + 1];
    uint64_t size;
    int64_t time;
    uint32_t mode; /* a name's file mode (0: none); `time` is then its mtime */
    bool bad;
};

static void item_clear(struct item *it)
{
    free(it->name);
    *it = (struct item){0};
}

/* `time_key`: "named" for names, "created" for documents. */
static int item_read(const msgpack_object *doc, const char *time_key, struct item *it)
{
    const char *name, *hash;
    size_t name_len, hash_len;
    uint64_t t = 0;

    item_clear(it);
    if (proto_get_str(doc, "hash", &hash, &hash_len) != 0 || hash_len != PROTO_HASH_HEX ||
        proto_get_uint(doc, "size", &it->size) != 0)
        return -EBADMSG;
    proto_get_uint(doc, time_key, &t); /* a time before 1970 shows as 1970 */
    it->time = t > INT64_MAX ? INT64_MAX : (int64_t)t;
    uint64_t mode;
    int64_t mtime;
    if (proto_get_uint(doc, "mode", &mode) == 0 && proto_file_mode_valid(mode) &&
        proto_get_int(doc, "mtime", &mtime) == 0) {
        it->mode = (uint32_t)mode;
        it->time = mtime / 1000000000 - (mtime % 1000000000 < 0);
    }
    memcpy(it->hash, hash, PROTO_HASH_HEX);
    if (proto_get_str(doc, "name", &name, &name_len) == 0 &&
        (memchr(name, '\0', name_len) || !(it->name = strndup(name, name_len))))
        return -EBADMSG;
    return 0;
}

static void take_first(void *userdata, const msgpack_object *doc)
{
    struct item *it = userdata;

    if (!it->name && !it->bad && item_read(doc, "named", it) < 0)
        it->bad = true;
}

/* Whether `name` exists exactly: the first name with it as prefix is itself. */
static int find_name(struct mount_fs *fs, const char *name, struct item *it)
{
    struct client_list_req req = {.mode = CLIENT_LIST_NAMES, .prefix = name, .limit = 1};
    int r;

    item_clear(it);
    r = list(fs, &req, take_first, it);
    if (r == 0 && it->bad)
        r = -EIO;
    if (r == 0 && (!it->name || strcmp(it->name, name) != 0))
        r = -ENOENT;
    return r;
}

/* A relative path of non-empty components, none "." or "..", without a trailing '/'. */
static bool path_canonical(const char *s)
{
    for (;;) {
        size_t n = strcspn(s, "/");
        if (n == 0 || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
            return false;
        if (!s[n])
            return true;
        s += n + 1;
    }
}

/* Whether some name shown at a path starts with `prefix` ("dir/"). */
struct dir_probe {
    size_t plen;
    bool found, bad;
    size_t seen;
    char *last;
};

static void probe_item(void *userdata, const msgpack_object *doc)
{
    struct dir_probe *p = userdata;
    const char *name;
    size_t len;

    p->seen++;
    if (proto_get_str(doc, "name", &name, &len) != 0 || len < p->plen || memchr(name, '\0', len)) {
        p->bad = true;
        return;
    }
    free(p->last);
    p->last = strndup(name, len);
    if (!p->last)
        p->bad = true;
    else if (path_canonical(p->last + p->plen))
        p->found = true;
}

static int dir_exists(struct mount_fs *fs, const char *prefix)
{
    struct client_list_req req = {.mode = CLIENT_LIST_NAMES, .prefix = prefix, .limit = 16};
    struct dir_probe p = {.plen = strlen(prefix)};
    _cleanup_free_ char *after = NULL;
    int r;

    /* Usually the first name decides; names left out (a//b) are paged past. */
    for (;;) {
        p.seen = 0;
        req.after = after;
        r = list(fs, &req, probe_item, &p);
        if (r == 0 && p.bad)
            r = -EIO;
        if (r < 0 || p.found || p.seen < req.limit)
            break;
        free(after);
        after = p.last;
        p.last = NULL;
    }
    free(p.last);
    return r < 0 ? r : p.found ? 0 : -ENOENT;
}

static int lookup_blob(struct mount_fs *fs, const char *hash, struct mount_node *out)
{
    const msgpack_object *reply;
    struct client *c = NULL;
    struct item it = {0};
    int r = -EIO;

    if (strlen(hash) != PROTO_HASH_HEX || strspn(hash, "0123456789abcdef") != PROTO_HASH_HEX)
        return -ENOENT;
    for (int tries = 0; tries < 2; tries++) {
        if (!(c = mount_client(fs)))
            return -EIO;
        r = client_stat(c, hash, &reply);
        if (r >= 0)
            break;
    }
    if (r != 0)
        return mount_errno(c, r);
    r = item_read(reply, "created", &it);
    /* A name of 64 hex digits is taken when no document has the hash: not this one. */
    if (r == 0 && strcmp(it.hash, hash) != 0)
        r = -ENOENT;
    if (r == 0)
        *out = (struct mount_node){.kind = MOUNT_BLOB, .size = it.size, .mtime = it.time};
    memcpy(out->hash, hash, sizeof(out->hash));
    item_clear(&it);
    return r == -EBADMSG ? -EIO : r;
}

int mount_lookup(struct mount_fs *fs, const struct mount_node *parent, const char *name,
                 struct mount_node *out)
{
    _cleanup_free_ char *path = NULL;
    struct item it = {0};
    int r;

    if (parent->kind == MOUNT_HASHDIR)
        return lookup_blob(fs, name, out);
    if (parent->kind != MOUNT_DIR)
        return -ENOTDIR;
    if (!parent->path[0] && strcmp(name, MOUNT_HASHDIR_NAME) == 0) {
        *out = (struct mount_node){.kind = MOUNT_HASHDIR};
        return 0;
    }
    if (!path_canonical(name) || strchr(name, '/'))
        return -ENOENT;
    if (!(path = child_path(parent->path, name, strlen(name))))
        return -ENOMEM;
    /* The file wins: PATH, /PATH, ./PATH, then the directories PATH/, /PATH/, ./PATH/. */
    for (size_t form = 0; form < 2 * NLEADERS; form++) {
        bool file = form < NLEADERS;
        _cleanup_free_ char *raw = NULL;
        if (asprintf(&raw, "%s%s%s", leaders[form % NLEADERS], path, file ? "" : "/") < 0) {
            raw = NULL;
            return -ENOMEM;
        }
        r = file ? find_name(fs, raw, &it) : dir_exists(fs, raw);
        if (r == 0 && file && S_ISDIR(it.mode)) {
            /* A directory added as itself (one that was empty): a directory of names. */
            *out = (struct mount_node){
                .kind = MOUNT_DIR, .path = path, .mtime = it.time, .mode = it.mode};
            path = NULL; /* handed over */
            item_clear(&it);
            return 0;
        }
        if (r == 0 && file) {
            *out = (struct mount_node){.kind = MOUNT_NAMED,
                                       .path = it.name,
                                       .size = it.size,
                                       .mtime = it.time,
                                       .mode = it.mode};
            memcpy(out->hash, it.hash, sizeof(out->hash));
            return 0; /* the name is handed over */
        }
        item_clear(&it);
        if (r == 0) {
            *out = (struct mount_node){.kind = MOUNT_DIR, .path = path, .mtime = fs->started};
            path = NULL; /* handed over */
            return 0;
        }
        if (r != -ENOENT)
            return r;
    }
    return -ENOENT;
}

int mount_check_current(struct mount_fs *fs, const struct mount_node *node)
{
    struct item it = {0};
    int r;

    if (node->kind != MOUNT_NAMED)
        return 0;
    r = find_name(fs, node->path, &it);
    if (r == 0 && strcmp(it.hash, node->hash) != 0)
        r = -ESTALE;
    item_clear(&it);
    /* Gone or moved on: ESTALE makes the kernel look the path up again. */
    return r == -ENOENT ? -ESTALE : r;
}

/* ---- listing a directory ---- */

static int dir_add(struct mount_dir *d, char *name, bool dir, uint64_t ino, bool link)
{
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 64;
        struct mount_dirent *v = realloc(d->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        d->v = v;
        d->cap = cap;
    }
    d->v[d->n] =
        (struct mount_dirent){.name = name, .dir = dir, .link = link, .ino = ino, .seq = d->n};
    d->n++;
    return 0;
}

void mount_dir_clear(struct mount_dir *d)
{
    for (size_t i = 0; i < d->n; i++)
        free(d->v[i].name);
    free(d->v);
    *d = (struct mount_dir){0};
}

/* One pass over the names under a prefix, page by page. */
struct scan {
    const struct mount_node *dir;
    struct mount_dir *out;
    size_t plen;
    /* The pass without a leader at the root leaves names with one to the other passes. */
    bool skip_led;
    char *last; /* the last name seen */
    char *skip; /* past the names of the last subdirectory seen */
    size_t seen;
    int err;
};

static void scan_set_skip(struct scan *s, const char *name, size_t upto)
{
    free(s->skip);
    if (asprintf(&s->skip, "%.*s" TREE_MAX_CHAR, (int)upto, name) < 0) {
        s->skip = NULL;
        s->err = -ENOMEM;
    }
}

static void scan_item(void *userdata, const msgpack_object *doc)
{
    struct scan *s = userdata;
    struct item it = {0};
    const char *rest;
    size_t first;
    char *child;

    s->seen++;
    if (s->err)
        return;
    if (item_read(doc, "named", &it) < 0 || !it.name || strlen(it.name) < s->plen) {
        s->err = -EIO;
        item_clear(&it);
        return;
    }
    free(s->last);
    s->last = it.name;
    rest = it.name + s->plen;
    if (s->skip_led && (rest[0] == '/' || strncmp(rest, "./", 2) == 0)) {
        scan_set_skip(s, it.name, rest[0] == '/' ? 1 : 2);
        return;
    }
    if (!path_canonical(rest))
        return;
    first = strcspn(rest, "/");
    /*
     * A name no file system can have (longer than NAME_MAX bytes): the kernel
     * would fail the whole listing for one such entry. Left out, with what is
     * under it; `cairn ls` shows it.
     */
    if (first > NAME_MAX) {
        if (rest[first])
            scan_set_skip(s, it.name, s->plen + first + 1);
        return;
    }
    if (!(child = strndup(rest, first))) {
        s->err = -ENOMEM;
        return;
    }
    if (!rest[first] && !S_ISDIR(it.mode)) {
        s->err = dir_add(s->out, child, false, mount_ino_of(MOUNT_NAMED, it.name, it.hash),
                         S_ISLNK(it.mode));
    } else {
        _cleanup_free_ char *path = child_path(s->dir->path, rest, first);
        s->err = path ? dir_add(s->out, child, true, mount_ino_of(MOUNT_DIR, path, NULL), false)
                      : -ENOMEM;
        if (rest[first])
            scan_set_skip(s, it.name, s->plen + first + 1);
    }
    if (s->err)
        free(child);
}

static int scan_prefix(struct mount_fs *fs, struct scan *s, const char *prefix)
{
    struct client_list_req req = {.mode = CLIENT_LIST_NAMES, .prefix = prefix, .limit = TREE_PAGE};
    int r;

    s->plen = strlen(prefix);
    for (;;) {
        s->seen = 0;
        r = list(fs, &req, scan_item, s);
        if (r == 0)
            r = s->err;
        if (r < 0 || s->seen < req.limit)
            break;
        /*
         * On from the last name, or past the subdirectory it is in. The
         * request is sent before its items replace these strings.
         */
        req.after = s->skip && strcmp(s->skip, s->last) > 0 ? s->skip : s->last;
    }
    free(s->last);
    free(s->skip);
    s->last = s->skip = NULL;
    return r;
}

static void take_blob(void *userdata, const msgpack_object *doc)
{
    struct scan *s = userdata;
    struct mount_dir *d = s->out;
    struct item it = {0};
    char *name;

    if (s->err)
        return;
    if (item_read(doc, "created", &it) < 0) {
        s->err = -EIO;
        item_clear(&it);
        return;
    }
    /* A page asked for again after cairnd went away repeats what came before. */
    if (d->n > 0 && strcmp(d->v[d->n - 1].name, it.hash) >= 0)
        return;
    if (!(name = strdup(it.hash)))
        s->err = -ENOMEM;
    else if ((s->err = dir_add(d, name, false, mount_ino_of(MOUNT_BLOB, NULL, it.hash), false)) < 0)
        free(name);
}

/* Replaces the page in `d` with the documents after `after` (NULL: the first ones). */
static int blob_page(struct mount_fs *fs, struct mount_dir *d, const char *after)
{
    struct client_list_req req = {.mode = CLIENT_LIST_DOCS, .limit = BLOB_PAGE, .after = after};
    struct scan s = {.out = d};
    int r;

    for (size_t i = 0; i < d->n; i++)
        free(d->v[i].name);
    d->n = 0;
    r = list(fs, &req, take_blob, &s);
    if (r == 0)
        r = s.err;
    d->last_page = d->n < BLOB_PAGE;
    return r;
}

int mount_dir_seek(struct mount_fs *fs, struct mount_dir *d, uint64_t i)
{
    char after[PROTO_HASH_HEX + 1];
    int r;

    if (!d->paged)
        return i < d->n ? 0 : 1;
    if (i < d->base) {
        /* Back to an earlier position (seekdir): from the start again. */
        d->base = 0;
        if ((r = blob_page(fs, d, NULL)) < 0)
            return r;
    }
    while (i >= d->base + d->n) {
        if (d->last_page || d->n == 0)
            return 1;
        snprintf(after, sizeof(after), "%s", d->v[d->n - 1].name);
        d->base += d->n;
        if ((r = blob_page(fs, d, after)) < 0)
            return r;
    }
    return 0;
}

/* By name; at one name a file before a directory, and the first found before later ones. */
static int dirent_cmp(const void *a, const void *b)
{
    const struct mount_dirent *x = a, *y = b;
    int c = strcmp(x->name, y->name);

    if (c)
        return c;
    if (x->dir != y->dir)
        return x->dir ? 1 : -1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void sort_unique(struct mount_dir *d)
{
    size_t out = 0;

    if (d->n == 0) /* an empty store: no array at all (qsort of NULL is undefined) */
        return;
    qsort(d->v, d->n, sizeof(*d->v), dirent_cmp);
    for (size_t i = 0; i < d->n; i++) {
        if (out > 0 && strcmp(d->v[out - 1].name, d->v[i].name) == 0) {
            free(d->v[i].name);
            continue;
        }
        d->v[out++] = d->v[i];
    }
    d->n = out;
}

int mount_list_dir(struct mount_fs *fs, const struct mount_node *dir, struct mount_dir *out)
{
    struct scan s = {.dir = dir, .out = out};
    bool root = dir->kind == MOUNT_DIR && !dir->path[0];
    int r = 0;

    *out = (struct mount_dir){0};
    if (dir->kind == MOUNT_HASHDIR) {
        /* The first page now, so that an unreachable cairnd fails the opendir. */
        out->paged = true;
        if ((r = blob_page(fs, out, NULL)) < 0)
            mount_dir_clear(out);
        return r;
    }
    for (size_t i = 0; dir->kind == MOUNT_DIR && i < NLEADERS && r == 0; i++) {
        _cleanup_free_ char *prefix = NULL;
        if (asprintf(&prefix, "%s%s%s", leaders[i], dir->path, root ? "" : "/") < 0) {
            prefix = NULL;
            r = -ENOMEM;
            break;
        }
        s.skip_led = root && i == 0;
        r = scan_prefix(fs, &s, prefix);
    }
    if (r < 0) {
        mount_dir_clear(out);
        return r;
    }
    sort_unique(out);
    if (root) {
        /* by-hash stands at the root whatever the names say. */
        for (size_t i = 0; i < out->n; i++) {
            if (strcmp(out->v[i].name, MOUNT_HASHDIR_NAME) == 0) {
                free(out->v[i].name);
                memmove(&out->v[i], &out->v[i + 1], (out->n - i - 1) * sizeof(*out->v));
                out->n--;
                break;
            }
        }
        char *name = strdup(MOUNT_HASHDIR_NAME);
        if (!name || dir_add(out, name, true, MOUNT_INO_HASHDIR, false) < 0) {
            free(name);
            mount_dir_clear(out);
            return -ENOMEM;
        }
    }
    return 0;
}
