#pragma once

/*
 * Collects a document's content for the search index while it streams in,
 * as long as it is text: well-formed UTF-8 without NUL bytes. Content past
 * the size limit is not kept; the prefix stays indexed. A document that turns
 * out not to be text keeps nothing.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct text_acc {
    char *buf;
    size_t len, cap;
    size_t valid; /* buf[0..valid) is checked; a cut sequence may follow */
    size_t max;
    bool ok;
};

void text_acc_init(struct text_acc *t, size_t max);
/* Appends the next piece of content; `final` when no more follows. */
void text_acc_feed(struct text_acc *t, const uint8_t *data, size_t len, bool final);
/* The text to index, or NULL when the document is not text. */
const char *text_acc_text(const struct text_acc *t, size_t *len);
void text_acc_clear(struct text_acc *t);
