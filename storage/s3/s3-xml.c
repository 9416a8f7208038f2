/*
 * The reader is a tokenizer (xml_next) that checks well-formedness as it
 * goes - names, quoted attributes, balanced and matching tags, one root,
 * nothing but space around it - and two small walkers on top that pick the
 * few elements S3 answers with and skip every other one, wherever it is.
 */
#include "storage/s3/s3-xml.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

enum xml_token {
    XML_EOF,
    XML_OPEN,
    XML_CLOSE,
    XML_TEXT,
};

struct xml {
    const char *p, *end;
    const char *open_name[S3_XML_MAX_DEPTH];
    size_t open_len[S3_XML_MAX_DEPTH];
    unsigned depth;
    bool root_seen, root_closed;
    bool self_closing; /* the last XML_OPEN was <name/>: an XML_CLOSE comes next */
    /* The current token: a tag's name, or a run of character data. */
    const char *tok;
    size_t tok_len;
};

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool is_name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
           (unsigned char)c >= 0x80;
}

static bool is_name_char(char c)
{
    return is_name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.';
}

/* Does the input at q start with lit? Never reads past the end. */
static bool starts(const struct xml *x, const char *q, const char *lit)
{
    size_t n = strlen(lit);
    return (size_t)(x->end - q) >= n && memcmp(q, lit, n) == 0;
}

static void skip_space(struct xml *x)
{
    while (x->p < x->end && is_space(*x->p))
        x->p++;
}

/* A name at x->p: sets tok, advances past it. */
static int read_name(struct xml *x)
{
    const char *start = x->p;

    if (x->p >= x->end || !is_name_start(*x->p))
        return -EBADMSG;
    while (x->p < x->end && is_name_char(*x->p))
        x->p++;
    x->tok = start;
    x->tok_len = (size_t)(x->p - start);
    return 0;
}

/* Skips past the next occurrence of lit, which must be there. */
static int skip_past(struct xml *x, const char *from, const char *lit)
{
    const char *hit = memmem(from, (size_t)(x->end - from), lit, strlen(lit));
    if (!hit)
        return -EBADMSG;
    x->p = hit + strlen(lit);
    return 0;
}

/* Attributes (xmlns and the like) are checked for shape and skipped. */
static int skip_attributes(struct xml *x)
{
    for (;;) {
        const char *before = x->p;
        skip_space(x);
        if (x->p >= x->end)
            return -EBADMSG;
        if (*x->p == '>') {
            x->p++;
            return 0;
        }
        if (starts(x, x->p, "/>")) {
            x->p += 2;
            x->self_closing = true;
            return 0;
        }
        if (x->p == before || read_name(x)) /* an attribute needs space before it */
            return -EBADMSG;
        skip_space(x);
        if (x->p >= x->end || *x->p != '=')
            return -EBADMSG;
        x->p++;
        skip_space(x);
        if (x->p >= x->end || (*x->p != '"' && *x->p != '\''))
            return -EBADMSG;
        const char *value = x->p + 1;
        const char *close = memchr(value, *x->p, (size_t)(x->end - value));
        if (!close || memchr(value, '<', (size_t)(close - value)))
            return -EBADMSG;
        x->p = close + 1;
    }
}

static int read_close_tag(struct xml *x)
{
    unsigned top;

    x->p += 2;
    if (read_name(x))
        return -EBADMSG;
    skip_space(x);
    if (x->p >= x->end || *x->p != '>' || x->depth == 0)
        return -EBADMSG;
    x->p++;
    top = x->depth - 1;
    if (x->open_len[top] != x->tok_len || memcmp(x->open_name[top], x->tok, x->tok_len))
        return -EBADMSG;
    x->depth--;
    x->root_closed = x->depth == 0;
    return XML_CLOSE;
}

