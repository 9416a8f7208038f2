/*
 * `cairn mount [-f] MOUNTPOINT`: the FUSE operations and the command.
 * libfuse's multi-threaded loop serves requests on up to 10 threads, each
 * with its own connection to cairnd (mount_client), so a read waiting for
 * a slow backend does not hold up the others.
 */

/* 32: fuse_session_loop_mt() with a config the caller owns (the 3.1 form leaks its own). */
#define FUSE_USE_VERSION 32

#include "client/cli.h"
#include "client/mount.h"
#include "client/util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/*
 * Seconds the kernel may trust an entry, a missing entry or attributes
 * before it asks again: short, so names added or changed show up at once.
 */
#define MOUNT_TIMEOUT 1.0
#define MOUNT_BLKSIZE (128 * 1024)

static struct mount_fs *fs_of(fuse_req_t req)
{
    return fuse_req_userdata(req);
}

static void fill_attr(const struct mount_fs *fs, const struct mount_node *n, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_ino = n->ino;
    st->st_uid = getuid();
    st->st_gid = getgid();
    st->st_blksize = MOUNT_BLKSIZE;
    /* Read-only: a name's recorded permissions without their write bits. */
    if (n->kind == MOUNT_DIR || n->kind == MOUNT_HASHDIR) {
        st->st_mode = S_IFDIR | (n->mode ? n->mode & 0555 : 0555);
        /* 1: the count of subdirectories is unknown, so find must not take it as a leaf. */
        st->st_nlink = 1;
        st->st_mtime = st->st_ctime = st->st_atime = n->mode ? n->mtime : fs->started;
        return;
    }
    if (S_ISLNK(n->mode))
        st->st_mode = S_IFLNK | 0777;
    else
        st->st_mode = S_IFREG | (n->mode ? n->mode & 0555 : 0444);
    st->st_nlink = 1;
    st->st_size = (off_t)n->size;
    st->st_blocks = (blkcnt_t)((n->size + 511) / 512);
    st->st_mtime = st->st_ctime = st->st_atime = n->mtime;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct mount_fs *fs = fs_of(req);
    struct mount_node p, want = {0};
    struct fuse_entry_param e = {.attr_timeout = MOUNT_TIMEOUT, .entry_timeout = MOUNT_TIMEOUT};
    int r;

    if ((r = mount_node_get(fs, parent, &p)) < 0) {
        fuse_reply_err(req, -r);
        return;
    }
    r = mount_lookup(fs, &p, name, &want);
    free(p.path);
    if (r == -ENOENT) {
        /* Inode 0: the kernel remembers the absence for entry_timeout. */
        fuse_reply_entry(req, &e);
        return;
    }
    if (r == 0)
        r = mount_node_ref(fs, &want, &want.ino);
    if (r < 0) {
        free(want.path);
        fuse_reply_err(req, -r);
        return;
    }
    e.ino = want.ino;
    fill_attr(fs, &want, &e.attr);
    free(want.path);
    /* A reply the kernel never got (the call was interrupted) is a reference it does not hold. */
    if (fuse_reply_entry(req, &e) != 0)
        mount_node_forget(fs, e.ino, 1);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
    mount_node_forget(fs_of(req), ino, nlookup);
    fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
    for (size_t i = 0; i < count; i++)
        mount_node_forget(fs_of(req), forgets[i].ino, forgets[i].nlookup);
    fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct mount_fs *fs = fs_of(req);
    struct mount_node n;
    struct stat st;
    int r;

    if ((r = mount_node_get(fs, ino, &n)) < 0) {
        fuse_reply_err(req, -r);
        return;
    }
    fill_attr(fs, &n, &st);
    free(n.path);
    fuse_reply_attr(req, &st, MOUNT_TIMEOUT);
}

