#pragma once

/*
 * Room kept for gc and deletes on a full disk: a file of RESERVE_BYTES in
 * the data directory (cairnd.reserve), made at start when there is room. A
 * delete writes a journal entry and commits to the database, and gc commits
 * too: on a disk that adds have filled, both would fail and nothing could be
 * freed. When the data directory's file system has less than RESERVE_BYTES
 * free, a delete or a gc removes the file first; once there is room again
 * (four times as much free), a later one makes it again, and so does
 * reserve_retake(), which cairnd runs every few seconds while the reserve is
 * given away: before adds fill the disk again.
 */

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#define RESERVE_BYTES (2u * 1024 * 1024)

struct reserve {
    char path[PATH_MAX];
    pthread_mutex_t lock;
    atomic_bool held;
};

/* Sets the reserve up in data_dir and makes the file if there is room (blocking: at start). */
void reserve_init(struct reserve *r, const char *data_dir);
/* Gives the room back when the disk is nearly full, takes it again when there is plenty. Blocking:
 * worker threads (and start-up) only. */
void reserve_adjust(struct reserve *r);
/* Takes the room again if it is given away and there is plenty. Blocking: worker threads. */
void reserve_retake(struct reserve *r);
/* Whether the room is given away (any thread: it never blocks). */
bool reserve_given(struct reserve *r);
void reserve_destroy(struct reserve *r);
