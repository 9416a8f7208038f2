/*
 * powercutfs: a FUSE file system for the tests that can lose power.
 *
 * It keeps two versions of everything: what the programs on it see (the
 * current state) and what would survive a crash of the machine (the durable
 * state). A write changes only the current state. Syncs copy current to
 * durable as Linux defines them:
 *
 *   fsync, fdatasync of a file    its data and size
 *   fsync of a directory          its entries: creates, links, unlinks,
 *                                 renames in and out, mkdir, rmdir
 *   "sync" on the control file    everything (what sync(2) would do)
 *
 * Writing "cut" to the control file /.powercut cuts the power: every node's
 * current state becomes its durable state, all at once. Until "up" is
 * written, the processes still running (the test kills them right after)
 * can make nothing more durable: syncs and changes of names and sizes fail
 * with EIO, as on a dead disk, and writes of data succeed but go nowhere.
 * Those are the kernel's: a killed process's dirty mapped pages (SQLite's
 * -shm file) are written back when its files close, and a write that fails
 * there would leave the pages dirty with no open file to write them through,
 * to fail once more at the next syncfs(2) of the new daemon, which reports
 * it. Reading the control file reports counters.
 *
 * Everything lives in this process's memory: the file system is the disk,
 * and it outlives every cut. Each node holds both states (node.c); file data
 * is kept in pages shared copy-on-write between the two (content.c), so a
 * sync costs a pointer per page.
 * A plain directory tree on a backing file system could not hold every
 * durable state: a file synced before any of its names is durable, or a
 * directory synced before its own entry is, has data but no durable path.
 *
 * Each directory is synced on its own: a rename between two directories
 * whose destination alone is synced leaves the file under both names after
 * a cut, and one whose source alone is synced leaves it under neither. That
 * is stricter than ext4 or XFS, which commit a rename as one transaction,
 * and exactly what POSIX promises.
 *
 * syncfs(2) does not reach a FUSE file system (the kernel sends FUSE_SYNCFS
 * to virtiofs only), so it syncs nothing here; see README.md.
 *
 * Single-threaded (fuse_loop): each operation, a cut included, is atomic
 * with respect to every other one.
 */
#define FUSE_USE_VERSION 31

#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "node.h"

#define CONTROL_NAME "/.powercut"
#define CONTROL_FH 0 /* a node's handle is its address, never 0 */

/* The power: off from a cut until "up". */
static struct {
    bool dead;
    unsigned long cuts;
} power;

/* ---- handles ------------------------------------------------------------------ */

/* The node behind an open handle, else behind the path. */
static struct node *node_of(const char *path, struct fuse_file_info *fi)
{
    if (fi && fi->fh != CONTROL_FH)
        return (struct node *)(uintptr_t)fi->fh;
    return path ? node_lookup(path) : NULL;
}

static bool is_control(const char *path, struct fuse_file_info *fi)
{
    if (fi)
        return fi->fh == CONTROL_FH;
    return path && strcmp(path, CONTROL_NAME) == 0;
}

/* ---- the control file --------------------------------------------------------- */

static int control_write(const char *buf, size_t len)
{
    char cmd[16];
    int r = 0;

    if (len >= sizeof(cmd))
        return -EINVAL;
    memcpy(cmd, buf, len);
    cmd[len] = '\0';
    cmd[strcspn(cmd, "\n")] = '\0';
    if (strcmp(cmd, "cut") == 0) {
        r = node_for_all(node_revert);
        power.dead = true;
        power.cuts++;
    } else if (strcmp(cmd, "up") == 0) {
        power.dead = false;
    } else if (strcmp(cmd, "sync") == 0) {
        r = node_for_all(node_sync);
    } else {
        r = -EINVAL;
    }
    return r < 0 ? r : (int)len;
}

static int control_read(char *buf, size_t size, off_t off)
{
    char text[256];
    unsigned long dirty = 0;
    int n;

    for (struct node *nd = nodes.all; nd; nd = nd->next)
        dirty += nd->dirty;
    n = snprintf(text, sizeof(text), "cuts %lu\ndropped %lu\nsyncs %lu\ndirty %lu\ndead %d\n",
                 power.cuts, nodes.dropped, nodes.syncs, dirty, power.dead);
    if (off >= n)
        return 0;
    if (size > (size_t)(n - off))
        size = n - off;
    memcpy(buf, text + off, size);
    return (int)size;
}

/* ---- operations --------------------------------------------------------------- */

