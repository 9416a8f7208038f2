/*
 * The keys of an encrypted store, at every start (README "Encryption at
 * rest"): the store's mode from its config object in the bucket, and the
 * master key from the first key object the passphrase opens. A store is
 * made encrypted only when the bucket holds nothing of a store yet; a plain
 * store is never converted. All of it runs before anything is written to
 * the bucket or the database, so a wrong passphrase leaves both as they
 * were.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "daemon/base/log.h"
#include "daemon/crypto/keys.h"
#include "daemon/crypto/seal.h"
#include "daemon/recovery/recovery.h"
#include "daemon/recovery/replay-int.h"
#include "storage/backend.h"
#include "storage/pack/pack.h"

/* Whether the bucket has any object under `prefix`: 0 with *any, or the listing's failure. */
static int any_under(struct replay *rp, const char *prefix, bool *any)
{
    struct backend_list list = {.max_keys = 1};
    int r;

    snprintf(list.req.key, sizeof(list.req.key), "%s", prefix);
    r = replay_list(rp, &list);
    *any = r == 0 && list.nentries > 0;
    backend_list_reset(&list);
    return r;
}

/* A small object read whole: 0 with its bytes (malloc'd), BACKEND_E_*, or negative errno. */
static int get_small(struct replay *rp, const char *key, uint8_t **out, size_t *len)
{
    int r = replay_get(rp, key, 0, KEYS_MAX_OBJECT + 1, out, len);

    if (r == 0 && *len > KEYS_MAX_OBJECT) {
        free(*out);
        *out = NULL;
        return BACKEND_E_TOO_LARGE;
    }
    return r;
}

static const char *why(int r)
{
    return r < 0                        ? strerror(-r)
           : r == BACKEND_E_UNAVAILABLE ? "the backend is unavailable"
                                        : "the backend refused it";
}

/* Tries the passphrase on every key object: 0 with the master key set, or -EKEYREJECTED. */
static int unlock(struct replay *rp, const char *pass, size_t plen, char *used, size_t used_len)
{
    struct backend_list list = {0};
    int r, tried = 0, found = -EKEYREJECTED;

    do {
        snprintf(list.req.key, sizeof(list.req.key), KEYS_DIR);
        if ((r = replay_list(rp, &list)) != 0)
            break;
        for (size_t i = 0; found != 0 && i < list.nentries; i++) {
            char id[KEYS_ID_LEN + 1];
            struct key_object ko;
            struct seal_master m;
            uint8_t *bytes;
            size_t len;
            if (keys_key_parse(list.entries[i].key, id) != 0)
                continue;
            if ((r = get_small(rp, list.entries[i].key, &bytes, &len)) == BACKEND_E_NOT_FOUND)
                continue; /* removed meanwhile */
            if (r != 0)
                break;
            if (key_object_parse((const char *)bytes, len, &ko) != 0) {
                log_warn("keys: %s is not a key object; skipped", list.entries[i].key);
                free(bytes);
                continue;
            }
            free(bytes);
            tried++;
            int o = key_object_open(&ko, pass, plen, &m);
            if (o < 0) {
                r = o;
                break;
            }
            if (o == 0) {
                seal_set_master(&m);
                OPENSSL_cleanse(&m, sizeof(m));
                snprintf(used, used_len, "%s", id);
                found = 0;
            }
        }
        snprintf(list.cursor, sizeof(list.cursor), "%s", list.next_cursor);
        backend_list_reset(&list);
    } while (r == 0 && found != 0 && list.cursor[0]);
    backend_list_reset(&list);
    if (r != 0) {
        log_error("keys: cannot read the key objects: %s", why(r));
        return r;
    }
    if (found != 0) {
        if (tried == 0)
            log_error("keys: this store is encrypted but the bucket holds no key object (%s*)",
                      KEYS_DIR);
        else
            log_error("wrong passphrase: none of the %d key objects of this encrypted store opens "
                      "with it",
                      tried);
    }
    return found;
}

/* Makes a new encrypted store: a master key, its first key object, then the config object. */
static int create(struct replay *rp, const char *pass, size_t plen, char *used, size_t used_len)
{
    struct seal_master m;
    char id[KEYS_ID_LEN + 1], key[BACKEND_MAX_KEY], *text = NULL;
    size_t len;
    int r;

    if ((r = keys_new_master(&m)) != 0 || (r = keys_new_id(id)) != 0)
        return r;
    r = key_object_make(&m, pass, plen, NULL, &text, &len);
    if (r == 0) {
        snprintf(key, sizeof(key), KEYS_DIR "%s", id);
        if ((r = replay_put(rp, key, text, len, BACKEND_PUT_CREATE)) != 0)
            log_error("keys: cannot put %s: %s", key, why(r));
        free(text);
        text = NULL;
    }
    /* The config object last: a store whose config says encrypted always has a key. */
    if (r == 0 && (r = store_config_encode(true, &text, &len)) == 0) {
        r = replay_put(rp, KEYS_CONFIG, text, len, BACKEND_PUT_CREATE);
        if (r == BACKEND_E_EXISTS) {
            /* Its master key is not ours: our key object would open nothing of that store. */
            log_error("keys: another daemon made this store at the same time; start again");
            if (replay_del(rp, key) != 0)
                log_error("keys: cannot remove %s, which opens nothing: remove it", key);
        } else if (r != 0)
            log_error("keys: cannot put %s: %s", KEYS_CONFIG, why(r));
        free(text);
    }
    if (r == 0) {
        seal_set_master(&m);
        snprintf(used, used_len, "%s", id);
        log_info("keys: made an encrypted store (%s), its first key is %s", KEYS_AEAD, id);
    }
    OPENSSL_cleanse(&m, sizeof(m));
    return r == 0 ? 0 : r < 0 ? r : -EIO;
}

