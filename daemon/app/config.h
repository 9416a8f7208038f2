#pragma once

/*
 * cairnd configuration: built-in defaults, overridden by the INI file
 * (--config, default $XDG_CONFIG_HOME/cairn/cairn.conf), overridden by the
 * environment (CAIRN_SOCKET, CAIRN_DATA_DIR), overridden by flags. main()
 * loads it once and passes the plain values on; nothing reads it later.
 */

#include <limits.h>
#include <stdio.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/un.h>

#include "daemon/base/log.h"

/* Where a setting came from ("FILE:LINE", "CAIRN_SOCKET", "--socket"); absent: the default. */
#define CONFIG_ORIGINS 32
struct config_origin {
    char key[32]; /* "section.key" */
    char from[288];
};

struct config {
    char socket_path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char data_dir[PATH_MAX];
    char backend_url[1024];
    /* [backend] options other than url, as "&name=value" (percent-encoded), for the URL. */
    char backend_params[2048];
    char config_path[PATH_MAX];
    enum log_level log_level;
    int compression_level;
    size_t chunk_min, chunk_avg, chunk_max;
    size_t max_text;
    uint64_t pack_size;
    unsigned repack_threshold; /* percent alive below which gc rewrites a pack */
    /* How often other writers' packs are looked for in the bucket (0: only when asked). */
    uint64_t refresh_interval_ms;
    uint64_t gc_grace_ms; /* a shared bucket's gc waits this long for writers that do not answer */
    uint64_t max_clock_skew_ms; /* refuse to start when the clock is further off the bucket's */
    uint64_t cache_size;
    /* Remote backends' read cache: its directory (absolute once loaded) and bound in bytes
     * (0: none; with read_cache_auto, the bound comes from the free space at start). */
    char read_cache_dir[PATH_MAX];
    uint64_t read_cache_size;
    bool read_cache_auto;
    unsigned max_connections;
    uint64_t client_timeout_ms; /* 0: never */
    uint64_t connection_memory; /* all connections' buffers together */
    char metrics_listen[80];    /* HOST:PORT of a loopback address, "" for none */
    unsigned threads;
    /* [store] encryption, for a store made at this start (CONFIG_ENC_*), and the passphrase's
     * sources besides CAIRN_PASSWORD_FILE and a terminal (README "Encryption at rest"). */
    unsigned encryption;
    char password_file[PATH_MAX];
    char password_command[1024];
    bool read_only;     /* --read-only: serve the data directory, write nothing to it */
    bool rebuild_index; /* --rebuild-index: rebuild the database, then exit */
    bool upgrade;       /* --upgrade: convert a format 1 directory, then exit */
    bool print_config;  /* --print-config: show the effective settings, then exit */
    struct config_origin origins[CONFIG_ORIGINS];
    unsigned norigins;
};

/* [store] encryption: not given (the store's own), off, or on (AES-256-GCM). */
enum { CONFIG_ENC_UNSET, CONFIG_ENC_OFF, CONFIG_ENC_ON };

/* config_load() results besides 0. */
enum {
    CONFIG_E_EXIT = 1, /* --help or --version was printed; exit 0 */
    CONFIG_E_USAGE,    /* bad command line; message in err */
    CONFIG_E_INVALID,  /* bad config file or value; message in err */
};

int config_load(struct config *cfg, int argc, char **argv, char *err, size_t err_len);
/* Notes where section.key came from (config.c; a later source replaces an earlier one). */
void config_note_origin(struct config *cfg, const char *section, const char *key, const char *from);
/* Is section.key a secret (secret_access_key, session_token, api_token, account_key, sas of
 * [backend])? Such keys are refused in a file that group or others can access, and never
 * printed. */
bool config_is_secret(const char *section, const char *key);
/* Prints every setting as a config file would say it, each with where it came from; secrets,
 * in [backend] or in the url's parameters, are left out. */
void config_print(const struct config *cfg, FILE *out);
