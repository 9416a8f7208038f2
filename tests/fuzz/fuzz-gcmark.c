/*
 * The gc objects of a shared bucket (daemon/format/gcmark.h): mark and done
 * bodies as another writer, or anyone who can write to the bucket, could
 * leave them, and keys under gc/ and locks/ as a listing could return them.
 * What parses must encode back to what parses the same.
 */
#include <stdlib.h>
#include <string.h>

#include "daemon/format/gcmark.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct gcmark m, again;
    enum gcmark_kind kind;
    uint64_t w, g, a;
    char key[256];
    char *out;
    size_t out_len;

    if (size < sizeof(key)) {
        memcpy(key, data, size);
        key[size] = '\0';
        if (gcmark_key_parse(key, &kind, &w, &g, &a) == 0) {
            char back[GCMARK_KEY_MAX];
            gcmark_key(back, sizeof(back), kind, w, g, a);
            if (strcmp(back, key) != 0)
                abort();
        }
        (void)gcmark_lock_key_parse(key, &w);
    }
    if (gcmark_parse((const char *)data, size, &m) != 0)
        return 0;
    if (gcmark_encode(&m, &out, &out_len) == 0) {
        if (gcmark_parse(out, out_len, &again) != 0 || again.npacks != m.npacks ||
            again.ncopies != m.ncopies || again.writer != m.writer || again.gen != m.gen)
            abort();
        gcmark_clear(&again);
        free(out);
    }
    gcmark_clear(&m);
    return 0;
}
