#include "daemon/format/text.h"

#include <stdlib.h>
#include <string.h>

/*
 * Length of the longest prefix of s[0..len) that is well-formed UTF-8 without
 * NUL bytes, stopping before a sequence that may continue past `len`.
 * *bad is set when an invalid byte (not merely a cut sequence) was found.
 */
static size_t utf8_prefix(const uint8_t *s, size_t len, bool *bad)
{
    size_t i = 0;

    *bad = false;
    while (i < len) {
        uint8_t c = s[i];
        size_t n;
        uint32_t cp;
        if (c == 0) {
            *bad = true;
            return i;
        }
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf)
            n = 2, cp = c & 0x1f;
        else if (c >= 0xe0 && c <= 0xef)
            n = 3, cp = c & 0x0f;
        else if (c >= 0xf0 && c <= 0xf4)
            n = 4, cp = c & 0x07;
        else {
            *bad = true;
            return i;
        }
        if (i + n > len) {
            for (size_t k = i + 1; k < len; k++) {
                if ((s[k] & 0xc0) != 0x80) {
                    *bad = true;
                    return i;
                }
            }
            return i; /* cut: the next piece may complete it */
        }
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xc0) != 0x80) {
                *bad = true;
                return i;
            }
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        /* Overlong forms, surrogates and values past U+10FFFF are not text. */
        if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff)) {
            *bad = true;
            return i;
        }
        i += n;
    }
    return i;
}

void text_acc_init(struct text_acc *t, size_t max)
{
    *t = (struct text_acc){.max = max, .ok = max > 0};
}

void text_acc_clear(struct text_acc *t)
{
    free(t->buf);
    t->buf = NULL;
    t->len = t->cap = t->valid = 0;
}

const char *text_acc_text(const struct text_acc *t, size_t *len)
{
    *len = t->len;
    return t->ok ? (t->buf ? t->buf : "") : NULL;
}

void text_acc_feed(struct text_acc *t, const uint8_t *data, size_t len, bool final)
{
    size_t room = t->max - t->len;
    bool bad;

    if (!t->ok || room == 0 || len == 0)
        goto check_end;
    if (len > room)
        len = room;
    if (t->len + len > t->cap) {
        size_t cap = t->cap ? t->cap : 64 * 1024;
        while (cap < t->len + len)
            cap *= 2;
        if (cap > t->max)
            cap = t->max;
        char *grown = realloc(t->buf, cap);
        if (!grown) {
            t->ok = false;
            return;
        }
        t->buf = grown;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, data, len);
    t->len += len;
    t->valid += utf8_prefix((uint8_t *)t->buf + t->valid, t->len - t->valid, &bad);
    if (bad)
        t->ok = false;
check_end:
    /* A sequence cut at the end is fine only where the size limit cut it. */
    if (t->ok && final && t->valid != t->len) {
        if (t->len < t->max)
            t->ok = false;
        else
            t->len = t->valid;
    }
    if (!t->ok)
        text_acc_clear(t);
}
