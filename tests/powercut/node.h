#pragma once
/*
 * powercutfs's tree (node.c): every file and directory as a node that holds
 * two states, the current one and the durable one, with the directory entries
 * that name it in each. A sync copies a node's current state to its durable
 * one; a revert, what a cut does, copies it back. Paths are looked up in the
 * current state. Single threaded, like the file system. Functions that can
 * fail return 0 or -ENOMEM.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "content.h"

struct fuse_context;

struct entry {
    char *name;
    struct node *node;
};

struct entries {
    struct entry *v;
    size_t n, cap;
};

struct node {
    struct node *prev, *next; /* every node, for a cut */
    unsigned refs;            /* entries (either state) + open handles */
    unsigned nlink;           /* entries in the current state */
    mode_t mode;
    uid_t uid;
    gid_t gid;
    uint64_t ino;
    struct timespec mtime, ctime;
    bool dirty;                  /* the current state differs from the durable one */
    struct content cur, dur;     /* regular files */
    struct entries cur_e, dur_e; /* directories */
};

/* Every node, and what the syncs and reverts have done so far. */
struct nodes {
    struct node *root;
    struct node *all;
    uint64_t next_ino;
    unsigned long dropped, syncs;
};

extern struct nodes nodes;

/* A new node owned by `owner`: the caller of a request, NULL for this process. */
struct node *node_new(mode_t mode, const struct fuse_context *owner);
/* Drops a reference; the last one frees the node and its entries. */
void node_unref(struct node *nd);
/* Marks a change to the node's current state. */
void node_touch(struct node *nd);
/* Makes the node's current state durable: an fsync of it. */
int node_sync(struct node *nd);
/* Makes the node's durable state current again: what a crash leaves. */
int node_revert(struct node *nd);
/* Applies fn to every node; returns the first error, after all of them ran. */
int node_for_all(int (*fn)(struct node *));

struct entry *entries_find(const struct entries *e, const char *name);
/* `current` says whether the list is a current state, which counts toward st_nlink. */
int entries_add(struct entries *e, const char *name, struct node *nd, bool current);
void entries_remove(struct entries *e, struct entry *ent, bool current);

/* The node at `path` in the current state, or NULL. */
struct node *node_lookup(const char *path);
/* The directory that holds `path`, and the last component of it in *name. */
struct node *node_lookup_parent(const char *path, const char **name);
