#pragma once

/*
 * Helpers shared by the wire protocol's unit tests, one program in six files:
 * test-proto.c (the validator accepts every msgpack type), test-proto-frame.c
 * (framing), test-proto-reject.c (what the validator rejects: truncations,
 * hostile counts, depth), test-proto-msg.c (message parsing, the typed
 * getters, error replies and the error-name vocabulary), test-proto-hex.c
 * (the hex helpers) and test-proto-fuzz.c (deterministic fuzz loops): a frame
 * builder, exact-size copies for the validator, and byte strings to reject.
 */
#include "proto/proto.h"
#include "proto/util.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

/* A frame under construction: proto_frame_begin() on init, _end() on finish. */
struct frame {
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    size_t start;
};

static inline void frame_init(struct frame *f)
{
    msgpack_sbuffer_init(&f->sbuf);
    msgpack_packer_init(&f->pk, &f->sbuf, msgpack_sbuffer_write);
    assert_int_equal(proto_frame_begin(&f->sbuf, &f->start), 0);
}

static inline void frame_finish(struct frame *f)
{
    proto_frame_end(&f->sbuf, f->start);
}

static inline const uint8_t *frame_payload(const struct frame *f)
{
    return (const uint8_t *)f->sbuf.data + f->start + 4;
}

static inline size_t frame_payload_len(const struct frame *f)
{
    return f->sbuf.size - f->start - 4;
}

static inline void frame_destroy(struct frame *f)
{
    msgpack_sbuffer_destroy(&f->sbuf);
}

/* Copies `len` bytes into an exact-size heap block so ASan sees any over-read. */
static inline uint8_t *exact_copy(const void *src, size_t len)
{
    uint8_t *p = malloc(len ? len : 1);
    assert_non_null(p);
    if (len)
        memcpy(p, src, len);
    return p;
}

static inline int validate_exact(const void *buf, size_t len, unsigned depth)
{
    uint8_t *copy = exact_copy(buf, len);
    int r = proto_validate(copy, len, depth);
    free(copy);
    return r;
}

/* A byte string that some entry point must reject. */
struct bad_case {
    const char *name;
    const char *bytes;
    size_t len;
};

#define BAD(name, lit)                                                                             \
    {                                                                                              \
        name, lit, sizeof(lit) - 1                                                                 \
    }

/* The groups of the other files, in the order main() runs them; each returns its failures. */
int test_proto_frame_run(void);
int test_proto_reject_run(void);
int test_proto_msg_run(void);
int test_proto_hex_run(void);
int test_proto_fuzz_run(void);