/* The passphrase from the caller's source: 0, or negative errno (logged). */
static int get_pass(struct replay *rp, char **pass, size_t *plen)
{
    int r;

    if (!rp->rv.passphrase) {
        log_error("this store is encrypted: give its passphrase (CAIRN_PASSWORD_FILE, "
                  "[store] password_file or password_command, or a terminal)");
        return -ENOKEY;
    }
    if ((r = rp->rv.passphrase(rp->rv.passphrase_ctx, pass, plen)) != 0)
        return r;
    return 0;
}

int keyring_open(struct replay *rp)
{
    uint8_t *bytes = NULL;
    size_t len;
    bool encrypted = false, keys = false, packs = false, writers = false;
    char *pass = NULL;
    size_t plen = 0;
    int r;

    r = get_small(rp, KEYS_CONFIG, &bytes, &len);
    if (r == 0) {
        r = store_config_parse((const char *)bytes, len, &encrypted) == 0 ? 0 : -EINVAL;
        free(bytes);
        if (r != 0) {
            log_error("keys: %s is damaged; cairnd cannot tell whether the store is encrypted",
                      KEYS_CONFIG);
            return r;
        }
    } else if (r != BACKEND_E_NOT_FOUND) {
        log_error("keys: cannot read %s: %s", KEYS_CONFIG, why(r));
        return r < 0 ? r : -EIO;
    }
    bool have_config = r == 0;
    if ((r = any_under(rp, KEYS_DIR, &keys)) != 0)
        return r < 0 ? r : -EIO;
    if (!encrypted && keys) {
        /* Key objects without a config that says so: the config was lost or replaced. */
        log_error("keys: the bucket holds key objects (%s*) but %s does not say the store is "
                  "encrypted; refusing to write plain records into it",
                  KEYS_DIR, KEYS_CONFIG);
        return -EPERM;
    }
    if (!encrypted) {
        if (rp->rv.encryption != RECOVERY_ENC_ON)
            return 0;
        if ((r = any_under(rp, PACK_KEY_PREFIX, &packs)) != 0 ||
            (r = any_under(rp, RECOVERY_WRITERS_DIR, &writers)) != 0)
            return r < 0 ? r : -EIO;
        if (have_config || packs || writers) {
            log_error("encryption is asked for, but this store was made without it: an existing "
                      "store is not converted (make a new one and copy the documents over)");
            return -EPERM;
        }
    } else if (rp->rv.encryption == RECOVERY_ENC_OFF) {
        log_warn("keys: encryption = off is ignored: this store was made encrypted");
    }
    if ((r = get_pass(rp, &pass, &plen)) != 0)
        return r;
    char used[KEYS_ID_LEN + 1] = "";
    r = encrypted ? unlock(rp, pass, plen, used, sizeof(used))
                  : create(rp, pass, plen, used, sizeof(used));
    OPENSSL_cleanse(pass, plen);
    free(pass);
    if (r == 0) {
        if (rp->rv.key_used)
            snprintf(rp->rv.key_used, RECOVERY_KEY_ID_LEN + 1, "%s", used);
        if (encrypted)
            log_info("keys: the store is encrypted (%s); opened with key %s", KEYS_AEAD, used);
    }
    return r;
}

/* ---- key jobs, on the refresh thread ---- */

void recovery_key_job_clear(struct recovery_key_job *job)
{
    if (job->pass) {
        OPENSSL_cleanse(job->pass, job->plen);
        free(job->pass);
        job->pass = NULL;
    }
    free(job->keys);
    job->keys = NULL;
    job->nkeys = 0;
}

