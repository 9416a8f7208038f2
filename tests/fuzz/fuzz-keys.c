/*
 * The objects of an encrypted store's bucket (daemon/crypto/keys.h): key
 * objects and the config object as anyone who can write to the bucket could
 * leave them, and keys under keys/ as a listing could return them. A key
 * object that parses has scrypt parameters within the bounds; one of the
 * cheapest cost is also opened, and must refuse a passphrase that made
 * nothing of it (its data is not a master key wrapped under it).
 */
#include <stdlib.h>
#include <string.h>

#include "daemon/crypto/keys.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct key_object ko;
    struct seal_master m;
    bool encrypted;
    char key[256], id[KEYS_ID_LEN + 1];

    if (size < sizeof(key)) {
        memcpy(key, data, size);
        key[size] = '\0';
        if (keys_key_parse(key, id) == 0 &&
            (strlen(id) != KEYS_ID_LEN || strcmp(key + strlen(KEYS_DIR), id) != 0))
            abort();
    }
    (void)store_config_parse((const char *)data, size, &encrypted);
    if (key_object_parse((const char *)data, size, &ko) != 0)
        return 0;
    if (ko.kp.n < 1024 || ko.kp.n > (1u << 20) || (ko.kp.n & (ko.kp.n - 1)) || ko.kp.r < 1 ||
        ko.kp.r > 32 || ko.kp.p < 1 || ko.kp.p > 16 || 128ull * ko.kp.r * ko.kp.n > KEYS_MAX_MEM)
        abort();
    /* The cheapest cost only: a fuzzer tries many inputs. */
    if (ko.kp.n == 1024 && ko.kp.r == 1 && ko.kp.p == 1 &&
        key_object_open(&ko, "fuzz", 4, &m) == 0) {
        /* 2^-128 by chance: a tag that matches a passphrase nobody used. */
        abort();
    }
    return 0;
}
