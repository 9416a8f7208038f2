/* The shared bucket's gc objects (gcmark.h): keys, and the bodies of marks and done objects. */
#include "daemon/format/gcmark.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "storage/pack/pack.h"

void gcmark_key(char *out, size_t len, enum gcmark_kind kind, uint64_t writer, uint64_t gen,
                uint64_t acker)
{
    switch (kind) {
    case GCMARK_MARK:
        snprintf(out, len, GCMARK_DIR "%016" PRIx64 "-%016" PRIx64, writer, gen);
        break;
    case GCMARK_DONE:
        snprintf(out, len, GCMARK_DIR "%016" PRIx64 "-%016" PRIx64 ".done", writer, gen);
        break;
    case GCMARK_ACK:
        snprintf(out, len, GCMARK_DIR "%016" PRIx64 "-%016" PRIx64 ".ack-%016" PRIx64, writer, gen,
                 acker);
        break;
    }
}

/* Sixteen lower-case hex digits at s. */
static int hex16(const char *s, uint64_t *out)
{
    uint64_t v = 0;

    for (int i = 0; i < 16; i++) {
        char c = s[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else
            return -EINVAL;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

int gcmark_key_parse(const char *key, enum gcmark_kind *kind, uint64_t *writer, uint64_t *gen,
                     uint64_t *acker)
{
    size_t dl = strlen(GCMARK_DIR), len = strlen(key);
    const char *p = key + dl;

    if (len < dl + 33 || strncmp(key, GCMARK_DIR, dl) != 0 || p[16] != '-' ||
        hex16(p, writer) < 0 || hex16(p + 17, gen) < 0 || *writer == 0)
        return -EINVAL;
    p += 33;
    *acker = 0;
    if (*p == '\0') {
        *kind = GCMARK_MARK;
        return 0;
    }
    if (strcmp(p, ".done") == 0) {
        *kind = GCMARK_DONE;
        return 0;
    }
    if (strncmp(p, ".ack-", 5) == 0 && strlen(p) == 21 && hex16(p + 5, acker) == 0 && *acker) {
        *kind = GCMARK_ACK;
        return 0;
    }
    return -EINVAL;
}

void gcmark_cursor(char *out, size_t len, uint64_t writer, uint64_t gen)
{
    /*
     * Listings start after the cursor: "<W>-" sorts before all of W's
     * objects, and "<W>-<gen - 1>~" after gen - 1's ('~' after '.', and
     * before gen's next hex digit).
     */
    if (gen == 0)
        snprintf(out, len, GCMARK_DIR "%016" PRIx64 "-", writer);
    else
        snprintf(out, len, GCMARK_DIR "%016" PRIx64 "-%016" PRIx64 "~", writer, gen - 1);
}

void gcmark_lock_key(char *out, size_t len, uint64_t writer)
{
    snprintf(out, len, GCMARK_LOCKS_DIR "gc-%016" PRIx64, writer);
}

int gcmark_lock_key_parse(const char *key, uint64_t *writer)
{
    size_t dl = strlen(GCMARK_LOCKS_DIR "gc-");

    if (strlen(key) != dl + 16 || strncmp(key, GCMARK_LOCKS_DIR "gc-", dl) != 0 ||
        hex16(key + dl, writer) < 0 || *writer == 0)
        return -EINVAL;
    return 0;
}

int gcmark_add(struct gcmark *m, bool copy, const char *key)
{
    char(**v)[GCMARK_KEY_MAX] = copy ? &m->copies : &m->packs;
    size_t *n = copy ? &m->ncopies : &m->npacks;

    if (strlen(key) >= GCMARK_KEY_MAX)
        return -EINVAL;
    if (m->npacks + m->ncopies >= GCMARK_MAX_KEYS)
        return -E2BIG;
    /* Room for 8, then grown in powers of two. */
    if (*n == 0 || (*n >= 8 && (*n & (*n - 1)) == 0)) {
        size_t cap = *n ? *n * 2 : 8;
        char(*grown)[GCMARK_KEY_MAX] = realloc(*v, cap * GCMARK_KEY_MAX);
        if (!grown)
            return -ENOMEM;
        *v = grown;
    }
    snprintf((*v)[(*n)++], GCMARK_KEY_MAX, "%s", key);
    return 0;
}

int gcmark_encode(const struct gcmark *m, char **out, size_t *out_len)
{
    size_t cap = 96 + (m->npacks + m->ncopies) * (GCMARK_KEY_MAX + 8), len;
    char *buf = malloc(cap);
    int n;

    if (!buf)
        return -ENOMEM;
    n = snprintf(buf, cap, "cairn gc %s 1\nwriter %016" PRIx64 "\ngen %016" PRIx64 "\n",
                 m->done ? "done" : "mark", m->writer, m->gen);
    len = (size_t)n;
    for (size_t i = 0; i < m->npacks; i++)
        len += (size_t)snprintf(buf + len, cap - len, "pack %s\n", m->packs[i]);
    for (size_t i = 0; i < m->ncopies; i++)
        len += (size_t)snprintf(buf + len, cap - len, "copy %s\n", m->copies[i]);
    *out = buf;
    *out_len = len;
    return 0;
}

void gcmark_clear(struct gcmark *m)
{
    free(m->packs);
    free(m->copies);
    memset(m, 0, sizeof(*m));
}

/* One line "<word> <16 hex digits>". */
static int hex_line(const char *line, size_t len, const char *word, uint64_t *out)
{
    size_t wl = strlen(word);

    if (len != wl + 17 || strncmp(line, word, wl) != 0 || line[wl] != ' ')
        return -EBADMSG;
    return hex16(line + wl + 1, out) == 0 ? 0 : -EBADMSG;
}

int gcmark_parse(const char *buf, size_t len, struct gcmark *m)
{
    const char *p = buf, *end = buf + len;
    unsigned lineno = 0;
    int r = 0;

    memset(m, 0, sizeof(*m));
    if (len > GCMARK_MAX_BODY || len == 0 || buf[len - 1] != '\n' || memchr(buf, '\0', len))
        return -EBADMSG;
    while (r == 0 && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t ll = (size_t)(nl - p);
        char key[GCMARK_KEY_MAX];
        uint64_t w, s;

        switch (lineno++) {
        case 0:
            if (ll == 15 && memcmp(p, "cairn gc mark 1", 15) == 0)
                m->done = false;
            else if (ll == 15 && memcmp(p, "cairn gc done 1", 15) == 0)
                m->done = true;
            else
                r = -EBADMSG;
            break;
        case 1:
            r = hex_line(p, ll, "writer", &m->writer);
            if (r == 0 && m->writer == 0)
                r = -EBADMSG;
            break;
        case 2:
            r = hex_line(p, ll, "gen", &m->gen);
            break;
        default:
            if (ll < 6 || ll - 5 >= GCMARK_KEY_MAX ||
                (memcmp(p, "pack ", 5) != 0 && memcmp(p, "copy ", 5) != 0)) {
                r = -EBADMSG;
                break;
            }
            memcpy(key, p + 5, ll - 5);
            key[ll - 5] = '\0';
            /* Only packs, named as pack_key() names them; a done body marks none. */
            if (pack_key_parse(key, &w, &s) < 0 || (p[0] == 'p' && m->done)) {
                r = -EBADMSG;
                break;
            }
            r = gcmark_add(m, p[0] == 'c', key);
            if (r == -E2BIG || r == -EINVAL)
                r = -EBADMSG;
        }
        p = nl + 1;
    }
    if (r == 0 && lineno < 3)
        r = -EBADMSG;
    if (r != 0)
        gcmark_clear(m);
    return r;
}