#define ALIVE_OR_EIO()                                                                             \
    do {                                                                                           \
        if (power.dead)                                                                            \
            return -EIO;                                                                           \
    } while (0)

static void *pc_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
    /* No kernel caching of names or attributes: a cut changes both behind its back. */
    cfg->entry_timeout = 0;
    cfg->attr_timeout = 0;
    cfg->negative_timeout = 0;
    cfg->kernel_cache = 0; /* page cache dropped at every open */
    cfg->auto_cache = 0;
    cfg->direct_io = 0;   /* SQLite maps its -shm file; FUSE refuses shared maps with direct_io */
    cfg->hard_remove = 1; /* an unlink is an unlink, not a rename to .fuse_hidden */
    cfg->nullpath_ok = 1; /* operations on open, unlinked files go by handle */
    cfg->use_ino = 1;
    conn->want &= ~FUSE_CAP_WRITEBACK_CACHE; /* every write reaches us before write() returns */
    return NULL;
}

static int pc_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
    struct node *nd;

    memset(st, 0, sizeof(*st));
    if (is_control(path, fi)) {
        st->st_mode = S_IFREG | 0600;
        st->st_nlink = 1;
        return 0;
    }
    ALIVE_OR_EIO();
    if (!(nd = node_of(path, fi)))
        return -ENOENT;
    st->st_ino = nd->ino;
    st->st_mode = nd->mode;
    st->st_nlink = S_ISDIR(nd->mode) ? 2 : nd->nlink;
    st->st_uid = nd->uid;
    st->st_gid = nd->gid;
    st->st_size = S_ISDIR(nd->mode) ? 4096 : (off_t)nd->cur.size;
    st->st_blksize = CONTENT_PAGE_SIZE;
    st->st_blocks = (st->st_size + 511) / 512;
    st->st_mtim = nd->mtime;
    st->st_ctim = nd->ctime;
    st->st_atim = nd->mtime;
    return 0;
}

static int pc_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
    struct node *nd;

    ALIVE_OR_EIO();
    if (!(nd = node_of(path, fi)) || !S_ISDIR(nd->mode))
        return -ENOTDIR;
    fill(buf, ".", NULL, 0, 0);
    fill(buf, "..", NULL, 0, 0);
    for (size_t i = 0; i < nd->cur_e.n; i++)
        fill(buf, nd->cur_e.v[i].name, NULL, 0, 0);
    return 0;
}

/* Adds a new node of `mode` at path; with fi, opens it too. */
static int make_node(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    const char *name;
    struct node *dir, *nd;
    int r;

    ALIVE_OR_EIO();
    if (strcmp(path, CONTROL_NAME) == 0)
        return -EEXIST;
    if (!(dir = node_lookup_parent(path, &name)))
        return -ENOENT;
    if (entries_find(&dir->cur_e, name))
        return -EEXIST;
    if (!(nd = node_new(mode, fuse_get_context())))
        return -ENOMEM;
    nd->refs++; /* held until it is in the directory or given up */
    r = entries_add(&dir->cur_e, name, nd, true);
    if (r == 0) {
        node_touch(dir);
        nd->dirty = true;
        if (fi) {
            nd->refs++;
            fi->fh = (uintptr_t)nd;
        }
    }
    node_unref(nd);
    return r;
}

static int pc_mkdir(const char *path, mode_t mode)
{
    return make_node(path, S_IFDIR | (mode & 07777), NULL);
}

static int pc_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    return make_node(path, S_IFREG | (mode & 07777), fi);
}

static int pc_unlink_or_rmdir(const char *path, bool dir_wanted)
{
    const char *name;
    struct node *dir;
    struct entry *ent;

    ALIVE_OR_EIO();
    if (!(dir = node_lookup_parent(path, &name)) || !(ent = entries_find(&dir->cur_e, name)))
        return -ENOENT;
    if (dir_wanted && !S_ISDIR(ent->node->mode))
        return -ENOTDIR;
    if (!dir_wanted && S_ISDIR(ent->node->mode))
        return -EISDIR;
    if (dir_wanted && ent->node->cur_e.n > 0)
        return -ENOTEMPTY;
    entries_remove(&dir->cur_e, ent, true);
    node_touch(dir);
    return 0;
}

static int pc_unlink(const char *path)
{
    return pc_unlink_or_rmdir(path, false);
}

static int pc_rmdir(const char *path)
{
    return pc_unlink_or_rmdir(path, true);
}

