#pragma once

/*
 * The objects by which the writers of a shared bucket run gc together
 * (README "Several machines, one bucket"), as keys and bytes. Pure encoding
 * and decoding: no I/O.
 *
 *   gc/<W>-<G>           a mark: writer W's gc run G copied the live records
 *                        of the packs it lists ("pack" lines) into the packs
 *                        it lists as "copy", and will delete the former once
 *                        every writer has acknowledged the mark, or the
 *                        grace period has passed
 *   gc/<W>-<G>.ack-<X>   writer X's acknowledgement: it relies on none of
 *                        the marked packs' records any more
 *   gc/<W>-<G>.done      the marked packs are deleted (or about to be); the
 *                        records found alive at the end were copied into
 *                        the packs it lists as "copy"
 *   locks/gc-<W>         writer W holds the bucket's gc lease; it lapses
 *                        when not renewed, judged by the server's times
 *
 * W, X and G are sixteen hex digits. A mark or done body is text:
 *
 *   cairn gc mark 1          (or: cairn gc done 1)
 *   writer <W>
 *   gen <G>
 *   pack <key>               any number of these (a mark's)
 *   copy <key>               and of these
 *
 * Keys are pack keys (storage/pack: packs/<W>-<seq> or packs/<seq>). A
 * reader refuses anything else: unknown lines, keys that are not packs,
 * more than GCMARK_MAX_KEYS keys, a body over GCMARK_MAX_BODY bytes.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GCMARK_DIR "gc/"
#define GCMARK_LOCKS_DIR "locks/"
/* "gc/<16>-<16>.ack-<16>" and its NUL */
#define GCMARK_KEY_MAX 64
#define GCMARK_MAX_KEYS (1u << 20)
#define GCMARK_MAX_BODY (64u << 20)

enum gcmark_kind { GCMARK_MARK, GCMARK_ACK, GCMARK_DONE };

/* The key of a mark, its done object, or X's ack (`acker` only for GCMARK_ACK). */
void gcmark_key(char *out, size_t len, enum gcmark_kind kind, uint64_t writer, uint64_t gen,
                uint64_t acker);
/* What a key under gc/ is: 0, or -EINVAL for anything not made by gcmark_key. */
int gcmark_key_parse(const char *key, enum gcmark_kind *kind, uint64_t *writer, uint64_t *gen,
                     uint64_t *acker);
/* The first key of writer's objects under gc/ from gen on, as a listing's cursor (before it). */
void gcmark_cursor(char *out, size_t len, uint64_t writer, uint64_t gen);
/* The key of writer's gc lease. */
void gcmark_lock_key(char *out, size_t len, uint64_t writer);
/* The writer of a lease key: 0, or -EINVAL. */
int gcmark_lock_key_parse(const char *key, uint64_t *writer);

struct gcmark {
    bool done; /* a done body, else a mark */
    uint64_t writer, gen;
    char (*packs)[GCMARK_KEY_MAX]; /* marked packs (a mark's only) */
    size_t npacks;
    char (*copies)[GCMARK_KEY_MAX]; /* packs that hold copies */
    size_t ncopies;
};

/* Appends a key to packs (copy: to copies). 0 or -ENOMEM, -E2BIG. */
int gcmark_add(struct gcmark *m, bool copy, const char *key);
/* The body (malloc'd). 0 or -ENOMEM. */
int gcmark_encode(const struct gcmark *m, char **out, size_t *out_len);
/* Parses a body; 0 or -EBADMSG (then *m is empty), -ENOMEM. */
int gcmark_parse(const char *buf, size_t len, struct gcmark *m);
void gcmark_clear(struct gcmark *m);
