#pragma once

/*
 * The pieces of backend URL parsing that every remote backend shares: the
 * percent-decoder (which refuses what could smuggle a NUL or overflow its
 * buffer), the "name=value&..." iterator of a query, and bounded unsigned
 * numbers. Each backend's own *-url.c says what its parameters mean.
 */

#include <stddef.h>

/* Decodes s[0..n) into out (NUL-terminated). '+' stays a plus: these are URLs,
 * not HTML forms. -1 on a bad escape, a decoded NUL, or no room. */
int url_decode(const char *s, size_t n, char *out, size_t out_len);

/*
 * Takes the next "name=value" from a query string at *q (without the '?'),
 * skipping empty parts, and advances *q past it. The name is copied as is,
 * the value percent-decoded. 1 with a parameter, 0 at the end, -1 for a
 * part without '=', a name longer than name_len - 1, or a bad value.
 */
int url_next_param(const char **q, char *name, size_t name_len, char *value, size_t value_len);

/* A decimal number in [min, max], digits only (no sign, no spaces). 0 or -1. */
int url_parse_uint(const char *v, unsigned long min, unsigned long max, unsigned long *out);

#include <stdbool.h>

/* Well-formed UTF-8 without control characters (keys go back in XML 1.0). */
bool url_text_ok(const char *s);

/* What is wrong with a prefix, or URL_PREFIX_OK: each backend says it in its own words. */
enum url_prefix_error {
    URL_PREFIX_OK,
    URL_PREFIX_ESCAPE,    /* a bad escape, or too long */
    URL_PREFIX_EMPTY_SEG, /* "//" */
    URL_PREFIX_DOT_SEG,   /* a "." or ".." segment, which HTTP clients remove */
    URL_PREFIX_TEXT,      /* not UTF-8, or control characters */
};

/*
 * The PREFIX of a URL, s[0..n) as it stands after the bucket or container:
 * percent-decoded into prefix (prefix_len bytes), its leading and trailing
 * '/' dropped ("" for none).
 */
enum url_prefix_error url_parse_prefix(const char *s, size_t n, char *prefix, size_t prefix_len);

/* Copies a secret (printable ASCII without space, 1 to dst_len - 1 bytes). 0 or -1. */
int url_copy_secret(char *dst, size_t dst_len, const char *v);

/* "0" or "1". 0 or -1. */
int url_parse_flag(const char *v, bool *out);

/* A number of seconds or connections in [1, max]. 0 or -1. */
int url_parse_count(const char *v, unsigned long max, unsigned *out);

/* The index of name in names[0..count), or count when it is none of them. */
unsigned url_param_index(const char *name, const char *const *names, unsigned count);

/*
 * Calls set(ctx, name, value) for every parameter of query (without the
 * '?'), in name/value buffers of the caller's, and wipes the value after
 * each (it may be a secret). NULL when every one was set; the first message
 * set returned; or bad_syntax when a part is not a good name=value.
 */
const char *url_each_param(const char *query, char *name, size_t name_len, char *value,
                           size_t value_len,
                           const char *(*set)(void *ctx, const char *name, const char *value),
                           void *ctx, const char *bad_syntax);

/* Which timeout is longer than the whole request's, or URL_TIMEOUTS_OK. */
enum url_timeouts_error {
    URL_TIMEOUTS_OK,
    URL_CONNECT_TOO_LONG,
    URL_STALL_TOO_LONG,
};

/*
 * A connect or stall timeout not given (0) takes its default, or the
 * request's timeout when that is shorter: it follows a short timeout down
 * rather than contradict it. Then neither may be longer than the timeout.
 */
enum url_timeouts_error url_settle_timeouts(unsigned timeout, unsigned *connect, unsigned *stall,
                                            unsigned default_connect, unsigned default_stall);

/* Appends to out[0..len) as snprintf would, keeping it NUL-terminated when full. */
__attribute__((format(printf, 4, 5))) void url_append(char *out, size_t len, size_t *used,
                                                      const char *fmt, ...);

/* Appends a prefix percent-encoded as a URL would need it ('/' kept). */
void url_append_prefix(char *out, size_t len, size_t *used, const char *prefix);
