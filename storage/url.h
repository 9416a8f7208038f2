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