static int read_open_tag(struct xml *x)
{
    x->p++;
    if (read_name(x) || x->root_closed || x->depth == S3_XML_MAX_DEPTH)
        return -EBADMSG;
    x->open_name[x->depth] = x->tok;
    x->open_len[x->depth] = x->tok_len;
    x->depth++;
    x->root_seen = true;
    if (skip_attributes(x))
        return -EBADMSG;
    /* The attributes' names went through tok: it names the element again. */
    x->tok = x->open_name[x->depth - 1];
    x->tok_len = x->open_len[x->depth - 1];
    return XML_OPEN;
}

/* The next token, or -EBADMSG. After XML_OPEN, depth counts the new element. */
static int xml_next(struct xml *x)
{
    if (x->self_closing) {
        x->self_closing = false;
        x->depth--;
        x->root_closed = x->depth == 0;
        return XML_CLOSE; /* tok still names the element */
    }
    for (;;) {
        if (x->p >= x->end)
            return x->root_seen && x->depth == 0 ? XML_EOF : -EBADMSG;
        if (*x->p != '<') {
            const char *lt = memchr(x->p, '<', (size_t)(x->end - x->p));
            x->tok = x->p;
            x->tok_len = (size_t)((lt ? lt : x->end) - x->p);
            x->p += x->tok_len;
            if (x->depth > 0)
                return XML_TEXT;
            for (size_t i = 0; i < x->tok_len; i++) {
                if (!is_space(x->tok[i]))
                    return -EBADMSG;
            }
            continue;
        }
        if (starts(x, x->p, "<?")) {
            if (skip_past(x, x->p + 2, "?>"))
                return -EBADMSG;
        } else if (starts(x, x->p, "<!--")) {
            if (skip_past(x, x->p + 4, "-->"))
                return -EBADMSG;
        } else if (starts(x, x->p, "<!")) {
            return -EBADMSG; /* DOCTYPE, CDATA: S3 sends neither */
        } else if (starts(x, x->p, "</")) {
            return read_close_tag(x);
        } else {
            return read_open_tag(x);
        }
    }
}

static bool tok_is(const struct xml *x, const char *name)
{
    return strlen(name) == x->tok_len && memcmp(x->tok, name, x->tok_len) == 0;
}

/* Decoded character data of one element, gathered across comments. */
struct text {
    char *buf; /* NULL: only check the entities */
    size_t cap, len;
    bool overflow;
};

