/*
 * One attempt of each backend operation on an SFTP session (worker threads).
 *
 * A put writes "<dir>/.tmp-<name>-<random>", syncs it with fsync@openssh.com,
 * renames it to its key, and syncs the directory the same way (OpenSSH
 * opens a directory like a file, so the extension reaches it too). SFTP
 * version 3's rename refuses an existing target, which is exactly a
 * create-only put; the rare overwriting put removes the old object first,
 * because libssh2 1.10 cannot send posix-rename@openssh.com. A server
 * without fsync@openssh.com gets the writes and the rename only: that is
 * logged once, and durability is then up to the server.
 */
#include "storage/sftp/sftp-int.h"
#include "proto/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool cancelled(const struct sftp_ctx *x)
{
    return atomic_load(x->cancel);
}

/* ---- put -------------------------------------------------------------------------- */

static int write_all(struct sftp_ctx *x, LIBSSH2_SFTP_HANDLE *h, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = libssh2_sftp_write(h, (const char *)p, n);
        if (w < 0)
            return sftp_status(x->conn, (int)w);
        if (w == 0)
            return sftp_status(x->conn, LIBSSH2_ERROR_SOCKET_SEND);
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* The iovecs in order, staged through the buffer so that each write call is large. */
static int write_iov(struct sftp_ctx *x, LIBSSH2_SFTP_HANDLE *h, const struct iovec *iov,
                     size_t iovcnt)
{
    size_t fill = 0;
    int r;

    for (size_t i = 0; i < iovcnt; i++) {
        const uint8_t *p = iov[i].iov_base;
        size_t n = iov[i].iov_len;
        while (n > 0) {
            size_t take = SFTP_WRITE_BUF - fill < n ? SFTP_WRITE_BUF - fill : n;
            memcpy(x->buf + fill, p, take);
            fill += take;
            p += take;
            n -= take;
            if (fill == SFTP_WRITE_BUF) {
                if (cancelled(x))
                    return -ECANCELED;
                if ((r = write_all(x, h, x->buf, fill)) != 0)
                    return r;
                fill = 0;
            }
        }
    }
    return fill ? write_all(x, h, x->buf, fill) : 0;
}

/* fsync@openssh.com on an open handle; a server without it is noted once and skipped. */
static int sync_handle(struct sftp_ctx *x, LIBSSH2_SFTP_HANDLE *h)
{
    int rc;

    if (atomic_load(x->no_fsync))
        return 0;
    rc = libssh2_sftp_fsync(h);
    if (rc == 0)
        return 0;
    rc = sftp_status(x->conn, rc);
    if (rc == -EOPNOTSUPP) {
        if (!atomic_exchange(x->no_fsync, true))
            backend_log(BACKEND_LOG_WARN, "sftp: the server does not support fsync@openssh.com; "
                                          "writes are not synced, durability is up to the server");
        return 0;
    }
    return rc;
}

static int sync_dir(struct sftp_ctx *x, const char *dir)
{
    LIBSSH2_SFTP_HANDLE *h;
    int r;

    if (atomic_load(x->no_fsync))
        return 0;
    h = libssh2_sftp_open_ex(x->conn->sftp, dir, (unsigned)strlen(dir), LIBSSH2_FXF_READ, 0,
                             LIBSSH2_SFTP_OPENFILE);
    if (!h) {
        /* A server that cannot open a directory as a file: nothing more we can sync. */
        r = sftp_status(x->conn, libssh2_session_last_errno(x->conn->ssh));
        return r == BACKEND_E_UNAVAILABLE ? r : 0;
    }
    r = sync_handle(x, h);
    libssh2_sftp_close_handle(h);
    return r;
}

static int mkdir_p(struct sftp_ctx *x, const char *path)
{
    char buf[SFTP_MAX_PATH + BACKEND_MAX_KEY];
    LIBSSH2_SFTP_ATTRIBUTES st;
    size_t len = strlen(path);

    if (len >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] != '/' && buf[i] != '\0')
            continue;
        char saved = buf[i];
        buf[i] = '\0';
        if (libssh2_sftp_stat_ex(x->conn->sftp, buf, (unsigned)i, LIBSSH2_SFTP_STAT, &st) != 0) {
            int rc = libssh2_sftp_mkdir_ex(x->conn->sftp, buf, (unsigned)i, 0700);
            if (rc != 0) {
                int r = sftp_status(x->conn, rc);
                /* Someone else made it meanwhile. */
                if (libssh2_sftp_stat_ex(x->conn->sftp, buf, (unsigned)i, LIBSSH2_SFTP_STAT, &st))
                    return r;
            }
        }
        buf[i] = saved;
    }
    return 0;
}

