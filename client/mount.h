#pragma once

/*
 * `cairn mount`: a read-only FUSE file system over a running cairnd. The
 * command and the FUSE operations are in mount.c; this header is what they
 * share with mount-inode.c, the inode table, and mount-tree.c, which asks
 * cairnd what a path is (names are paths, directories are implied by the
 * names under them) and what a directory holds.
 *
 * Inodes are versions, not paths: a named file's inode number is a hash of
 * its name and the hash of the content it points to, a by-hash file's comes
 * from its content hash, a directory's from its path. A name's new version is
 * therefore a new inode with a page cache of its own, which is what makes
 * keep_cache safe and lets a file opened before keep reading the content it
 * was opened with. The rare collision of two 64-bit numbers is resolved by
 * taking the next free one while the first is in use.
 *
 * Errors: 0 is success, negative errno otherwise, as FUSE wants them.
 */

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "client/client.h"

/* The fixed inodes; FUSE's root is 1. */
#define MOUNT_INO_ROOT 1
#define MOUNT_INO_HASHDIR 2
/* The directory of every document by its hash, beside the names at the root. */
#define MOUNT_HASHDIR_NAME "by-hash"

enum mount_kind {
    MOUNT_DIR,     /* a directory implied by names (the root too) */
    MOUNT_HASHDIR, /* by-hash */
    MOUNT_NAMED,   /* a name's newest version */
    MOUNT_BLOB,    /* by-hash/<hash> */
};

struct mount_node {
    uint64_t ino;
    uint64_t nlookup; /* the kernel's references (FUSE lookup count) */
    enum mount_kind kind;
    /* MOUNT_DIR: the path ("" for the root); MOUNT_NAMED: the name as stored. */
    char *path;
    char hash[PROTO_HASH_HEX + 1]; /* files */
    uint64_t size;                 /* files */
    int64_t mtime;                 /* Unix seconds */
    /* MOUNT_NAMED, and MOUNT_DIR of a name: the st_mode the name was added with (0: none). */
    uint32_t mode;
    uint64_t home;            /* the number its identity asks for (ino_of) */
    struct mount_node *next;  /* in its bucket of the table, by ino */
    struct mount_node *hnext; /* in its bucket of the table, by home */
};

/* One entry of a directory listing. */
struct mount_dirent {
    char *name;
    bool dir;
    bool link;    /* a name added as a symbolic link */
    uint64_t ino; /* what the node would get; informational, as d_ino is */
    size_t seq;   /* the order found in, which decides between equal names */
};

/*
 * A directory's listing. A directory of names is listed whole at opendir:
 * names under three prefixes are merged, sorted and checked against each
 * other. by-hash is listed a page at a time as readdir goes on (documents
 * come sorted and once each), so its memory stays one page however many
 * documents there are.
 */
struct mount_dir {
    struct mount_dirent *v;
    size_t n, cap;
    bool paged;     /* by-hash */
    uint64_t base;  /* paged: the position of v[0] among the children */
    bool last_page; /* paged: no page follows v */
};

/*
 * FUSE serves requests on several threads. Each has a connection of its own
 * to cairnd (the client library is synchronous); the inode table is shared
 * under `lock`, and the operations work on copies of its nodes, so a node
 * the kernel forgets meanwhile is never used after it is freed.
 */
struct mount_fs {
    const char *socket; /* cairnd's */
    int64_t started;    /* the directories' times: when the mount started */
    pthread_key_t client_key;
    pthread_mutex_t lock; /* the nodes below */
    struct mount_node root, hashdir;
    /*
     * The nodes twice: by number, and by the number their identity asks
     * for, so an identity is found whatever number it got (another held
     * its own) and never gets a second one.
     */
    struct mount_node **buckets, **homes;
    size_t nbuckets, nnodes;
    /* mount_ino_of; the unit tests make identities collide. */
    uint64_t (*ino_of)(enum mount_kind kind, const char *path, const char *hash);
};

int mount_fs_init(struct mount_fs *fs, const char *socket);
void mount_fs_deinit(struct mount_fs *fs);

/* The number a node of this identity gets, unless another holds it (mount-inode.c). */
uint64_t mount_ino_of(enum mount_kind kind, const char *path, const char *hash);
/* A copy of the node `ino` (its path allocated, or NULL); -ESTALE when there is none. */
int mount_node_get(struct mount_fs *fs, uint64_t ino, struct mount_node *copy);
/*
 * The node of `want`'s identity (kind, path, hash), made from `want` if the
 * table lacks it, with its lookup count raised by one; its number in *ino.
 */
int mount_node_ref(struct mount_fs *fs, const struct mount_node *want, uint64_t *ino);
/* Drops `n` kernel references; the node goes with the last one (the fixed ones stay). */
void mount_node_forget(struct mount_fs *fs, uint64_t ino, uint64_t n);

/*
 * What `name` is in the directory `parent`, as a node not yet in the table
 * (its path is allocated; the caller frees it or hands it to mount_node_ref).
 */
int mount_lookup(struct mount_fs *fs, const struct mount_node *parent, const char *name,
                 struct mount_node *out);
/* 0 when the named file `node` still is its name's newest version, else -ESTALE (or an error). */
int mount_check_current(struct mount_fs *fs, const struct mount_node *node);
/* The children of `dir`, sorted by name, each once. */
int mount_list_dir(struct mount_fs *fs, const struct mount_node *dir, struct mount_dir *out);
void mount_dir_clear(struct mount_dir *d);
/*
 * Makes the child at position `i` present in the listing, at d->v[i -
 * d->base]: 0, 1 when there is no such child, or a negative errno.
 */
int mount_dir_seek(struct mount_fs *fs, struct mount_dir *d, uint64_t i);

/*
 * The calling thread's connection to cairnd, made on first use and again
 * after it broke; NULL when cairnd cannot be reached.
 */
struct client *mount_client(struct mount_fs *fs);
/* A client_*() result on `c` as a negative errno for FUSE. */
int mount_errno(struct client *c, int rc);