static int pc_rename(const char *from, const char *to, unsigned int flags)
{
    const char *from_name, *to_name;
    struct node *from_dir, *to_dir, *nd;
    struct entry *src, *dst;
    int r;

    ALIVE_OR_EIO();
    if (flags & ~RENAME_NOREPLACE)
        return -EINVAL; /* RENAME_EXCHANGE, RENAME_WHITEOUT: nothing here uses them */
    if (!(from_dir = node_lookup_parent(from, &from_name)) ||
        !(to_dir = node_lookup_parent(to, &to_name)) ||
        !(src = entries_find(&from_dir->cur_e, from_name)))
        return -ENOENT;
    nd = src->node;
    /*
     * A directory moved under one of its durable descendants would make a
     * cycle between the two states; nothing that runs here moves directories.
     */
    if (S_ISDIR(nd->mode))
        return -EXDEV;
    if ((dst = entries_find(&to_dir->cur_e, to_name))) {
        if (dst->node == nd)
            return 0;
        if (flags & RENAME_NOREPLACE)
            return -EEXIST;
        if (S_ISDIR(dst->node->mode))
            return -EISDIR;
    }
    nd->refs++; /* between the two lists */
    r = entries_add(&to_dir->cur_e, to_name, nd, true);
    if (r == 0) {
        /* Entries move when the array grows: find both again. */
        if (dst)
            entries_remove(&to_dir->cur_e, entries_find(&to_dir->cur_e, to_name), true);
        entries_remove(&from_dir->cur_e, entries_find(&from_dir->cur_e, from_name), true);
        node_touch(from_dir);
        node_touch(to_dir);
    }
    node_unref(nd);
    return r;
}

static int pc_link(const char *from, const char *to)
{
    const char *name;
    struct node *nd = node_lookup(from), *dir;
    int r;

    ALIVE_OR_EIO();
    if (!nd)
        return -ENOENT;
    if (S_ISDIR(nd->mode))
        return -EPERM;
    if (!(dir = node_lookup_parent(to, &name)))
        return -ENOENT;
    if (entries_find(&dir->cur_e, name))
        return -EEXIST;
    r = entries_add(&dir->cur_e, name, nd, true);
    if (r == 0)
        node_touch(dir);
    return r;
}

static int pc_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
    struct node *nd;

    ALIVE_OR_EIO();
    if (!(nd = node_of(path, fi)))
        return -ENOENT;
    nd->mode = (nd->mode & S_IFMT) | (mode & 07777);
    return 0;
}

static int pc_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi)
{
    struct node *nd;

    ALIVE_OR_EIO();
    if (!(nd = node_of(path, fi)))
        return -ENOENT;
    if (uid != (uid_t)-1)
        nd->uid = uid;
    if (gid != (gid_t)-1)
        nd->gid = gid;
    return 0;
}

static int pc_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi)
{
    struct node *nd;

    ALIVE_OR_EIO();
    if (!(nd = node_of(path, fi)))
        return -ENOENT;
    if (tv[1].tv_nsec == UTIME_NOW)
        clock_gettime(CLOCK_REALTIME, &nd->mtime);
    else if (tv[1].tv_nsec != UTIME_OMIT)
        nd->mtime = tv[1];
    return 0;
}

static int pc_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
    struct node *nd;
    int r;

    if (is_control(path, fi))
        return 0;
    ALIVE_OR_EIO();
    if (!(nd = node_of(path, fi)))
        return -ENOENT;
    if (S_ISDIR(nd->mode))
        return -EISDIR;
    if (size < 0)
        return -EINVAL;
    r = content_truncate(&nd->cur, (uint64_t)size);
    if (r == 0)
        node_touch(nd);
    return r;
}

static int pc_open(const char *path, struct fuse_file_info *fi)
{
    struct node *nd;

    if (is_control(path, NULL)) {
        fi->fh = CONTROL_FH;
        fi->direct_io = 1; /* every read asks for fresh counters */
        return 0;
    }
    ALIVE_OR_EIO();
    if (!(nd = node_lookup(path)))
        return -ENOENT;
    nd->refs++;
    fi->fh = (uintptr_t)nd;
    return 0;
}

static int pc_release(const char *path, struct fuse_file_info *fi)
{
    /* Even when dead: the handles of the killed processes are given back after a cut. */
    if (fi->fh != CONTROL_FH)
        node_unref((struct node *)(uintptr_t)fi->fh);
    return 0;
}

static int pc_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
    struct node *nd;

    if (fi->fh == CONTROL_FH)
        return control_read(buf, size, off);
    ALIVE_OR_EIO();
    nd = node_of(path, fi);
    if (size > INT32_MAX)
        size = INT32_MAX;
    return (int)content_read(&nd->cur, buf, size, (uint64_t)off);
}