static bool exists(struct sftp_ctx *x, const char *path)
{
    LIBSSH2_SFTP_ATTRIBUTES st;
    return libssh2_sftp_stat_ex(x->conn->sftp, path, (unsigned)strlen(path), LIBSSH2_SFTP_STAT,
                                &st) == 0;
}

/* An overwriting put: the old object goes first (not atomic, see above). */
static int replace(struct sftp_ctx *x, const char *tmp, const char *final, const char *key)
{
    LIBSSH2_SFTP *s = x->conn->sftp;
    int rc;

    atomic_fetch_add(x->epoch, 1);
    sftp_forget_handle(x->conn, key);
    rc = libssh2_sftp_unlink_ex(s, final, (unsigned)strlen(final));
    if (rc == 0)
        rc = libssh2_sftp_rename_ex(s, tmp, (unsigned)strlen(tmp), final, (unsigned)strlen(final),
                                    0);
    return rc == 0 ? 0 : sftp_status(x->conn, rc);
}

static int put_op(struct sftp_ctx *x, struct backend_put *put)
{
    char final[SFTP_MAX_PATH + BACKEND_MAX_KEY], tmp[sizeof(final) + 32], dir[sizeof(final)];
    LIBSSH2_SFTP *s = x->conn->sftp;
    LIBSSH2_SFTP_HANDLE *h;
    const char *slash;
    int r, rc;

    if ((r = sftp_path(x->opts, put->req.key, final, sizeof(final))) != 0)
        return r;
    slash = strrchr(final, '/');
    snprintf(dir, sizeof(dir), "%.*s", (int)(slash - final), final);
    *x->rng ^= *x->rng << 13;
    *x->rng ^= *x->rng >> 7;
    *x->rng ^= *x->rng << 17;
    snprintf(tmp, sizeof(tmp), "%s/" SFTP_TMP_PREFIX "%s-%016llx", dir, slash + 1,
             (unsigned long long)*x->rng);
    for (int tries = 0;; tries++) {
        h = libssh2_sftp_open_ex(s, tmp, (unsigned)strlen(tmp),
                                 LIBSSH2_FXF_WRITE | LIBSSH2_FXF_CREAT | LIBSSH2_FXF_EXCL, 0600,
                                 LIBSSH2_SFTP_OPENFILE);
        if (h)
            break;
        r = sftp_status(x->conn, libssh2_session_last_errno(x->conn->ssh));
        /* The key's directory is made on the first put into it. */
        if (r != BACKEND_E_NOT_FOUND || tries > 0)
            return r == BACKEND_E_NOT_FOUND ? -EIO : r;
        if ((r = mkdir_p(x, dir)) != 0)
            return r;
    }
    r = write_iov(x, h, put->iov, put->iovcnt);
    if (r == 0)
        r = sync_handle(x, h);
    rc = libssh2_sftp_close_handle(h);
    if (r == 0 && rc != 0)
        r = sftp_status(x->conn, rc);
    if (r == 0 && cancelled(x))
        r = -ECANCELED;
    if (r == 0) {
        rc = libssh2_sftp_rename_ex(s, tmp, (unsigned)strlen(tmp), final, (unsigned)strlen(final),
                                    LIBSSH2_SFTP_RENAME_ATOMIC | LIBSSH2_SFTP_RENAME_NATIVE);
        if (rc != 0) {
            r = sftp_status(x->conn, rc);
            if (r != BACKEND_E_UNAVAILABLE && exists(x, final))
                r = (put->flags & BACKEND_PUT_CREATE) ? BACKEND_E_EXISTS
                                                      : replace(x, tmp, final, put->req.key);
        }
    }
    if (r == 0)
        r = sync_dir(x, dir);
    else if (!x->conn->broken)
        libssh2_sftp_unlink_ex(s, tmp, (unsigned)strlen(tmp));
    return r;
}

