/* Recognising UTF-8: to guess whether content is text, and to keep JSON output valid. */

#include "client/client.h"

#include <string.h>

int client_utf8_seq(const uint8_t *s, size_t len)
{
    uint8_t b = s[0];
    uint8_t lo = 0x80, hi = 0xbf; /* range of the second byte */
    int n;

    if (b < 0x80)
        return 1;
    if (b < 0xc2) /* continuation byte, or an overlong two-byte form */
        return 0;
    if (b < 0xe0) {
        n = 2;
    } else if (b < 0xf0) {
        n = 3;
        if (b == 0xe0)
            lo = 0xa0; /* overlong */
        else if (b == 0xed)
            hi = 0x9f; /* UTF-16 surrogates */
    } else if (b < 0xf5) {
        n = 4;
        if (b == 0xf0)
            lo = 0x90; /* overlong */
        else if (b == 0xf4)
            hi = 0x8f; /* above U+10FFFF */
    } else {
        return 0;
    }
    for (int i = 1; i < n; i++) {
        if ((size_t)i >= len)
            return -1;
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xbf))
            return 0;
    }
    return n;
}

const char *client_mime_guess(const uint8_t *data, size_t len)
{
    size_t window = len < CLIENT_MIME_WINDOW ? len : CLIENT_MIME_WINDOW;

    if (memchr(data, '\0', window))
        return "application/octet-stream";
    for (size_t i = 0; i < window;) {
        int n = client_utf8_seq(data + i, window - i);
        if (n == 0 || (n < 0 && window == len))
            return "application/octet-stream";
        if (n < 0)
            break; /* cut by the window, not by the end of the content */
        i += (size_t)n;
    }
    return "text/plain";
}
