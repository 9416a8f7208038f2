#pragma once

/*
 * A small XML reader for the responses of the HTTP backends: S3's
 * ListObjectsV2 pages, Azure's List Blobs pages, and the <Error> document
 * both answer a failure with. It is not a general XML parser: it knows
 * elements, attributes (skipped), character data with the five predefined
 * entities and numeric character references, comments and processing
 * instructions (skipped), and refuses the rest (DOCTYPE, CDATA). It reads
 * `len` bytes that need not end in a NUL, never allocates, never recurses,
 * and holds at most XML_MAX_DEPTH open elements, so a hostile or truncated
 * response costs one linear pass and ends in -EBADMSG, never in a read
 * past the buffer. Each backend walks the tokens of its own documents.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Open elements at once; S3's and Azure's documents nest five deep at most. */
#define XML_MAX_DEPTH 16

enum xml_token {
    XML_EOF,
    XML_OPEN,
    XML_CLOSE,
    XML_TEXT,
};

struct xml {
    const char *p, *end;
    const char *open_name[XML_MAX_DEPTH];
    size_t open_len[XML_MAX_DEPTH];
    unsigned depth;
    bool root_seen, root_closed;
    bool self_closing; /* the last XML_OPEN was <name/>: an XML_CLOSE comes next */
    /* The current token: a tag's name, or a run of character data. */
    const char *tok;
    size_t tok_len;
};

/* Decoded character data of one element, gathered across comments. */
struct xml_text {
    char *buf; /* NULL: only check the entities */
    size_t cap, len;
    bool overflow; /* more than cap - 1 bytes: what fits is kept, NUL-terminated */
};

/* Starts reading buf[0..len) (a UTF-8 byte order mark first is skipped). */
void xml_init(struct xml *x, const char *buf, size_t len);
/* The next token (enum xml_token), or -EBADMSG. After XML_OPEN, depth counts the new element. */
int xml_next(struct xml *x);
/* Is the current token (a tag's name) exactly `name`? */
bool xml_tok_is(const struct xml *x, const char *name);
/* Appends character data s[0..n), entities decoded; -EBADMSG for a bad one. */
int xml_text_add(struct xml_text *t, const char *s, size_t n);
/* Drops a UTF-8 sequence that a cut left incomplete at the end. */
void xml_text_trim_partial(struct xml_text *t);
/* An unsigned decimal, XML space around it allowed, overflow refused: 0 or -EBADMSG. */
int xml_parse_u64(const char *s, uint64_t *out);
/* "true" or "false", XML space around it allowed: 0 or -EBADMSG. */
int xml_parse_bool(const char *s, bool *out);
/* Days from 1970-01-01 to y-m-d of the proleptic Gregorian calendar. */
int64_t xml_days_from_civil(int64_t y, unsigned m, unsigned d);
/* n decimal digits at s, as a number; -1 when they are not all digits. */
int xml_digits(const char *s, unsigned n);

struct xml_error {
    char code[64];     /* "NoSuchBucket", "ServerBusy"; cut to fit */
    char message[256]; /* cut to fit, at a UTF-8 character boundary */
};

/* Parses an <Error> document. 0 (code may still be "" if the server gave none) or -EBADMSG. */
int xml_parse_error(const char *buf, size_t len, struct xml_error *err);