/* Every well-formed key object of the bucket into job->keys: 0, or the backend's failure. */
static int list_keys(struct replay *rp, struct recovery_key_job *job, const char *current)
{
    struct backend_list list = {0};
    size_t cap = 0;
    int r;

    free(job->keys);
    job->keys = NULL;
    job->nkeys = 0;
    do {
        snprintf(list.req.key, sizeof(list.req.key), KEYS_DIR);
        if ((r = replay_list(rp, &list)) != 0)
            break;
        for (size_t i = 0; r == 0 && i < list.nentries; i++) {
            struct recovery_key_info info = {0};
            struct key_object ko;
            uint8_t *bytes;
            size_t len;
            if (keys_key_parse(list.entries[i].key, info.id) != 0)
                continue;
            if ((r = get_small(rp, list.entries[i].key, &bytes, &len)) == BACKEND_E_NOT_FOUND) {
                r = 0;
                continue;
            }
            if (r != 0)
                break;
            int bad = key_object_parse((const char *)bytes, len, &ko);
            free(bytes);
            if (bad)
                continue;
            info.created = ko.created;
            info.n = ko.kp.n;
            info.r = ko.kp.r;
            info.p = ko.kp.p;
            info.current = strcmp(info.id, current) == 0;
            if (job->nkeys == cap) {
                size_t ncap = cap ? cap * 2 : 8;
                struct recovery_key_info *grown = realloc(job->keys, ncap * sizeof(*grown));
                if (!grown) {
                    r = -ENOMEM;
                    break;
                }
                job->keys = grown;
                cap = ncap;
            }
            job->keys[job->nkeys++] = info;
        }
        snprintf(list.cursor, sizeof(list.cursor), "%s", list.next_cursor);
        backend_list_reset(&list);
    } while (r == 0 && list.cursor[0]);
    backend_list_reset(&list);
    return r;
}

/* A new key object for job->pass: 0 with job->id, or a failure. */
static int add_key(struct replay *rp, struct recovery_key_job *job)
{
    struct seal_master m;
    char key[BACKEND_MAX_KEY], *text = NULL;
    size_t len;
    int r;

    if ((r = keys_new_id(job->id)) != 0)
        return r;
    seal_get_master(&m);
    r = key_object_make(&m, job->pass, job->plen, NULL, &text, &len);
    OPENSSL_cleanse(&m, sizeof(m));
    if (r != 0)
        return r;
    snprintf(key, sizeof(key), KEYS_DIR "%s", job->id);
    r = replay_put(rp, key, text, len, BACKEND_PUT_CREATE);
    free(text);
    if (r == 0)
        log_info("keys: added key %s", job->id);
    return r;
}

/* Removes key `id`, unless it is the last or `current`: 0, RECOVERY_KEY_E_*, or a failure. */
static int remove_key(struct replay *rp, struct recovery_key_job *job, const char *id,
                      const char *current)
{
    char key[BACKEND_MAX_KEY];
    bool found = false;
    int r;

    if ((r = list_keys(rp, job, current)) != 0)
        return r;
    for (size_t i = 0; i < job->nkeys; i++)
        found |= strcmp(job->keys[i].id, id) == 0;
    if (!found) {
        snprintf(job->why, sizeof(job->why), "no key %s in this store", id);
        return RECOVERY_KEY_E_NO_KEY;
    }
    if (job->nkeys < 2) {
        snprintf(job->why, sizeof(job->why),
                 "key %s is the store's last: without a key nothing opens it", id);
        return RECOVERY_KEY_E_REFUSED;
    }
    if (strcmp(id, current) == 0 && job->op == RECOVERY_KEY_REMOVE) {
        snprintf(job->why, sizeof(job->why),
                 "key %s opened this daemon's store: use cairn key passwd to replace it", id);
        return RECOVERY_KEY_E_REFUSED;
    }
    snprintf(key, sizeof(key), KEYS_DIR "%s", id);
    if ((r = replay_del(rp, key)) == 0)
        log_info("keys: removed key %s", id);
    return r;
}

int keyring_job(struct replay *rp, struct recovery_key_job *job,
                char current[RECOVERY_KEY_ID_LEN + 1])
{
    char old[RECOVERY_KEY_ID_LEN + 1];
    int r;

    if (!seal_on()) {
        snprintf(job->why, sizeof(job->why), "this store is not encrypted");
        return RECOVERY_KEY_E_PLAIN;
    }
    switch (job->op) {
    case RECOVERY_KEY_LIST:
        return list_keys(rp, job, current);
    case RECOVERY_KEY_ADD:
        return add_key(rp, job);
    case RECOVERY_KEY_REMOVE:
        snprintf(old, sizeof(old), "%s", job->id);
        return remove_key(rp, job, old, current);
    case RECOVERY_KEY_PASSWD:
        if ((r = add_key(rp, job)) != 0)
            return r;
        snprintf(old, sizeof(old), "%s", current);
        /* The new key opens the store from now on, whether or not the old one goes. */
        snprintf(current, RECOVERY_KEY_ID_LEN + 1, "%s", job->id);
        if (old[0] && (r = remove_key(rp, job, old, current)) != 0)
            log_warn("keys: the new key %s was added, but the old one %s stays", job->id, old);
        free(job->keys);
        job->keys = NULL;
        job->nkeys = 0;
        return r;
    }
    return -EINVAL;
}
