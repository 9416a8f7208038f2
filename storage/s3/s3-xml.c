/*
 * The walker of a ListObjectsV2 page on the shared tokenizer
 * (storage/http/xml.h): it picks the few elements S3 answers with and skips
 * every other one, wherever it is.
 */
#include "storage/s3/s3-xml.h"
#include "storage/http/xml.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

int s3_xml_parse_time(const char *s, int64_t *out)
{
    static const unsigned mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int y, mo, d, h, mi, sec;
    size_t len = strlen(s), i = 19;

    if (len < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':')
        return -EBADMSG;
    y = xml_digits(s, 4);
    mo = xml_digits(s + 5, 2);
    d = xml_digits(s + 8, 2);
    h = xml_digits(s + 11, 2);
    mi = xml_digits(s + 14, 2);
    sec = xml_digits(s + 17, 2);
    if (y < 1970 || mo < 1 || mo > 12 || d < 1 || (unsigned)d > mdays[mo - 1] || h < 0 || h > 23 ||
        mi < 0 || mi > 59 || sec < 0 || sec > 60)
        return -EBADMSG;
    if (s[i] == '.') {
        /* Fractions of a second: read, not kept. */
        for (i++; s[i] >= '0' && s[i] <= '9'; i++)
            ;
        if (s[i - 1] == '.')
            return -EBADMSG;
    }
    if (s[i] != 'Z' || s[i + 1] != '\0')
        return -EBADMSG;
    *out = xml_days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 + sec;
    return 0;
}

/* The elements of a list page that are read; everything else is skipped. */
enum list_field {
    LF_NONE,
    LF_KEY,
    LF_SIZE,
    LF_MTIME,
    LF_TRUNCATED,
    LF_TOKEN,
    LF_KEY_COUNT,
};

struct list_walk {
    size_t max_key;
    s3_xml_list_cb cb;
    void *opaque;
    struct s3_list_page *page;
    enum list_field field;
    unsigned field_depth;
    bool in_contents, have_key, have_size, have_mtime;
    unsigned seen; /* bit per page-level field, to refuse repeats */
    uint64_t size;
    int64_t mtime;
    size_t key_len;
    char key[S3_XML_MAX_KEY + 1];
    char small[32]; /* numbers, booleans and times */
    struct xml_text text;
};

static int list_open(struct xml *x, struct list_walk *w)
{
    enum list_field f = LF_NONE;

    if (w->field != LF_NONE)
        return -EBADMSG; /* no markup inside the values we read */
    if (x->depth == 1)
        return xml_tok_is(x, "ListBucketResult") ? 0 : -EBADMSG;
    if (x->depth == 2) {
        if (xml_tok_is(x, "Contents")) {
            w->in_contents = true;
            w->have_key = w->have_size = w->have_mtime = false;
            w->mtime = 0;
            return 0;
        }
        f = xml_tok_is(x, "IsTruncated")             ? LF_TRUNCATED
            : xml_tok_is(x, "NextContinuationToken") ? LF_TOKEN
            : xml_tok_is(x, "KeyCount")              ? LF_KEY_COUNT
                                                     : LF_NONE;
        if (f != LF_NONE) {
            if (w->seen & (1u << f))
                return -EBADMSG;
            w->seen |= 1u << f;
        }
    } else if (x->depth == 3 && w->in_contents) {
        f = xml_tok_is(x, "Key")            ? LF_KEY
            : xml_tok_is(x, "Size")         ? LF_SIZE
            : xml_tok_is(x, "LastModified") ? LF_MTIME
                                            : LF_NONE;
        if ((f == LF_KEY && w->have_key) || (f == LF_SIZE && w->have_size) ||
            (f == LF_MTIME && w->have_mtime))
            return -EBADMSG;
    }
    w->field = f;
    w->field_depth = x->depth;
    w->text = (struct xml_text){NULL, 0, 0, false};
    if (f == LF_KEY)
        w->text = (struct xml_text){w->key, w->max_key + 1, 0, false};
    else if (f == LF_TOKEN)
        w->text = (struct xml_text){w->page->next_token, sizeof(w->page->next_token), 0, false};
    else if (f != LF_NONE)
        w->text = (struct xml_text){w->small, sizeof(w->small), 0, false};
    if (w->text.buf)
        w->text.buf[0] = '\0';
    return 0;
}

static int list_close(struct xml *x, struct list_walk *w)
{
    enum list_field f = w->field;
    struct xml_text done = w->text;

    /* Fields hold no markup, so what follows any end tag is outside them. */
    w->text = (struct xml_text){NULL, 0, 0, false};
    if (f != LF_NONE && x->depth + 1 == w->field_depth) {
        w->field = LF_NONE;
        if (done.overflow)
            return f == LF_KEY ? -ENAMETOOLONG : -EBADMSG;
        switch (f) {
        case LF_KEY:
            w->have_key = true;
            w->key_len = done.len;
            return w->key_len ? 0 : -EBADMSG;
        case LF_SIZE:
            w->have_size = true;
            return xml_parse_u64(w->small, &w->size);
        case LF_MTIME:
            w->have_mtime = true;
            return s3_xml_parse_time(w->small, &w->mtime);
        case LF_TRUNCATED:
            return xml_parse_bool(w->small, &w->page->truncated);
        case LF_KEY_COUNT:
            w->page->has_key_count = true;
            return xml_parse_u64(w->small, &w->page->key_count);
        default:
            return 0;
        }
    }
    if (x->depth == 1 && w->in_contents) {
        w->in_contents = false;
        if (!w->have_key || !w->have_size)
            return -EBADMSG;
        w->page->entries++;
        if (w->cb) {
            int r = w->cb(w->opaque, w->key, w->key_len, w->size, w->mtime);
            if (r)
                return r;
        }
    }
    return 0;
}

static int list_walk(const char *buf, size_t len, struct list_walk *w)
{
    struct xml x;
    int t, r;

    xml_init(&x, buf, len);
    while ((t = xml_next(&x)) > XML_EOF) {
        if (t == XML_OPEN)
            r = list_open(&x, w);
        else if (t == XML_CLOSE)
            r = list_close(&x, w);
        else
            r = xml_text_add(&w->text, x.tok, x.tok_len);
        if (r)
            return r;
    }
    if (t < 0)
        return t;
    if (w->page->truncated && !w->page->next_token[0])
        return -EBADMSG;
    return 0;
}

int s3_xml_parse_list(const char *buf, size_t len, size_t max_key, s3_xml_list_cb cb, void *opaque,
                      struct s3_list_page *page)
{
    struct list_walk w;
    int r;

    if (max_key == 0 || max_key > S3_XML_MAX_KEY)
        return -EINVAL;
    /* A NUL has no place in XML, and would end the C strings handed on. */
    if (memchr(buf, '\0', len))
        return -EBADMSG;
    /*
     * Two passes: the first checks the whole page, so that the callback
     * never sees the entries of a page that turns out to be broken further
     * down (a response cut short would otherwise look like a short page).
     */
    for (int pass = 0; pass < 2; pass++) {
        memset(page, 0, sizeof(*page));
        memset(&w, 0, offsetof(struct list_walk, key));
        w.text = (struct xml_text){NULL, 0, 0, false};
        w.max_key = max_key;
        w.cb = pass ? cb : NULL;
        w.opaque = opaque;
        w.page = page;
        if ((r = list_walk(buf, len, &w))) {
            memset(page, 0, sizeof(*page));
            return r;
        }
    }
    return 0;
}