/* A directory of names is listed whole here, by-hash its first page (see struct mount_dir). */
static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct mount_fs *fs = fs_of(req);
    struct mount_dir *d = NULL;
    struct mount_node n;
    int r;

    if ((r = mount_node_get(fs, ino, &n)) < 0) {
        fuse_reply_err(req, -r);
        return;
    }
    if (n.kind != MOUNT_DIR && n.kind != MOUNT_HASHDIR)
        r = -ENOTDIR;
    else if (!(d = malloc(sizeof(*d))))
        r = -ENOMEM;
    else if ((r = mount_list_dir(fs, &n, d)) < 0)
        free(d);
    free(n.path);
    if (r < 0) {
        fuse_reply_err(req, -r);
        return;
    }
    fi->fh = (uintptr_t)d;
    if (fuse_reply_open(req, fi) != 0) {
        mount_dir_clear(d);
        free(d);
    }
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
    struct mount_dir *d = (struct mount_dir *)(uintptr_t)fi->fh;
    _cleanup_free_ char *buf = malloc(size);
    size_t used = 0;
    int r;

    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    /* Offsets 0 and 1 are "." and "..", then the children in order. */
    for (uint64_t i = off < 0 ? 0 : (uint64_t)off;; i++) {
        struct stat st = {.st_mode = S_IFDIR};
        const char *name = i == 0 ? "." : "..";
        size_t len;

        if (i >= 2) {
            r = mount_dir_seek(fs_of(req), d, i - 2);
            if (r < 0 && used == 0) {
                fuse_reply_err(req, -r);
                return;
            }
            if (r != 0)
                break; /* the end, or an error the next call reports */
            const struct mount_dirent *e = &d->v[i - 2 - d->base];
            name = e->name;
            st.st_ino = e->ino;
            st.st_mode = e->dir ? S_IFDIR : e->link ? S_IFLNK : S_IFREG;
        } else {
            /* Not 0: readdir(3) hides entries with inode 0. */
            st.st_ino = i == 0 ? ino : MOUNT_INO_ROOT;
        }
        len = fuse_add_direntry(req, buf + used, size - used, name, &st, (off_t)(i + 1));
        if (len > size - used)
            break;
        used += len;
    }
    fuse_reply_buf(req, buf, used);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct mount_dir *d = (struct mount_dir *)(uintptr_t)fi->fh;

    mount_dir_clear(d);
    free(d);
    fuse_reply_err(req, 0);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct mount_fs *fs = fs_of(req);
    struct mount_node n;
    int r;

    if ((r = mount_node_get(fs, ino, &n)) < 0) {
        fuse_reply_err(req, -r);
        return;
    }
    /*
     * The inode is one version of the content: a path whose name has moved on
     * since the kernel looked it up gets ESTALE, and the kernel looks it up
     * again and opens the new version.
     */
    if (n.kind != MOUNT_NAMED && n.kind != MOUNT_BLOB)
        r = -EISDIR;
    else if ((fi->flags & O_ACCMODE) != O_RDONLY)
        r = -EROFS;
    else
        r = mount_check_current(fs, &n);
    free(n.path);
    if (r < 0) {
        fuse_reply_err(req, -r);
        return;
    }
    /* Content-addressed: what the page cache holds for this inode is never outdated. */
    fi->keep_cache = 1;
    fuse_reply_open(req, fi);
}

/* Where a ranged get puts its bytes. */
struct read_into {
    char *buf;
    size_t cap, len;
    const char *hash;
};

static int read_piece(void *userdata, const msgpack_object *first, const uint8_t *data, size_t len)
{
    struct read_into *ri = userdata;
    const char *hash;
    size_t hash_len;

    /* A 64-digit name is taken when the hash is gone: refuse anything but this content. */
    if (first && (proto_get_str(first, "hash", &hash, &hash_len) != 0 ||
                  hash_len != PROTO_HASH_HEX || memcmp(hash, ri->hash, PROTO_HASH_HEX) != 0))
        return -EIO;
    if (len > ri->cap - ri->len)
        return -EIO;
    memcpy(ri->buf + ri->len, data, len);
    ri->len += len;
    return 0;
}

/*
 * ri->cap bytes of ri->hash from `off` into ri->buf: 0 or negative errno.
 * Once more on a new connection when cairnd went away (a restart).
 */
