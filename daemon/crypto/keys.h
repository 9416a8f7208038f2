#pragma once

/*
 * The bucket objects of an encrypted store (README "Encryption at rest"):
 *
 *   store/config   the store's mode, put once by the daemon that made the
 *                  store and read by every writer and every --rebuild-index:
 *                  {"cairn_store":1,"encryption":"aes-256-gcm"} (or "off").
 *   keys/<id>      one per passphrase, id 32 random hex digits; each holds
 *                  the master key (seal.h) wrapped under a key derived from
 *                  its passphrase with scrypt:
 *                  {"cairn_key":1,"kdf":"scrypt","N":..,"r":..,"p":..,
 *                   "salt":"<64 hex>","aead":"aes-256-gcm",
 *                   "data":"<hex of nonce | sealed 64-byte master key | tag>",
 *                   "created":<unix time>}
 *
 * The wrapping is AES-256-GCM (seal_encrypt_with) with the associated data
 * "cairn key 1"; the scrypt parameters and salt need no binding, since any
 * change to them derives another key and the tag fails. A key object read
 * from the bucket is hostile input: key_object_parse checks every field and
 * bounds the scrypt cost (memory at most KEYS_MAX_MEM) before anything is
 * derived from it. Derivation is CPU-heavy (about 0.1 s at the default
 * parameters): it runs at start, before the daemon serves, or on a worker.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "daemon/crypto/seal.h"

#define KEYS_CONFIG "store/config"
#define KEYS_DIR "keys/"
/* A key object's id: 32 lower-case hex digits (and the NUL). */
#define KEYS_ID_LEN 32
#define KEYS_SALT_LEN 32
#define KEYS_DATA_LEN (SEAL_OVERHEAD + 2 * SEAL_KEY_LEN)
/* A key object is a few hundred bytes; anything past this is refused unread. */
#define KEYS_MAX_OBJECT 4096
/* Most memory a key object may make scrypt take (128 * r * N bytes). */
#define KEYS_MAX_MEM (256ull * 1024 * 1024)
/* The name of the one AEAD (README). */
#define KEYS_AEAD "aes-256-gcm"

/* Expected outcomes (positive). */
enum {
    KEYS_E_BAD = 1, /* not a key (or config) object of this version */
    KEYS_E_WRONG,   /* a well-formed key object the passphrase does not open */
};

struct key_params {
    uint64_t n; /* a power of two, 2^10 to 2^20 */
    uint32_t r, p;
};
/* N = 2^15, r = 8, p = 1: 32 MiB, as restic and the scrypt paper's interactive setting. */
extern const struct key_params keys_default_params;

struct key_object {
    struct key_params kp;
    uint8_t salt[KEYS_SALT_LEN];
    uint8_t data[KEYS_DATA_LEN];
    int64_t created;
};

/* Parses a key object's bytes: 0, or KEYS_E_BAD (any field missing, malformed or out of bounds). */
int key_object_parse(const char *text, size_t len, struct key_object *ko);
/*
 * Wraps m under pass with a fresh salt (kp NULL: the defaults): 0 with the
 * object's text (malloc'd, *len bytes, no NUL counted), or -ENOMEM / -EIO.
 */
int key_object_make(const struct seal_master *m, const char *pass, size_t plen,
                    const struct key_params *kp, char **text, size_t *len);
/* Unwraps a parsed key object with pass: 0 with *m, KEYS_E_WRONG, or -ENOMEM / -EIO. */
int key_object_open(const struct key_object *ko, const char *pass, size_t plen,
                    struct seal_master *m);

/* A fresh master key (RAND_bytes): 0 or -EIO. */
int keys_new_master(struct seal_master *m);
/* A fresh key object id, KEYS_ID_LEN hex digits: 0 or -EIO. */
int keys_new_id(char out[KEYS_ID_LEN + 1]);
/* The id of a key under keys/: 0, or -EINVAL when it is no key object's key. */
int keys_key_parse(const char *key, char id[KEYS_ID_LEN + 1]);

/* The config object of a store, encrypted or not: 0 with text (malloc'd), or -ENOMEM. */
int store_config_encode(bool encrypted, char **text, size_t *len);
/* 0 with *encrypted, or KEYS_E_BAD. */
int store_config_parse(const char *text, size_t len, bool *encrypted);
