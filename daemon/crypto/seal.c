#include "daemon/crypto/seal.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

/* Set once at start, before any worker reads it; read-only afterwards. */
static struct seal_master master;
static bool master_set;

void seal_set_master(const struct seal_master *m)
{
    master = *m;
    master_set = true;
}

void seal_get_master(struct seal_master *out)
{
    *out = master;
}

void seal_forget(void)
{
    OPENSSL_cleanse(&master, sizeof(master));
    master_set = false;
}

bool seal_on(void)
{
    return master_set;
}

void seal_keyed_id(uint8_t kind, const uint8_t id[SEAL_ID_LEN], uint8_t out[SEAL_ID_LEN])
{
    uint8_t msg[1 + SEAL_ID_LEN];
    unsigned int len = SEAL_ID_LEN;

    msg[0] = kind;
    memcpy(msg + 1, id, SEAL_ID_LEN);
    if (!HMAC(EVP_sha256(), master.mac, sizeof(master.mac), msg, sizeof(msg), out, &len))
        memset(out, 0, SEAL_ID_LEN); /* matches no record: the read fails integrity */
}

int seal_encrypt_with(const uint8_t key[SEAL_KEY_LEN], const uint8_t *aad, size_t aad_len,
                      const uint8_t *pt, size_t len, uint8_t *out)
{
    EVP_CIPHER_CTX *ctx;
    int n, ok;

    if (len > INT_MAX || aad_len > INT_MAX || RAND_bytes(out, SEAL_NONCE_LEN) != 1)
        return -EIO;
    if (!(ctx = EVP_CIPHER_CTX_new()))
        return -EIO;
    ok = EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, out) == 1 &&
         (aad_len == 0 || EVP_EncryptUpdate(ctx, NULL, &n, aad, (int)aad_len) == 1) &&
         EVP_EncryptUpdate(ctx, out + SEAL_NONCE_LEN, &n, pt, (int)len) == 1 &&
         EVP_EncryptFinal_ex(ctx, out + SEAL_NONCE_LEN + n, &n) == 1 &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, SEAL_TAG_LEN, out + SEAL_NONCE_LEN + len) ==
             1;
    EVP_CIPHER_CTX_free(ctx);
    return ok ? 0 : -EIO;
}

int seal_decrypt_with(const uint8_t key[SEAL_KEY_LEN], const uint8_t *aad, size_t aad_len,
                      const uint8_t *in, size_t len, uint8_t *out)
{
    EVP_CIPHER_CTX *ctx;
    uint8_t tag[SEAL_TAG_LEN];
    size_t ct;
    int n, ok;

    if (len < SEAL_OVERHEAD || len - SEAL_OVERHEAD > INT_MAX || aad_len > INT_MAX)
        return 1;
    ct = len - SEAL_OVERHEAD;
    memcpy(tag, in + SEAL_NONCE_LEN + ct, SEAL_TAG_LEN);
    if (!(ctx = EVP_CIPHER_CTX_new()))
        return -EIO;
    ok = EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, in) == 1 &&
         (aad_len == 0 || EVP_DecryptUpdate(ctx, NULL, &n, aad, (int)aad_len) == 1) &&
         EVP_DecryptUpdate(ctx, out, &n, in + SEAL_NONCE_LEN, (int)ct) == 1 &&
         EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, SEAL_TAG_LEN, tag) == 1 &&
         EVP_DecryptFinal_ex(ctx, out + n, &n) == 1;
    EVP_CIPHER_CTX_free(ctx);
    if (!ok) {
        /* What a failed open decrypted is not to be used: wipe it. */
        OPENSSL_cleanse(out, ct);
        return 1;
    }
    return 0;
}

int seal_stream_begin(struct seal_stream *s, const uint8_t *aad, size_t aad_len,
                      const uint8_t nonce[SEAL_NONCE_LEN])
{
    EVP_CIPHER_CTX *ctx;
    int n;

    s->ctx = NULL;
    s->failed = false;
    if (!master_set || aad_len > INT_MAX || !(ctx = EVP_CIPHER_CTX_new()))
        return -EIO;
    if (EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, master.enc, nonce) != 1 ||
        (aad_len && EVP_DecryptUpdate(ctx, NULL, &n, aad, (int)aad_len) != 1)) {
        EVP_CIPHER_CTX_free(ctx);
        return -EIO;
    }
    s->ctx = ctx;
    return 0;
}

void seal_stream_next(struct seal_stream *s, const uint8_t *in, size_t len, uint8_t *out)
{
    int n;

    if (s->failed || len == 0)
        return;
    if (len > INT_MAX || EVP_DecryptUpdate(s->ctx, out, &n, in, (int)len) != 1 || (size_t)n != len)
        s->failed = true;
}

int seal_stream_end(struct seal_stream *s, const uint8_t tag[SEAL_TAG_LEN])
{
    uint8_t t[SEAL_TAG_LEN], rest[16];
    int n, ok;

    memcpy(t, tag, sizeof(t));
    ok = !s->failed && EVP_CIPHER_CTX_ctrl(s->ctx, EVP_CTRL_GCM_SET_TAG, SEAL_TAG_LEN, t) == 1 &&
         EVP_DecryptFinal_ex(s->ctx, rest, &n) == 1;
    EVP_CIPHER_CTX_free(s->ctx);
    s->ctx = NULL;
    return ok ? 0 : 1;
}

int seal_encrypt(const uint8_t *aad, size_t aad_len, const uint8_t *pt, size_t len, uint8_t *out)
{
    if (!master_set)
        return -EINVAL;
    return seal_encrypt_with(master.enc, aad, aad_len, pt, len, out);
}

int seal_decrypt(const uint8_t *aad, size_t aad_len, const uint8_t *in, size_t len, uint8_t *out)
{
    if (!master_set)
        return 1;
    return seal_decrypt_with(master.enc, aad, aad_len, in, len, out);
}