static int read_range(struct mount_fs *fs, struct read_into *ri, uint64_t off)
{
    struct client *c = NULL;
    int r = -EIO;

    for (int tries = 0; tries < 2; tries++) {
        if (!(c = mount_client(fs)))
            break;
        ri->len = 0;
        r = client_get_range(c, ri->hash, off, ri->cap, read_piece, ri);
        if (r >= 0)
            break;
    }
    return r == 0 ? 0 : c ? mount_errno(c, r) : -EIO;
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
    struct mount_fs *fs = fs_of(req);
    struct read_into ri;
    struct mount_node n;
    int r;

    if ((r = mount_node_get(fs, ino, &n)) < 0) {
        fuse_reply_err(req, -r);
        return;
    }
    free(n.path); /* the hash says what to read */
    if (n.kind != MOUNT_NAMED && n.kind != MOUNT_BLOB) {
        fuse_reply_err(req, EISDIR);
        return;
    }
    if (off < 0 || (uint64_t)off >= n.size || size == 0) {
        fuse_reply_buf(req, NULL, 0);
        return;
    }
    if (size > n.size - (uint64_t)off)
        size = (size_t)(n.size - (uint64_t)off);
    _cleanup_free_ char *buf = malloc(size);
    if (!buf) {
        fuse_reply_err(req, ENOMEM);
        return;
    }
    ri = (struct read_into){.buf = buf, .cap = size, .hash = n.hash};
    if ((r = read_range(fs, &ri, (uint64_t)off)) < 0) {
        /* The document was deleted while the file was open. */
        fuse_reply_err(req, r == -ENOENT ? ESTALE : -r);
        return;
    }
    fuse_reply_buf(req, buf, ri.len);
}

/* A name added as a symbolic link: its content is the target. */
static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
    struct mount_fs *fs = fs_of(req);
    char target[PATH_MAX];
    struct read_into ri;
    struct mount_node n;
    int r;

    if ((r = mount_node_get(fs, ino, &n)) < 0) {
        fuse_reply_err(req, -r);
        return;
    }
    free(n.path);
    if (n.kind != MOUNT_NAMED || !S_ISLNK(n.mode) || n.size == 0 || n.size >= sizeof(target)) {
        fuse_reply_err(req, n.kind == MOUNT_NAMED && S_ISLNK(n.mode) ? EIO : EINVAL);
        return;
    }
    ri = (struct read_into){.buf = target, .cap = (size_t)n.size, .hash = n.hash};
    if ((r = read_range(fs, &ri, 0)) == 0 && (ri.len != n.size || memchr(target, '\0', ri.len)))
        r = -EIO;
    if (r != 0) {
        fuse_reply_err(req, r == -ENOENT ? ESTALE : -r);
        return;
    }
    target[ri.len] = '\0';
    fuse_reply_readlink(req, target);
}

static const struct fuse_lowlevel_ops mount_ops = {
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .releasedir = op_releasedir,
    .open = op_open,
    .read = op_read,
    .readlink = op_readlink,
};

/* Mounts, serves until unmounted or signalled, unmounts. The exit status. */
static int serve(struct mount_fs *fs, const char *mountpoint, bool foreground)
{
    char *argv[] = {"cairn", "-o", "ro,default_permissions,fsname=cairn,subtype=cairn", NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, argv);
    /* Threads beyond 10 that fall idle end, closing their connections to cairnd. */
    struct fuse_loop_config loop = {.clone_fd = 0, .max_idle_threads = 10};
    struct fuse_session *se;
    int status = CLI_EXIT_FAILED, r;

    se = fuse_session_new(&args, &mount_ops, sizeof(mount_ops), fs);
    if (!se) {
        cli_error(0, CLI_CODE_FAILED, NULL, "mount: cannot start a FUSE session");
        fuse_opt_free_args(&args);
        return CLI_EXIT_FAILED;
    }
    if (fuse_set_signal_handlers(se) != 0) {
        cli_error(0, CLI_CODE_FAILED, NULL, "mount: cannot install the signal handlers");
        goto out_destroy;
    }
    if (fuse_session_mount(se, mountpoint) != 0) {
        /* libfuse has said why (no /dev/fuse, no permission, ...). */
        cli_error(0, CLI_CODE_FAILED, NULL, "mount: cannot mount on %s", mountpoint);
        goto out_signals;
    }
    /* Only now: the parent exits once the mount is up, so a script can use it at once. */
    if (fuse_daemonize(foreground) != 0) {
        cli_error(0, CLI_CODE_FAILED, NULL, "mount: cannot go to the background");
        goto out_unmount;
    }
    /* 0 after an unmount, the signal number after SIGINT, SIGTERM or SIGHUP: both clean. */
    r = fuse_session_loop_mt(se, &loop);
    status = r < 0 ? CLI_EXIT_FAILED : CLI_EXIT_OK;
    if (r < 0)
        cli_error(0, CLI_CODE_FAILED, NULL, "mount: %s", strerror(-r));
out_unmount:
    fuse_session_unmount(se);
out_signals:
    fuse_remove_signal_handlers(se);
out_destroy:
    fuse_session_destroy(se);
    /* fuse_session_new() copies the arguments it adds to. */
    fuse_opt_free_args(&args);
    return status;
}