static int pc_write(const char *path, const char *buf, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    struct node *nd;
    int r;

    if (fi->fh == CONTROL_FH)
        return control_write(buf, size);
    if (power.dead)
        return size > INT32_MAX ? INT32_MAX : (int)size; /* see the top of the file */
    nd = node_of(path, fi);
    if (size > INT32_MAX)
        size = INT32_MAX;
    r = content_write(&nd->cur, buf, size, (uint64_t)off);
    if (r < 0)
        return r;
    node_touch(nd);
    return (int)size;
}

static int pc_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
    struct node *nd = node_of(path, fi);

    if (fi && fi->fh == CONTROL_FH)
        return 0;
    ALIVE_OR_EIO();
    return nd ? node_sync(nd) : -ENOENT;
}

static int pc_flush(const char *path, struct fuse_file_info *fi)
{
    /* A close is no sync, dead or not. */
    return 0;
}

static int pc_fallocate(const char *path, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
    struct node *nd = node_of(path, fi);
    int r = 0;

    ALIVE_OR_EIO();
    if (mode != 0)
        return -EOPNOTSUPP;
    if (!nd || S_ISDIR(nd->mode))
        return -EBADF;
    if ((uint64_t)(off + len) > nd->cur.size) {
        r = content_truncate(&nd->cur, (uint64_t)(off + len));
        node_touch(nd);
    }
    return r;
}

static int pc_opendir(const char *path, struct fuse_file_info *fi)
{
    struct node *nd;

    ALIVE_OR_EIO();
    if (!(nd = node_lookup(path)))
        return -ENOENT;
    if (!S_ISDIR(nd->mode))
        return -ENOTDIR;
    nd->refs++;
    fi->fh = (uintptr_t)nd;
    return 0;
}

static int pc_statfs(const char *path, struct statvfs *sv)
{
    ALIVE_OR_EIO();
    memset(sv, 0, sizeof(*sv));
    sv->f_bsize = sv->f_frsize = CONTENT_PAGE_SIZE;
    sv->f_blocks = sv->f_bfree = sv->f_bavail = 1u << 24; /* 64 GiB: memory is the limit */
    sv->f_files = sv->f_ffree = sv->f_favail = 1u << 20;
    sv->f_namemax = 255;
    return 0;
}

static const struct fuse_operations pc_ops = {
    .init = pc_init,
    .getattr = pc_getattr,
    .readdir = pc_readdir,
    .mkdir = pc_mkdir,
    .create = pc_create,
    .unlink = pc_unlink,
    .rmdir = pc_rmdir,
    .rename = pc_rename,
    .link = pc_link,
    .chmod = pc_chmod,
    .chown = pc_chown,
    .utimens = pc_utimens,
    .truncate = pc_truncate,
    .open = pc_open,
    .release = pc_release,
    .read = pc_read,
    .write = pc_write,
    .flush = pc_flush,
    .fsync = pc_fsync,
    .fallocate = pc_fallocate,
    .opendir = pc_opendir,
    .releasedir = pc_release,
    .fsyncdir = pc_fsync,
    .statfs = pc_statfs,
};

int main(int argc, char **argv)
{
    struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
    struct fuse *fuse;
    int r = 1;

    if (argc != 2) {
        fprintf(stderr, "usage: %s MOUNTPOINT\n", argv[0]);
        return 2;
    }
    /* Not fuse_get_context(): it has no context outside a request. */
    nodes.root = node_new(S_IFDIR | 0755, NULL);
    if (!nodes.root)
        return 1;
    nodes.root->refs = 1;
    if (fuse_opt_add_arg(&args, argv[0]) != 0 ||
        fuse_opt_add_arg(&args, "-ofsname=powercutfs,subtype=powercutfs") != 0)
        return 1;
    fuse = fuse_new(&args, &pc_ops, sizeof(pc_ops), NULL);
    if (!fuse)
        goto out;
    if (fuse_mount(fuse, argv[1]) != 0)
        goto out_destroy;
    if (fuse_set_signal_handlers(fuse_get_session(fuse)) == 0) {
        r = fuse_loop(fuse) == 0 ? 0 : 1;
        fuse_remove_signal_handlers(fuse_get_session(fuse));
    }
    fuse_unmount(fuse);
out_destroy:
    fuse_destroy(fuse);
out:
    fuse_opt_free_args(&args);
    node_unref(nodes.root);
    return r;
}
