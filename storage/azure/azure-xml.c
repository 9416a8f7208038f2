/*
 * The walker of a List Blobs page (azure-xml.h): it picks the few elements
 * it needs and skips every other one, wherever it is.
 */
#include "storage/azure/azure-xml.h"
#include "storage/http/xml.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

int az_xml_parse_time(const char *s, int64_t *out)
{
    static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";
    static const unsigned mdays[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int d, y, h, mi, sec, mo = -1;

    /* "Www, DD Mon YYYY HH:MM:SS GMT": 29 characters, fixed places. */
    if (strlen(s) != 29 || s[3] != ',' || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' ||
        s[16] != ' ' || s[19] != ':' || s[22] != ':' || strcmp(s + 25, " GMT") != 0)
        return -EBADMSG;
    for (int i = 0; i < 12; i++) {
        if (memcmp(s + 8, months + 3 * i, 3) == 0)
            mo = i + 1;
    }
    d = xml_digits(s + 5, 2);
    y = xml_digits(s + 12, 4);
    h = xml_digits(s + 17, 2);
    mi = xml_digits(s + 20, 2);
    sec = xml_digits(s + 23, 2);
    if (mo < 0 || y < 1970 || d < 1 || (unsigned)d > mdays[mo - 1] || h < 0 || h > 23 || mi < 0 ||
        mi > 59 || sec < 0 || sec > 60)
        return -EBADMSG;
    *out = xml_days_from_civil(y, (unsigned)mo, (unsigned)d) * 86400 + h * 3600 + mi * 60 + sec;
    return 0;
}

enum field {
    F_NONE,
    F_NAME,
    F_SIZE,
    F_MTIME,
    F_MARKER,
};

struct walk {
    size_t max_name;
    az_xml_list_cb cb;
    void *opaque;
    struct az_list_page *page;
    enum field field;
    unsigned field_depth;
    bool in_blobs, in_blob, in_props, seen_marker, seen_blobs;
    bool have_name, have_size, have_mtime;
    uint64_t size;
    int64_t mtime;
    size_t name_len;
    char name[AZ_XML_MAX_NAME + 1];
    char small[40];
    struct xml_text text;
};

static int on_open(struct xml *x, struct walk *w)
{
    enum field f = F_NONE;

    if (w->field != F_NONE)
        return -EBADMSG; /* no markup inside the values we read */
    switch (x->depth) {
    case 1:
        return xml_tok_is(x, "EnumerationResults") ? 0 : -EBADMSG;
    case 2:
        if (xml_tok_is(x, "Blobs")) {
            if (w->seen_blobs)
                return -EBADMSG;
            w->seen_blobs = w->in_blobs = true;
            return 0;
        }
        if (xml_tok_is(x, "NextMarker")) {
            if (w->seen_marker)
                return -EBADMSG;
            w->seen_marker = true;
            f = F_MARKER;
        }
        break;
    case 3:
        if (w->in_blobs && xml_tok_is(x, "Blob")) {
            w->in_blob = true;
            w->have_name = w->have_size = w->have_mtime = false;
            w->mtime = 0;
            return 0;
        }
        break;
    case 4:
        if (!w->in_blob)
            break;
        if (xml_tok_is(x, "Properties")) {
            w->in_props = true;
            return 0;
        }
        if (xml_tok_is(x, "Name")) {
            if (w->have_name)
                return -EBADMSG;
            f = F_NAME;
        }
        break;
    case 5:
        if (!w->in_props)
            break;
        if (xml_tok_is(x, "Content-Length"))
            f = F_SIZE;
        else if (xml_tok_is(x, "Last-Modified"))
            f = F_MTIME;
        if ((f == F_SIZE && w->have_size) || (f == F_MTIME && w->have_mtime))
            return -EBADMSG;
        break;
    default:
        break;
    }
    w->field = f;
    w->field_depth = x->depth;
    w->text = (struct xml_text){NULL, 0, 0, false};
    if (f == F_NAME)
        w->text = (struct xml_text){w->name, w->max_name + 1, 0, false};
    else if (f == F_MARKER)
        w->text = (struct xml_text){w->page->next_marker, sizeof(w->page->next_marker), 0, false};
    else if (f != F_NONE)
        w->text = (struct xml_text){w->small, sizeof(w->small), 0, false};
    if (w->text.buf)
        w->text.buf[0] = '\0';
    return 0;
}

static int on_close(struct xml *x, struct walk *w)
{
    enum field f = w->field;
    struct xml_text done = w->text;

    w->text = (struct xml_text){NULL, 0, 0, false};
    if (f != F_NONE && x->depth + 1 == w->field_depth) {
        w->field = F_NONE;
        if (done.overflow)
            return f == F_NAME ? -ENAMETOOLONG : -EBADMSG;
        switch (f) {
        case F_NAME:
            w->have_name = true;
            w->name_len = done.len;
            return w->name_len ? 0 : -EBADMSG;
        case F_SIZE:
            w->have_size = true;
            return xml_parse_u64(w->small, &w->size);
        case F_MTIME:
            w->have_mtime = true;
            return az_xml_parse_time(w->small, &w->mtime);
        default:
            return 0;
        }
    }
    if (x->depth == 3 && w->in_props) {
        w->in_props = false;
    } else if (x->depth == 2 && w->in_blob) {
        w->in_blob = false;
        if (!w->have_name || !w->have_size)
            return -EBADMSG;
        w->page->entries++;
        if (w->cb) {
            int r = w->cb(w->opaque, w->name, w->name_len, w->size, w->mtime);
            if (r)
                return r;
        }
    } else if (x->depth == 1 && w->in_blobs) {
        w->in_blobs = false;
    }
    return 0;
}

static int walk(const char *buf, size_t len, struct walk *w)
{
    struct xml x;
    int t, r;

    xml_init(&x, buf, len);
    while ((t = xml_next(&x)) > XML_EOF) {
        if (t == XML_OPEN)
            r = on_open(&x, w);
        else if (t == XML_CLOSE)
            r = on_close(&x, w);
        else
            r = xml_text_add(&w->text, x.tok, x.tok_len);
        if (r)
            return r;
    }
    return t < 0 ? t : 0;
}

int az_xml_parse_list(const char *buf, size_t len, size_t max_name, az_xml_list_cb cb, void *opaque,
                      struct az_list_page *page)
{
    struct walk w;
    int r;

    if (max_name == 0 || max_name > AZ_XML_MAX_NAME)
        return -EINVAL;
    if (memchr(buf, '\0', len))
        return -EBADMSG;
    /* Two passes: the callback never sees the entries of a page broken further down. */
    for (int pass = 0; pass < 2; pass++) {
        memset(page, 0, sizeof(*page));
        memset(&w, 0, offsetof(struct walk, name));
        w.text = (struct xml_text){NULL, 0, 0, false};
        w.max_name = max_name;
        w.cb = pass ? cb : NULL;
        w.opaque = opaque;
        w.page = page;
        if ((r = walk(buf, len, &w))) {
            memset(page, 0, sizeof(*page));
            return r;
        }
    }
    return 0;
}