/*
 * Another mount on the directory (a second `cairn mount` there) would hide
 * the first: refused. Files in it are hidden while mounted: said.
 */
static int check_mountpoint(const char *mountpoint, const struct stat *st)
{
    _cleanup_free_ char *parent = NULL;
    struct stat up;
    struct dirent *e;
    DIR *d;

    if (asprintf(&parent, "%s/..", mountpoint) < 0) {
        parent = NULL;
        return cli_fail_errno(mountpoint);
    }
    if (stat(parent, &up) == 0 && (up.st_dev != st->st_dev || up.st_ino == st->st_ino) &&
        strcmp(mountpoint, "/") != 0) {
        cli_error(0, CLI_CODE_FAILED, NULL,
                  "%s: a file system is mounted there already (unmount it first)", mountpoint);
        return CLI_EXIT_FAILED;
    }
    if ((d = opendir(mountpoint))) {
        while ((e = readdir(d))) {
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
                fprintf(stderr,
                        "cairn: warning: %s is not empty: what is in it is hidden while "
                        "mounted\n",
                        mountpoint);
                break;
            }
        }
        closedir(d);
    }
    return CLI_EXIT_OK;
}

int cli_cmd_mount(struct cli *cli, int argc, char **argv)
{
    static const struct option options[] = {
        {"foreground", no_argument, NULL, 'f'},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    struct mount_fs fs;
    bool foreground = false;
    _cleanup_free_ char *mountpoint = NULL;
    struct client *c;
    struct stat st;
    int opt, status, r;

    while ((opt = cli_getopt(cli, argc, argv, ":fh", options)) != -1) {
        if (opt == 'f') {
            foreground = true;
        } else if (opt == 'h') {
            cli_print_command_help(stdout, argv[0]);
            return CLI_EXIT_OK;
        } else {
            return cli_option_error(argv[0], opt, argv);
        }
    }
    if (argc - optind < 1)
        return cli_usage_error("mount: missing MOUNTPOINT");
    if (argc - optind > 1)
        return cli_usage_error("mount: too many arguments");
    /* Absolute: libfuse unmounts by this path after fuse_daemonize() went to "/". */
    if (stat(argv[optind], &st) < 0 || !(mountpoint = realpath(argv[optind], NULL)))
        return cli_fail_errno(argv[optind]);
    if (!S_ISDIR(st.st_mode)) {
        cli_error(0, CLI_CODE_IO, NULL, "%s: not a directory", argv[optind]);
        return CLI_EXIT_FAILED;
    }
    if ((r = check_mountpoint(mountpoint, &st)) != CLI_EXIT_OK)
        return r;
    /* Started if need be; the threads serving the mount make connections of their own. */
    if (!(c = cli_client(cli)))
        return cli->no_client;
    cli->client = client_free(c);
    if ((r = mount_fs_init(&fs, cli->socket)) < 0)
        return cli_fail(cli, mountpoint, r);
    fs.started = (int64_t)time(NULL);
    status = serve(&fs, mountpoint, foreground);
    mount_fs_deinit(&fs);
    return status;
}
