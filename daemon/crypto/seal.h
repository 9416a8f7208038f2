#pragma once

/*
 * Encryption at rest (README "Encryption at rest"): the AEAD that seals
 * every record and pack index of an encrypted store, and the keyed ids that
 * stand in for SHA-256 content addresses in what the bucket sees.
 *
 * The AEAD is AES-256-GCM (OpenSSL EVP, AES-NI and PCLMULQDQ on x86-64,
 * the ARMv8 crypto extensions on arm64). A sealed blob is
 *
 *   nonce [12] | ciphertext [len] | tag [16]          (SEAL_OVERHEAD = 28)
 *
 * with a fresh random 96-bit nonce from RAND_bytes for every blob: the
 * writers of a bucket share one master key and keep no common counter, and
 * a counter in a data directory repeats when the directory is copied or
 * restored. With random nonces the chance of any repeat stays below 2^-32
 * until 2^32 blobs were sealed under one key (NIST SP 800-38D, 8.3); a pack
 * holds at least a few hundred records per MiB and a store a few million.
 *
 * The master key is 64 random bytes: the AES key and the key of the keyed
 * ids (HMAC-SHA-256). Once a daemon has unwrapped it (crypto/keys.h) it is
 * set here once, before any record is read or written, and read by every
 * thread; seal_forget wipes it. No master key set: the store is plain, and
 * a sealed record is refused (it belongs to an encrypted store).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SEAL_KEY_LEN 32
#define SEAL_NONCE_LEN 12
#define SEAL_TAG_LEN 16
#define SEAL_OVERHEAD (SEAL_NONCE_LEN + SEAL_TAG_LEN)
#define SEAL_ID_LEN 32

/* The master key: AES-256-GCM key and keyed-id key. */
struct seal_master {
    uint8_t enc[SEAL_KEY_LEN];
    uint8_t mac[SEAL_KEY_LEN];
};

/* Makes m the key of every record from now on (copied; wipe yours). */
void seal_set_master(const struct seal_master *m);
/* A copy of the master key (only with seal_on(); wipe it after use). */
void seal_get_master(struct seal_master *out);
/* Wipes the master key; the store is treated as plain afterwards. */
void seal_forget(void);
/* Whether a master key is set (the store is encrypted). */
bool seal_on(void);

/*
 * The keyed id that stands for `id` (a SHA-256) of kind `kind` (a record
 * type, or any small domain tag) in the bucket: HMAC-SHA-256 under the
 * master key's mac half of kind || id. Only with seal_on().
 */
void seal_keyed_id(uint8_t kind, const uint8_t id[SEAL_ID_LEN], uint8_t out[SEAL_ID_LEN]);

/*
 * Seals pt[0..len) with the master key into out (len + SEAL_OVERHEAD
 * bytes), binding aad: 0, or -EIO when OpenSSL fails (no randomness).
 */
int seal_encrypt(const uint8_t *aad, size_t aad_len, const uint8_t *pt, size_t len, uint8_t *out);
/*
 * Opens a sealed blob in[0..len) into out (len - SEAL_OVERHEAD bytes): 0, or
 * 1 when it is too short, was sealed with other associated data or another
 * key, or was altered.
 */
int seal_decrypt(const uint8_t *aad, size_t aad_len, const uint8_t *in, size_t len, uint8_t *out);

/*
 * seal_decrypt in pieces, so that each part of the plaintext can go where it
 * is wanted (a block's body straight into its caller's buffer): begin with
 * the blob's nonce, then next() for each consecutive piece of the
 * ciphertext, then end() with the tag, which frees the stream and says
 * whether the whole was intact (0) or not (1). Nothing decrypted may be
 * used before end() returned 0, only looked at to find the pieces. end()
 * must be called once begin() returned 0, whatever happened between.
 */
struct seal_stream {
    void *ctx;
    bool failed;
};
int seal_stream_begin(struct seal_stream *s, const uint8_t *aad, size_t aad_len,
                      const uint8_t nonce[SEAL_NONCE_LEN]);
void seal_stream_next(struct seal_stream *s, const uint8_t *in, size_t len, uint8_t *out);
int seal_stream_end(struct seal_stream *s, const uint8_t tag[SEAL_TAG_LEN]);

/* The same two under an explicit key (the wrapping of key objects). */
int seal_encrypt_with(const uint8_t key[SEAL_KEY_LEN], const uint8_t *aad, size_t aad_len,
                      const uint8_t *pt, size_t len, uint8_t *out);
int seal_decrypt_with(const uint8_t key[SEAL_KEY_LEN], const uint8_t *aad, size_t aad_len,
                      const uint8_t *in, size_t len, uint8_t *out);