/* ---- get, head, delete ---------------------------------------------------------- */

/* A read handle of the key, from the session's cache or newly opened into it. */
static int open_cached(struct sftp_ctx *x, const char *key, LIBSSH2_SFTP_HANDLE **out)
{
    struct sftp_conn *c = x->conn;
    struct sftp_cached_handle *slot = &c->cache[0];
    char path[SFTP_MAX_PATH + BACKEND_MAX_KEY];
    uint64_t epoch = atomic_load(x->epoch);
    int r;

    for (size_t i = 0; i < SFTP_HANDLE_CACHE; i++) {
        struct sftp_cached_handle *e = &c->cache[i];
        if (e->h && e->epoch != epoch) {
            libssh2_sftp_close_handle(e->h);
            e->h = NULL;
        }
        if (e->h && strcmp(e->key, key) == 0) {
            e->used = ++c->tick;
            *out = e->h;
            return 0;
        }
        if (!e->h || (slot->h && e->used < slot->used))
            slot = e;
    }
    if ((r = sftp_path(x->opts, key, path, sizeof(path))) != 0)
        return r;
    if (slot->h) {
        libssh2_sftp_close_handle(slot->h);
        slot->h = NULL;
    }
    slot->h = libssh2_sftp_open_ex(c->sftp, path, (unsigned)strlen(path), LIBSSH2_FXF_READ, 0,
                                   LIBSSH2_SFTP_OPENFILE);
    if (!slot->h)
        return sftp_status(c, libssh2_session_last_errno(c->ssh));
    snprintf(slot->key, sizeof(slot->key), "%s", key);
    slot->used = ++c->tick;
    slot->epoch = epoch;
    *out = slot->h;
    return 0;
}

static int get_op(struct sftp_ctx *x, struct backend_get *get)
{
    LIBSSH2_SFTP_HANDLE *h;
    LIBSSH2_SFTP_ATTRIBUTES st;
    uint64_t want = get->length;
    uint8_t *buf;
    size_t got = 0;
    int r;

    if ((r = open_cached(x, get->req.key, &h)) != 0)
        return r;
    /* Only a read to the end, or one larger than allowed, needs the size first. */
    if (want == BACKEND_TO_END || want > get->max_len) {
        int rc = libssh2_sftp_fstat_ex(h, &st, 0);
        if (rc != 0)
            return sftp_status(x->conn, rc);
        if (!(st.flags & LIBSSH2_SFTP_ATTR_SIZE))
            return -EIO;
        uint64_t rest = get->offset >= st.filesize ? 0 : st.filesize - get->offset;
        if (rest < want)
            want = rest;
        if (want > get->max_len)
            return BACKEND_E_TOO_LARGE;
    }
    if (!(buf = malloc(want > 0 ? (size_t)want : 1)))
        return -ENOMEM;
    libssh2_sftp_seek64(h, get->offset);
    while (got < want) {
        ssize_t n = libssh2_sftp_read(h, (char *)buf + got, (size_t)want - got);
        if (n < 0) {
            r = sftp_status(x->conn, (int)n);
            break;
        }
        if (n == 0)
            break;
        got += (size_t)n;
        if (cancelled(x)) {
            r = -ECANCELED;
            break;
        }
    }
    if (r != 0) {
        free(buf);
        /* A handle whose read failed is not trusted again. */
        sftp_forget_handle(x->conn, get->req.key);
        return r;
    }
    get->out = buf;
    get->out_len = got;
    return 0;
}

static bool is_regular(const LIBSSH2_SFTP_ATTRIBUTES *st)
{
    return !(st->flags & LIBSSH2_SFTP_ATTR_PERMISSIONS) ||
           (st->permissions & LIBSSH2_SFTP_S_IFMT) == LIBSSH2_SFTP_S_IFREG;
}

static int head_op(struct sftp_ctx *x, struct backend_head *head)
{
    char path[SFTP_MAX_PATH + BACKEND_MAX_KEY];
    LIBSSH2_SFTP_ATTRIBUTES st;
    int r, rc;

    if ((r = sftp_path(x->opts, head->req.key, path, sizeof(path))) != 0)
        return r;
    rc = libssh2_sftp_stat_ex(x->conn->sftp, path, (unsigned)strlen(path), LIBSSH2_SFTP_STAT, &st);
    if (rc != 0)
        return sftp_status(x->conn, rc);
    if (!is_regular(&st))
        return BACKEND_E_NOT_FOUND;
    if (!(st.flags & LIBSSH2_SFTP_ATTR_SIZE))
        return -EIO;
    head->size = st.filesize;
    return 0;
}