static void text_put(struct text *t, const char *s, size_t n)
{
    if (!t->buf)
        return;
    if (t->len + n >= t->cap) {
        t->overflow = true;
        n = t->len + 1 < t->cap ? t->cap - 1 - t->len : 0;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

static void text_put_utf8(struct text *t, uint32_t cp)
{
    char u[4];
    size_t n;

    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | cp >> 6);
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | cp >> 12);
        u[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | cp >> 18);
        u[1] = (char)(0x80 | (cp >> 12 & 0x3f));
        u[2] = (char)(0x80 | (cp >> 6 & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    text_put(t, u, n);
}

/* "#123" or "#x7B" (without & and ;) as a code point; -1 when it is none. */
static long char_ref(const char *s, size_t n)
{
    unsigned base = 10;
    long cp = 0;
    size_t i = 1;

    if (n >= 2 && s[1] == 'x') {
        base = 16;
        i = 2;
    }
    if (i == n || n - i > 8) /* 8 digits hold every code point, with leading zeros */
        return -1;
    for (; i < n; i++) {
        char c = s[i];
        int d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (base == 16 && c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (base == 16 && c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        cp = cp * (long)base + d;
    }
    /*
     * S3 writes a key's control characters as references that XML 1.0 does
     * not allow (&#x1;); they are taken, as they are legal in keys. NUL and
     * the UTF-16 surrogates are not characters at all.
     */
    if (cp == 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return -1;
    return cp;
}

/* Appends character data s[0..n), entities decoded; -EBADMSG for a bad one. */
static int text_add(struct text *t, const char *s, size_t n)
{
    static const struct {
        const char *name;
        char c;
    } named[] = {{"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
    size_t i = 0;

    while (i < n) {
        const char *amp = memchr(s + i, '&', n - i);
        size_t plain = (size_t)((amp ? amp : s + n) - (s + i));
        text_put(t, s + i, plain);
        i += plain;
        if (!amp)
            break;
        /* The longest reference is "#x0010FFFF"; look no further for the ';'. */
        size_t room = n - i - 1 < 12 ? n - i - 1 : 12;
        const char *semi = memchr(s + i + 1, ';', room);
        if (!semi)
            return -EBADMSG;
        const char *ref = s + i + 1;
        size_t ref_len = (size_t)(semi - ref);
        if (ref_len > 0 && ref[0] == '#') {
            long cp = char_ref(ref, ref_len);
            if (cp < 0)
                return -EBADMSG;
            text_put_utf8(t, (uint32_t)cp);
        } else {
            size_t k;
            for (k = 0; k < sizeof(named) / sizeof(named[0]); k++) {
                if (strlen(named[k].name) == ref_len && memcmp(named[k].name, ref, ref_len) == 0)
                    break;
            }
            if (k == sizeof(named) / sizeof(named[0]))
                return -EBADMSG;
            text_put(t, &named[k].c, 1);
        }
        i += ref_len + 2;
    }
    return 0;
}

/* Drops a UTF-8 sequence that a cut left incomplete at the end. */
static void text_trim_partial(struct text *t)
{
    size_t i = t->len, back = 0;

    while (i > 0 && back < 4 && ((unsigned char)t->buf[i - 1] & 0xc0) == 0x80) {
        i--;
        back++;
    }
    if (i == 0)
        return;
    unsigned char lead = (unsigned char)t->buf[i - 1];
    size_t want = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    if (want > back + 1) {
        t->len = i - 1;
        t->buf[t->len] = '\0';
    }
}

/* An unsigned decimal, XML space around it allowed, overflow refused. */
static int parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0, digits = 0;

    while (is_space(s[i]))
        i++;
    for (; s[i] >= '0' && s[i] <= '9'; i++, digits++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -EBADMSG;
        v = v * 10 + d;
    }
    while (is_space(s[i]))
        i++;
    if (digits == 0 || s[i])
        return -EBADMSG;
    *out = v;
    return 0;
}

static int parse_bool(const char *s, bool *out)
{
    size_t i = strspn(s, " \t\r\n"), n = strcspn(s + i, " \t\r\n");

    if (s[i + n + strspn(s + i + n, " \t\r\n")])
        return -EBADMSG;
    if (n == 4 && memcmp(s + i, "true", 4) == 0)
        *out = true;
    else if (n == 5 && memcmp(s + i, "false", 5) == 0)
        *out = false;
    else
        return -EBADMSG;
    return 0;
}

/* Days from 1970-01-01 to y-m-d of the proleptic Gregorian calendar. */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

/* n decimal digits at s, as a number; -1 when they are not all digits. */
static int digits(const char *s, unsigned n)
{
    int v = 0;
    for (unsigned i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

int s3_xml_parse_time(const char *s, int64_t *out)
{
    static const unsigned mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int y, mo, d, h, mi, sec;
    size_t len = strlen(s), i = 19;

    if (len < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':')
        return -EBADMSG;
    y = digits(s, 4);
    mo = digits(s + 5, 2);
    d = digits(s + 8, 2);
    h = digits(s + 11, 2);
    mi = digits(s + 14, 2);
    sec = digits(s + 17, 2);
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
    *out = days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 + sec;
    return 0;
}

static void xml_init(struct xml *x, const char *buf, size_t len)
{
    memset(x, 0, sizeof(*x));
    x->p = buf;
    x->end = buf + len;
    /* A UTF-8 byte order mark may come first. */
    if (starts(x, x->p, "\xef\xbb\xbf"))
        x->p += 3;
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
    struct text text;
};

static int list_open(struct xml *x, struct list_walk *w)
{
    enum list_field f = LF_NONE;

    if (w->field != LF_NONE)
        return -EBADMSG; /* no markup inside the values we read */
    if (x->depth == 1)
        return tok_is(x, "ListBucketResult") ? 0 : -EBADMSG;
    if (x->depth == 2) {
        if (tok_is(x, "Contents")) {
            w->in_contents = true;
            w->have_key = w->have_size = w->have_mtime = false;
            w->mtime = 0;
            return 0;
        }
        f = tok_is(x, "IsTruncated")             ? LF_TRUNCATED
            : tok_is(x, "NextContinuationToken") ? LF_TOKEN
            : tok_is(x, "KeyCount")              ? LF_KEY_COUNT
                                                 : LF_NONE;
        if (f != LF_NONE) {
            if (w->seen & (1u << f))
                return -EBADMSG;
            w->seen |= 1u << f;
        }
    } else if (x->depth == 3 && w->in_contents) {
        f = tok_is(x, "Key")            ? LF_KEY
            : tok_is(x, "Size")         ? LF_SIZE
            : tok_is(x, "LastModified") ? LF_MTIME
                                        : LF_NONE;
        if ((f == LF_KEY && w->have_key) || (f == LF_SIZE && w->have_size) ||
            (f == LF_MTIME && w->have_mtime))
            return -EBADMSG;
    }
    w->field = f;
    w->field_depth = x->depth;
    w->text = (struct text){NULL, 0, 0, false};
    if (f == LF_KEY)
        w->text = (struct text){w->key, w->max_key + 1, 0, false};
    else if (f == LF_TOKEN)
        w->text = (struct text){w->page->next_token, sizeof(w->page->next_token), 0, false};
    else if (f != LF_NONE)
        w->text = (struct text){w->small, sizeof(w->small), 0, false};
    if (w->text.buf)
        w->text.buf[0] = '\0';
    return 0;
}

static int list_close(struct xml *x, struct list_walk *w)
{
    enum list_field f = w->field;
    struct text done = w->text;

    /* Fields hold no markup, so what follows any end tag is outside them. */
    w->text = (struct text){NULL, 0, 0, false};
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
            return parse_u64(w->small, &w->size);
        case LF_MTIME:
            w->have_mtime = true;
            return s3_xml_parse_time(w->small, &w->mtime);
        case LF_TRUNCATED:
            return parse_bool(w->small, &w->page->truncated);
        case LF_KEY_COUNT:
            w->page->has_key_count = true;
            return parse_u64(w->small, &w->page->key_count);
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
            r = text_add(&w->text, x.tok, x.tok_len);
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
        w.text = (struct text){NULL, 0, 0, false};
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

int s3_xml_parse_error(const char *buf, size_t len, struct s3_xml_error *err)
{
    struct text text = {NULL, 0, 0, false};
    struct text *field = NULL;
    struct xml x;
    bool seen_code = false, seen_message = false;
    int t;

    memset(err, 0, sizeof(*err));
    if (memchr(buf, '\0', len))
        return -EBADMSG;
    xml_init(&x, buf, len);
    while ((t = xml_next(&x)) > XML_EOF) {
        if (t == XML_OPEN) {
            if (field)
                goto bad;
            if (x.depth == 1 && !tok_is(&x, "Error"))
                goto bad;
            text = (struct text){NULL, 0, 0, false};
            if (x.depth == 2 && tok_is(&x, "Code")) {
                if (seen_code)
                    goto bad;
                seen_code = true;
                text = (struct text){err->code, sizeof(err->code), 0, false};
                field = &text;
            } else if (x.depth == 2 && tok_is(&x, "Message")) {
                if (seen_message)
                    goto bad;
                seen_message = true;
                text = (struct text){err->message, sizeof(err->message), 0, false};
                field = &text;
            }
        } else if (t == XML_CLOSE) {
            if (field && x.depth == 1) {
                text_trim_partial(field);
                field = NULL;
                text = (struct text){NULL, 0, 0, false};
            }
        } else if (text_add(&text, x.tok, x.tok_len)) {
            goto bad;
        }
    }
    if (t == XML_EOF)
        return 0;
bad:
    memset(err, 0, sizeof(*err));
    return -EBADMSG;
}
