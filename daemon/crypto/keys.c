#include "daemon/crypto/keys.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

const struct key_params keys_default_params = {.n = 1u << 15, .r = 8, .p = 1};

static const char wrap_aad[] = "cairn key 1";

static bool params_ok(const struct key_params *kp)
{
    if (kp->n < (1u << 10) || kp->n > (1u << 20) || (kp->n & (kp->n - 1)) != 0)
        return false;
    if (kp->r < 1 || kp->r > 32 || kp->p < 1 || kp->p > 16)
        return false;
    return 128ull * kp->r * kp->n <= KEYS_MAX_MEM;
}

static void hex_encode(const uint8_t *in, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * len] = '\0';
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* Exactly 2 * len lower-case hex digits into out: true, else false. */
static bool hex_decode(const char *in, uint8_t *out, size_t len)
{
    if (!in || strlen(in) != 2 * len)
        return false;
    for (size_t i = 0; i < len; i++) {
        int hi = hex_digit(in[2 * i]), lo = hex_digit(in[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

static int derive(const struct key_params *kp, const uint8_t salt[KEYS_SALT_LEN], const char *pass,
                  size_t plen, uint8_t key[SEAL_KEY_LEN])
{
    /* scrypt's own need, 128 * r * (N + p + 2), and some room. */
    uint64_t maxmem = 128ull * kp->r * (kp->n + kp->p + 2) + (1u << 20);

    if (EVP_PBE_scrypt(pass, plen, salt, KEYS_SALT_LEN, kp->n, kp->r, kp->p, maxmem, key,
                       SEAL_KEY_LEN) != 1)
        return -EIO;
    return 0;
}

static bool int_field(json_t *o, const char *name, uint64_t lo, uint64_t hi, uint64_t *out)
{
    json_t *v = json_object_get(o, name);

    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return *out >= lo && *out <= hi;
}

int key_object_parse(const char *text, size_t len, struct key_object *ko)
{
    json_t *o;
    uint64_t version, n, r, p, created;
    bool ok;

    memset(ko, 0, sizeof(*ko));
    if (len > KEYS_MAX_OBJECT)
        return KEYS_E_BAD;
    if (!(o = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL)))
        return KEYS_E_BAD;
    ok = json_is_object(o) && int_field(o, "cairn_key", 1, 1, &version) &&
         json_is_string(json_object_get(o, "kdf")) &&
         strcmp(json_string_value(json_object_get(o, "kdf")), "scrypt") == 0 &&
         json_is_string(json_object_get(o, "aead")) &&
         strcmp(json_string_value(json_object_get(o, "aead")), KEYS_AEAD) == 0 &&
         int_field(o, "N", 1, UINT32_MAX, &n) && int_field(o, "r", 1, 1024, &r) &&
         int_field(o, "p", 1, 1024, &p) && int_field(o, "created", 0, INT64_MAX, &created) &&
         hex_decode(json_string_value(json_object_get(o, "salt")), ko->salt, KEYS_SALT_LEN) &&
         hex_decode(json_string_value(json_object_get(o, "data")), ko->data, KEYS_DATA_LEN);
    json_decref(o);
    if (!ok)
        return KEYS_E_BAD;
    ko->kp = (struct key_params){.n = n, .r = (uint32_t)r, .p = (uint32_t)p};
    ko->created = (int64_t)created;
    return params_ok(&ko->kp) ? 0 : KEYS_E_BAD;
}

int key_object_make(const struct seal_master *m, const char *pass, size_t plen,
                    const struct key_params *kp, char **text, size_t *len)
{
    struct key_object ko = {.kp = kp ? *kp : keys_default_params, .created = (int64_t)time(NULL)};
    uint8_t wrap[SEAL_KEY_LEN], plain[2 * SEAL_KEY_LEN];
    char salt_hex[2 * KEYS_SALT_LEN + 1], data_hex[2 * KEYS_DATA_LEN + 1];
    int r;

    if (!params_ok(&ko.kp))
        return -EINVAL;
    if (RAND_bytes(ko.salt, sizeof(ko.salt)) != 1)
        return -EIO;
    if ((r = derive(&ko.kp, ko.salt, pass, plen, wrap)) != 0)
        return r;
    memcpy(plain, m->enc, SEAL_KEY_LEN);
    memcpy(plain + SEAL_KEY_LEN, m->mac, SEAL_KEY_LEN);
    r = seal_encrypt_with(wrap, (const uint8_t *)wrap_aad, sizeof(wrap_aad) - 1, plain,
                          sizeof(plain), ko.data);
    OPENSSL_cleanse(wrap, sizeof(wrap));
    OPENSSL_cleanse(plain, sizeof(plain));
    if (r != 0)
        return r;
    hex_encode(ko.salt, KEYS_SALT_LEN, salt_hex);
    hex_encode(ko.data, KEYS_DATA_LEN, data_hex);
    json_t *o =
        json_pack("{s:i, s:s, s:I, s:i, s:i, s:s, s:s, s:s, s:I}", "cairn_key", 1, "kdf", "scrypt",
                  "N", (json_int_t)ko.kp.n, "r", (int)ko.kp.r, "p", (int)ko.kp.p, "salt", salt_hex,
                  "aead", KEYS_AEAD, "data", data_hex, "created", (json_int_t)ko.created);
    if (!o)
        return -ENOMEM;
    *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!*text)
        return -ENOMEM;
    *len = strlen(*text);
    return 0;
}

int key_object_open(const struct key_object *ko, const char *pass, size_t plen,
                    struct seal_master *m)
{
    uint8_t wrap[SEAL_KEY_LEN], plain[2 * SEAL_KEY_LEN];
    int r;

    if (!params_ok(&ko->kp))
        return KEYS_E_WRONG;
    if ((r = derive(&ko->kp, ko->salt, pass, plen, wrap)) != 0)
        return r;
    r = seal_decrypt_with(wrap, (const uint8_t *)wrap_aad, sizeof(wrap_aad) - 1, ko->data,
                          KEYS_DATA_LEN, plain);
    OPENSSL_cleanse(wrap, sizeof(wrap));
    if (r != 0)
        return r < 0 ? r : KEYS_E_WRONG;
    memcpy(m->enc, plain, SEAL_KEY_LEN);
    memcpy(m->mac, plain + SEAL_KEY_LEN, SEAL_KEY_LEN);
    OPENSSL_cleanse(plain, sizeof(plain));
    return 0;
}

int keys_new_master(struct seal_master *m)
{
    return RAND_bytes((uint8_t *)m, sizeof(*m)) == 1 ? 0 : -EIO;
}

int keys_new_id(char out[KEYS_ID_LEN + 1])
{
    uint8_t id[KEYS_ID_LEN / 2];

    if (RAND_bytes(id, sizeof(id)) != 1)
        return -EIO;
    hex_encode(id, sizeof(id), out);
    return 0;
}

int keys_key_parse(const char *key, char id[KEYS_ID_LEN + 1])
{
    uint8_t bin[KEYS_ID_LEN / 2];
    size_t plen = strlen(KEYS_DIR);

    if (strncmp(key, KEYS_DIR, plen) != 0 || !hex_decode(key + plen, bin, sizeof(bin)))
        return -EINVAL;
    memcpy(id, key + plen, KEYS_ID_LEN);
    id[KEYS_ID_LEN] = '\0';
    return 0;
}

int store_config_encode(bool encrypted, char **text, size_t *len)
{
    json_t *o =
        json_pack("{s:i, s:s}", "cairn_store", 1, "encryption", encrypted ? KEYS_AEAD : "off");

    if (!o)
        return -ENOMEM;
    *text = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(o);
    if (!*text)
        return -ENOMEM;
    *len = strlen(*text);
    return 0;
}

int store_config_parse(const char *text, size_t len, bool *encrypted)
{
    json_t *o;
    uint64_t version;
    const char *mode;
    int r = KEYS_E_BAD;

    if (len > KEYS_MAX_OBJECT || !(o = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL)))
        return KEYS_E_BAD;
    mode = json_string_value(json_object_get(o, "encryption"));
    if (json_is_object(o) && int_field(o, "cairn_store", 1, 1, &version) && mode &&
        (strcmp(mode, KEYS_AEAD) == 0 || strcmp(mode, "off") == 0)) {
        *encrypted = strcmp(mode, "off") != 0;
        r = 0;
    }
    json_decref(o);
    return r;
}
