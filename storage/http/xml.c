/*
 * The XML reader that the HTTP backends share (xml.h): a tokenizer
 * (xml_next) that checks well-formedness as it goes - names, quoted
 * attributes, balanced and matching tags, one root, nothing but space
 * around it - the decoding of character data, and the <Error> document
 * that S3 and Azure both answer a failure with. Each backend walks the
 * tokens of its own list response (storage/s3/s3-xml.c,
 * storage/azure/azure-xml.c).
 */
#include "storage/http/xml.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

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
    if (read_name(x) || x->root_closed || x->depth == XML_MAX_DEPTH)
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
int xml_next(struct xml *x)
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
            return -EBADMSG; /* DOCTYPE, CDATA: neither S3 nor Azure sends them */
        } else if (starts(x, x->p, "</")) {
            return read_close_tag(x);
        } else {
            return read_open_tag(x);
        }
    }
}

bool xml_tok_is(const struct xml *x, const char *name)
{
    return strlen(name) == x->tok_len && memcmp(x->tok, name, x->tok_len) == 0;
}

static void text_put(struct xml_text *t, const char *s, size_t n)
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

static void text_put_utf8(struct xml_text *t, uint32_t cp)
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
int xml_text_add(struct xml_text *t, const char *s, size_t n)
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
void xml_text_trim_partial(struct xml_text *t)
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
int xml_parse_u64(const char *s, uint64_t *out)
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

int xml_parse_bool(const char *s, bool *out)
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
int64_t xml_days_from_civil(int64_t y, unsigned m, unsigned d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + (int64_t)doe - 719468;
}

/* n decimal digits at s, as a number; -1 when they are not all digits. */
int xml_digits(const char *s, unsigned n)
{
    int v = 0;
    for (unsigned i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

void xml_init(struct xml *x, const char *buf, size_t len)
{
    memset(x, 0, sizeof(*x));
    x->p = buf;
    x->end = buf + len;
    /* A UTF-8 byte order mark may come first. */
    if (starts(x, x->p, "\xef\xbb\xbf"))
        x->p += 3;
}

int xml_parse_error(const char *buf, size_t len, struct xml_error *err)
{
    struct xml_text text = {NULL, 0, 0, false};
    struct xml_text *field = NULL;
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
            if (x.depth == 1 && !xml_tok_is(&x, "Error"))
                goto bad;
            text = (struct xml_text){NULL, 0, 0, false};
            if (x.depth == 2 && xml_tok_is(&x, "Code")) {
                if (seen_code)
                    goto bad;
                seen_code = true;
                text = (struct xml_text){err->code, sizeof(err->code), 0, false};
                field = &text;
            } else if (x.depth == 2 && xml_tok_is(&x, "Message")) {
                if (seen_message)
                    goto bad;
                seen_message = true;
                text = (struct xml_text){err->message, sizeof(err->message), 0, false};
                field = &text;
            }
        } else if (t == XML_CLOSE) {
            if (field && x.depth == 1) {
                xml_text_trim_partial(field);
                field = NULL;
                text = (struct xml_text){NULL, 0, 0, false};
            }
        } else if (xml_text_add(&text, x.tok, x.tok_len)) {
            goto bad;
        }
    }
    if (t == XML_EOF)
        return 0;
bad:
    memset(err, 0, sizeof(*err));
    return -EBADMSG;
}