static int del_op(struct sftp_ctx *x, struct backend_del *del)
{
    char path[SFTP_MAX_PATH + BACKEND_MAX_KEY];
    int r, rc;

    if ((r = sftp_path(x->opts, del->req.key, path, sizeof(path))) != 0)
        return r;
    atomic_fetch_add(x->epoch, 1);
    sftp_forget_handle(x->conn, del->req.key);
    rc = libssh2_sftp_unlink_ex(x->conn->sftp, path, (unsigned)strlen(path));
    return rc == 0 ? 0 : sftp_status(x->conn, rc);
}

/* ---- list ----------------------------------------------------------------------- */

static int cmp_entry(const void *a, const void *b)
{
    return strcmp(((const struct backend_entry *)a)->key, ((const struct backend_entry *)b)->key);
}

/*
 * Reads the whole directory (SFTP has no "start after"), keeps the keys
 * after the cursor, sorts them and returns the first page.
 */
static int list_op(struct sftp_ctx *x, struct backend_list *list)
{
    size_t want = list->max_keys ? list->max_keys : BACKEND_LIST_PAGE;
    size_t dir_len = strlen(list->req.key), n = 0, cap = 0;
    char path[SFTP_MAX_PATH + BACKEND_MAX_KEY], name[512];
    struct backend_entry *all = NULL;
    LIBSSH2_SFTP_HANDLE *h;
    LIBSSH2_SFTP_ATTRIBUTES st;
    int r = 0, rc;

    if ((r = sftp_path(x->opts, list->req.key, path, sizeof(path))) != 0)
        return r;
    path[strlen(path) - 1] = '\0'; /* the prefix ends in '/' */
    h = libssh2_sftp_open_ex(x->conn->sftp, path, (unsigned)strlen(path), 0, 0,
                             LIBSSH2_SFTP_OPENDIR);
    if (!h) {
        r = sftp_status(x->conn, libssh2_session_last_errno(x->conn->ssh));
        return r == BACKEND_E_NOT_FOUND ? 0 : r;
    }
    while ((rc = libssh2_sftp_readdir_ex(h, name, sizeof(name), NULL, 0, &st)) > 0) {
        size_t nl = (size_t)rc;
        if (name[0] == '.' || !is_regular(&st) || dir_len + nl >= BACKEND_MAX_KEY)
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 256;
            struct backend_entry *grown = realloc(all, ncap * sizeof(*all));
            if (!grown) {
                r = -ENOMEM;
                break;
            }
            all = grown;
            cap = ncap;
        }
        struct backend_entry *e = &all[n];
        memcpy(e->key, list->req.key, dir_len);
        memcpy(e->key + dir_len, name, nl);
        e->key[dir_len + nl] = '\0';
        if (!backend_key_valid(e->key) || strcmp(e->key, list->cursor) <= 0)
            continue;
        e->size = st.flags & LIBSSH2_SFTP_ATTR_SIZE ? st.filesize : 0;
        e->mtime = st.flags & LIBSSH2_SFTP_ATTR_ACMODTIME ? (int64_t)st.mtime : 0;
        n++;
    }
    if (r == 0 && rc < 0)
        r = sftp_status(x->conn, rc);
    libssh2_sftp_closedir(h);
    if (r != 0 || n == 0) {
        free(all);
        return r;
    }
    qsort(all, n, sizeof(*all), cmp_entry);
    if (n > want) {
        n = want;
        memcpy(list->next_cursor, all[want - 1].key, sizeof(list->next_cursor));
    }
    list->entries = all;
    list->nentries = n;
    return 0;
}

int sftp_op_run(struct sftp_ctx *x, struct backend_req *req)
{
    if (cancelled(x))
        return -ECANCELED;
    switch (req->op) {
    case BACKEND_OP_PUT:
        return put_op(x, container_of(req, struct backend_put, req));
    case BACKEND_OP_GET:
        return get_op(x, container_of(req, struct backend_get, req));
    case BACKEND_OP_HEAD:
        return head_op(x, container_of(req, struct backend_head, req));
    case BACKEND_OP_DELETE:
        return del_op(x, container_of(req, struct backend_del, req));
    case BACKEND_OP_LIST:
        return list_op(x, container_of(req, struct backend_list, req));
    default:
        return -EOPNOTSUPP;
    }
}

/* Removes "<dir>/.tmp-*" in every directory under the root: puts a crash left behind. */
static int remove_temporaries(struct sftp_ctx *x, const char *root, unsigned *removed)
{
    char dirs[8][256], name[512], path[SFTP_MAX_PATH + 600];
    LIBSSH2_SFTP_ATTRIBUTES st;
    LIBSSH2_SFTP_HANDLE *h;
    size_t ndirs = 0;
    int rc;

    h = libssh2_sftp_open_ex(x->conn->sftp, root, (unsigned)strlen(root), 0, 0,
                             LIBSSH2_SFTP_OPENDIR);
    if (!h)
        return sftp_status(x->conn, libssh2_session_last_errno(x->conn->ssh));
    while ((rc = libssh2_sftp_readdir_ex(h, name, sizeof(name), NULL, 0, &st)) > 0) {
        bool dir = (st.flags & LIBSSH2_SFTP_ATTR_PERMISSIONS) &&
                   (st.permissions & LIBSSH2_SFTP_S_IFMT) == LIBSSH2_SFTP_S_IFDIR;
        /* Only cairn's own key directories ("packs", ...): few, and short names. */
        if (dir && name[0] != '.' && (size_t)rc < sizeof(dirs[0]) && ndirs < 8)
            memcpy(dirs[ndirs++], name, (size_t)rc + 1);
    }
    libssh2_sftp_closedir(h);
    if (rc < 0)
        return sftp_status(x->conn, rc);
    for (size_t i = 0; i < ndirs; i++) {
        snprintf(path, sizeof(path), "%s/%s", root, dirs[i]);
        h = libssh2_sftp_open_ex(x->conn->sftp, path, (unsigned)strlen(path), 0, 0,
                                 LIBSSH2_SFTP_OPENDIR);
        if (!h)
            continue;
        while ((rc = libssh2_sftp_readdir_ex(h, name, sizeof(name), NULL, 0, &st)) > 0) {
            if (strncmp(name, SFTP_TMP_PREFIX, strlen(SFTP_TMP_PREFIX)) != 0)
                continue;
            char victim[sizeof(path) + 512];
            snprintf(victim, sizeof(victim), "%s/%s", path, name);
            if (libssh2_sftp_unlink_ex(x->conn->sftp, victim, (unsigned)strlen(victim)) == 0)
                (*removed)++;
        }
        libssh2_sftp_closedir(h);
        if (rc < 0)
            return sftp_status(x->conn, rc);
    }
    return 0;
}

int sftp_prepare_root(struct sftp_ctx *x, char *msg, size_t msg_len)
{
    const char *root = x->opts->root;
    LIBSSH2_SFTP_ATTRIBUTES st;
    unsigned removed = 0;
    int r;

    if (!backend_read_only() && (r = mkdir_p(x, root)) != 0) {
        snprintf(msg, msg_len, "sftp: cannot create %s on %s: %s", root, x->opts->host,
                 r == -EACCES ? "permission denied" : "server error");
        return r;
    }
    if (libssh2_sftp_stat_ex(x->conn->sftp, root, (unsigned)strlen(root), LIBSSH2_SFTP_STAT, &st) ||
        ((st.flags & LIBSSH2_SFTP_ATTR_PERMISSIONS) &&
         (st.permissions & LIBSSH2_SFTP_S_IFMT) != LIBSSH2_SFTP_S_IFDIR)) {
        snprintf(msg, msg_len, "sftp: %s on %s is not a directory", root, x->opts->host);
        return -ENOTDIR;
    }
    if (!backend_read_only() && (r = remove_temporaries(x, root, &removed)) != 0) {
        snprintf(msg, msg_len, "sftp: cannot list %s on %s", root, x->opts->host);
        return r;
    }
    if (removed)
        snprintf(msg, msg_len, "sftp: removed %u leftover temporary file%s under %s", removed,
                 removed == 1 ? "" : "s", root);
    return 0;
}
