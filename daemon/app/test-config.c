/*
 * Unit tests for cairnd's configuration: built-in defaults derived from the
 * XDG variables, the INI file (every documented key, errors with the exact
 * file:line), the environment, the flags, and their precedence
 * (flags > environment > file > defaults). Every test runs with a private
 * environment and a private mkdtemp directory that is removed afterwards.
 */
#include "daemon/app/config.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "compress/compress.h"

/* ---- environment: temp dir, private variables, argv ---------------------- */

struct env {
    char dir[PATH_MAX / 2]; /* mkdtemp result, removed at the end */
    char home[PATH_MAX];    /* $HOME: exists, but holds no config file */
    char xdg_config[PATH_MAX];
    char cwd[PATH_MAX]; /* the working directory before the test, restored after it */
    struct config cfg;
    char err[1024];
};

static const char *const env_vars[] = {
    "XDG_RUNTIME_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "HOME", "CAIRN_SOCKET", "CAIRN_DATA_DIR",
};

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    const char *tmp = getenv("TMPDIR");

    assert_non_null(e);
    if (!tmp || !*tmp)
        tmp = "/tmp";
    assert_true(snprintf(e->dir, sizeof(e->dir), "%s/cairn-test-config-XXXXXX", tmp) <
                (int)sizeof(e->dir));
    assert_non_null(mkdtemp(e->dir));
    snprintf(e->home, sizeof(e->home), "%s/home", e->dir);
    assert_int_equal(mkdir(e->home, 0700), 0);
    snprintf(e->xdg_config, sizeof(e->xdg_config), "%s/xdg-config", e->dir);
    assert_non_null(getcwd(e->cwd, sizeof(e->cwd)));

    /*
     * Nothing from the real environment may leak in: a developer's own
     * cairn.conf or CAIRN_SOCKET would change every result. XDG_CONFIG_HOME
     * points into the temp dir so no test reads a real configuration file.
     */
    for (size_t i = 0; i < sizeof(env_vars) / sizeof(env_vars[0]); i++)
        assert_int_equal(unsetenv(env_vars[i]), 0);
    assert_int_equal(setenv("HOME", e->home, 1), 0);
    assert_int_equal(setenv("XDG_CONFIG_HOME", e->xdg_config, 1), 0);
    *state = e;
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int teardown(void **state)
{
    struct env *e = *state;

    assert_int_equal(chdir(e->cwd), 0);
    assert_int_equal(nftw(e->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
    assert_int_equal(access(e->dir, F_OK), -1);
    for (size_t i = 0; i < sizeof(env_vars) / sizeof(env_vars[0]); i++)
        unsetenv(env_vars[i]);
    free(e);
    return 0;
}

/* Writes `content` to dir/name (creating dir/name's parent) and returns the path in `path`. */
static void write_file(const char *dir, const char *name, const char *content, char *path,
                       size_t path_len)
{
    FILE *f;

    assert_true(snprintf(path, path_len, "%s/%s", dir, name) < (int)path_len);
    f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(content, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/*
 * Runs config_load() with "cairnd" followed by the NULL-terminated arguments.
 * getopt_long may permute the argv array, so it is a private copy of pointers.
 */
static int load(struct env *e, ...)
{
    char *argv[32];
    int argc = 0;
    va_list ap;
    const char *a;

    argv[argc++] = (char *)"cairnd";
    va_start(ap, e);
    while ((a = va_arg(ap, const char *)) != NULL) {
        assert_true(argc < 31);
        argv[argc++] = (char *)a;
    }
    va_end(ap);
    argv[argc] = NULL;
    memset(e->err, 0, sizeof(e->err));
    /* Poison the result so a field config_load forgets to set shows up. */
    memset(&e->cfg, 0xa5, sizeof(e->cfg));
    return config_load(&e->cfg, argc, argv, e->err, sizeof(e->err));
}

/* Asserts that err starts with "path:line: " and mentions `word`. */
static void assert_err_at(const struct env *e, const char *path, int line, const char *word)
{
    char prefix[PATH_MAX + 32];

    snprintf(prefix, sizeof(prefix), "%s:%d: ", path, line);
    if (strncmp(e->err, prefix, strlen(prefix)) != 0)
        fail_msg("error '%s' does not start with '%s'", e->err, prefix);
    if (!strstr(e->err, word))
        fail_msg("error '%s' does not mention '%s'", e->err, word);
}

static void assert_built_in_values(const struct config *cfg)
{
    assert_string_equal(cfg->backend_url, "local");
    assert_int_equal(cfg->log_level, LOG_LEVEL_INFO);
    assert_int_equal(cfg->compression_level, COMPRESS_DEFAULT_LEVEL);
    assert_int_equal(cfg->chunk_min, 16 * 1024);
    assert_int_equal(cfg->chunk_avg, 64 * 1024);
    assert_int_equal(cfg->chunk_max, 256 * 1024);
    assert_int_equal(cfg->max_text, 16 * 1024 * 1024);
    assert_int_equal(cfg->max_connections, 4096);
    assert_int_equal(cfg->threads, 0);
}

/* ---- defaults ------------------------------------------------------------ */

static void test_defaults_from_xdg(void **state)
{
    struct env *e = *state;
    char expect[PATH_MAX + 64];

    assert_int_equal(setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1), 0);
    assert_int_equal(setenv("XDG_DATA_HOME", "/srv/xdg-data", 1), 0);
    assert_int_equal(load(e, NULL), 0);
    assert_string_equal(e->cfg.socket_path, "/run/user/4242/cairn/cairnd.sock");
    assert_string_equal(e->cfg.data_dir, "/srv/xdg-data/cairn");
    snprintf(expect, sizeof(expect), "%s/cairn/cairn.conf", e->xdg_config);
    assert_string_equal(e->cfg.config_path, expect);
    assert_built_in_values(&e->cfg);
}

static void test_defaults_without_xdg(void **state)
{
    struct env *e = *state;
    char expect[PATH_MAX + 64];

    assert_int_equal(unsetenv("XDG_CONFIG_HOME"), 0);
    assert_int_equal(load(e, NULL), 0);
    snprintf(expect, sizeof(expect), "/tmp/cairn-%u/cairnd.sock", (unsigned)getuid());
    assert_string_equal(e->cfg.socket_path, expect);
    snprintf(expect, sizeof(expect), "%s/.local/share/cairn", e->home);
    assert_string_equal(e->cfg.data_dir, expect);
    snprintf(expect, sizeof(expect), "%s/.config/cairn/cairn.conf", e->home);
    assert_string_equal(e->cfg.config_path, expect);
    assert_built_in_values(&e->cfg);
}

/* The XDG base directory spec says relative paths are invalid and must be ignored. */
static void test_defaults_ignore_relative_xdg(void **state)
{
    struct env *e = *state;
    char expect[PATH_MAX + 64];

    assert_int_equal(setenv("XDG_RUNTIME_DIR", "run/user", 1), 0);
    assert_int_equal(setenv("XDG_DATA_HOME", "", 1), 0);
    assert_int_equal(load(e, NULL), 0);
    snprintf(expect, sizeof(expect), "/tmp/cairn-%u/cairnd.sock", (unsigned)getuid());
    assert_string_equal(e->cfg.socket_path, expect);
    snprintf(expect, sizeof(expect), "%s/.local/share/cairn", e->home);
    assert_string_equal(e->cfg.data_dir, expect);
}

/* ---- the configuration file ---------------------------------------------- */

static const char all_keys_conf[] = "; every documented key\n"
                                    "[daemon]\n"
                                    "socket = /srv/cairn/file.sock\n"
                                    "log_level = debug\n"
                                    "max_connections = 17\n"
                                    "threads = 6\n"
                                    "\n"
                                    "[store]\n"
                                    "data_dir = /srv/cairn/file-data\n"
                                    "compression_level = 11\n"
                                    "chunk_min = 8K\n"
                                    "chunk_avg = 32K\n"
                                    "chunk_max = 128K\n"
                                    "\n"
                                    "[search]\n"
                                    "max_text = 1M\n"
                                    "\n"
                                    "[backend]\n"
                                    "url = local:/srv/cairn/objects\n";

static void test_file_every_key(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX];

    write_file(e->dir, "all.conf", all_keys_conf, path, sizeof(path));
    assert_int_equal(load(e, "--config", path, NULL), 0);
    assert_string_equal(e->cfg.config_path, path);
    assert_string_equal(e->cfg.socket_path, "/srv/cairn/file.sock");
    assert_int_equal(e->cfg.log_level, LOG_LEVEL_DEBUG);
    assert_int_equal(e->cfg.max_connections, 17);
    assert_int_equal(e->cfg.threads, 6);
    assert_string_equal(e->cfg.data_dir, "/srv/cairn/file-data");
    assert_int_equal(e->cfg.compression_level, 11);
    assert_int_equal(e->cfg.chunk_min, 8 * 1024);
    assert_int_equal(e->cfg.chunk_avg, 32 * 1024);
    assert_int_equal(e->cfg.chunk_max, 128 * 1024);
    assert_int_equal(e->cfg.max_text, 1024 * 1024);
    assert_string_equal(e->cfg.backend_url, "local:/srv/cairn/objects");
}

/* [backend] options other than url become percent-encoded URL parameters, in file order. */
static void test_backend_options(void **state)
{
    static const char conf[] = "[backend]\n"
                               "url = sftp://u@h/store\n"
                               "key = /keys/id ed25519\n"
                               "known_hosts = /keys/kh&x\n"
                               "accept_new_host = 1\n"
                               "connections = 2\n"
                               "timeout = 5000\n"
                               "keepalive = 0\n";
    struct env *e = *state;
    char path[PATH_MAX];

    write_file(e->dir, "be.conf", conf, path, sizeof(path));
    assert_int_equal(load(e, "--config", path, NULL), 0);
    assert_string_equal(e->cfg.backend_url, "sftp://u@h/store");
    assert_string_equal(e->cfg.backend_params,
                        "&key=/keys/id%20ed25519&known_hosts=/keys/kh%26x&accept_new_host=1"
                        "&connections=2&timeout=5000&keepalive=0");
    write_file(e->dir, "bad.conf", "[backend]\nport = 22\n", path, sizeof(path));
    assert_int_equal(load(e, "--config", path, NULL), CONFIG_E_INVALID);
}

/*
 * [backend] secrets (secret_access_key, session_token, api_token) are taken
 * only from a file that group and others can neither read nor write; the
 * other s3 and r2 keys are taken from any file. --print-config shows none
 * of the secrets, whether they are [backend] keys or parameters of the url.
 */
static void test_backend_secrets(void **state)
{
    static const char *const secrets[] = {"secret_access_key", "session_token", "api_token"};
    struct env *e = *state;
    char path[PATH_MAX], conf[512], expect[PATH_MAX + 128];
    char *text = NULL;
    size_t len = 0;
    FILE *out;

    write_file(e->dir, "s3.conf",
               "[backend]\nurl = s3://bkt/p\nendpoint = http://127.0.0.1:9000\nallow_http = 1\n"
               "region = eu-west-1\naccess_key_id = AKID\nprofile = p\n",
               path, sizeof(path));
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(load(e, "--config", path, NULL), 0);
    assert_string_equal(e->cfg.backend_params, "&endpoint=http%3A//127.0.0.1%3A9000&allow_http=1"
                                               "&region=eu-west-1&access_key_id=AKID&profile=p");
    for (size_t i = 0; i < sizeof(secrets) / sizeof(secrets[0]); i++) {
        snprintf(conf, sizeof(conf), "[backend]\nurl = r2://bkt?account=abc\n%s = TopSecret\n",
                 secrets[i]);
        write_file(e->dir, "secret.conf", conf, path, sizeof(path));
        assert_int_equal(chmod(path, 0640), 0);
        assert_int_equal(load(e, "--config", path, NULL), CONFIG_E_INVALID);
        snprintf(expect, sizeof(expect), "%s:3: [backend] %s: this file holds a secret", path,
                 secrets[i]);
        if (strncmp(e->err, expect, strlen(expect)))
            fail_msg("%s", e->err);
        assert_non_null(strstr(e->err, "chmod 600"));
        assert_int_equal(chmod(path, 0602), 0);
        assert_int_equal(load(e, "--config", path, NULL), CONFIG_E_INVALID);
        assert_int_equal(chmod(path, 0600), 0);
        assert_int_equal(load(e, "--config", path, NULL), 0);
        assert_non_null(strstr(e->cfg.backend_params, "=TopSecret"));
    }
    write_file(e->dir, "all.conf",
               "[backend]\nurl = s3://bkt?region=x&secret_access_key=UrlSecret&access_key_id=A\n"
               "secret_access_key = FileSecret\nsession_token = FileToken\nconnections = 4\n",
               path, sizeof(path));
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(load(e, "--config", path, "--print-config", NULL), 0);
    assert_non_null(out = open_memstream(&text, &len));
    config_print(&e->cfg, out);
    assert_int_equal(fclose(out), 0);
    assert_null(strstr(text, "Secret"));
    assert_null(strstr(text, "FileToken"));
    assert_non_null(strstr(text, "url = s3://bkt?region=x&secret_access_key=REDACTED"
                                 "&access_key_id=A\n"));
    snprintf(expect, sizeof(expect), "# secret_access_key: %s:3 (set, not shown)\n", path);
    assert_non_null(strstr(text, expect));
    assert_non_null(strstr(text, "connections = 4\n"));
    free(text);
}

/* --print-config: every setting with where it came from; the output reads back the same. */
static void test_print_config(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX], again[PATH_MAX];
    char *text = NULL;
    size_t len = 0;
    FILE *out;

    write_file(e->dir, "pc.conf",
               "[store]\ncompression_level = 7\n\npack_size = 32M\n[backend]\nurl = sftp://u@h/x\n"
               "key = /k/id x\n",
               path, sizeof(path));
    assert_int_equal(setenv("CAIRN_SOCKET", "/run/env.sock", 1), 0);
    assert_int_equal(load(e, "--config", path, "--data-dir", "/flag/data", "--print-config", NULL),
                     0);
    unsetenv("CAIRN_SOCKET");
    assert_true(e->cfg.print_config);
    assert_non_null(out = open_memstream(&text, &len));
    config_print(&e->cfg, out);
    assert_int_equal(fclose(out), 0);
    char expect[PATH_MAX + 64];
    snprintf(expect, sizeof(expect), "# compression_level: %s:2\ncompression_level = 7\n", path);
    assert_non_null(strstr(text, expect));
    snprintf(expect, sizeof(expect), "# pack_size: %s:4\npack_size = 32M\n", path);
    assert_non_null(strstr(text, expect));
    assert_non_null(strstr(text, "# socket: CAIRN_SOCKET\nsocket = /run/env.sock\n"));
    assert_non_null(strstr(text, "# data_dir: --data-dir\ndata_dir = /flag/data\n"));
    assert_non_null(strstr(text, "# chunk_avg: default\nchunk_avg = 64K\n"));
    assert_non_null(strstr(text, "# key: "));
    assert_non_null(strstr(text, "key = /k/id x\n"));
    /* Written back as a file, it gives the same settings. */
    write_file(e->dir, "again.conf", text, again, sizeof(again));
    struct config first = e->cfg;
    assert_int_equal(load(e, "--config", again, NULL), 0);
    assert_string_equal(e->cfg.socket_path, first.socket_path);
    assert_string_equal(e->cfg.data_dir, first.data_dir);
    assert_int_equal(e->cfg.compression_level, 7);
    assert_int_equal(e->cfg.pack_size, 32u << 20);
    assert_string_equal(e->cfg.backend_url, first.backend_url);
    assert_string_equal(e->cfg.backend_params, first.backend_params);
    free(text);
    /* Not with the other one-shot modes. */
    assert_int_equal(load(e, "--print-config", "--upgrade", NULL), CONFIG_E_USAGE);
}

/* The K and M suffixes (either case) are powers of 1024; chunk_max is at most 1M. */
static void test_file_chunk_size_suffixes(void **state)
{
    static const struct {
        const char *value;
        size_t bytes;
    } cases[] = {
        {"128K", 131072}, {"128k", 131072},   {"1M", 1024 * 1024},   {"1m", 1024 * 1024},
        {"512K", 524288}, {"131072", 131072}, {"1048576", 1u << 20},
    };
    struct env *e = *state;
    char path[PATH_MAX], conf[128];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(conf, sizeof(conf), "[store]\nchunk_max = %s\n", cases[i].value);
        write_file(e->dir, "chunk.conf", conf, path, sizeof(path));
        assert_int_equal(load(e, "--config", path, NULL), 0);
        assert_int_equal(e->cfg.chunk_max, cases[i].bytes);
    }
}

/* The ends of every numeric range are accepted. */
static void test_file_range_bounds(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX];

    write_file(e->dir, "low.conf",
               "[daemon]\nmax_connections = 1\nthreads = 0\nlog_level = error\n"
               "[store]\ncompression_level = 1\n",
               path, sizeof(path));
    assert_int_equal(load(e, "--config", path, NULL), 0);
    assert_int_equal(e->cfg.max_connections, 1);
    assert_int_equal(e->cfg.threads, 0);
    assert_int_equal(e->cfg.log_level, LOG_LEVEL_ERROR);
    assert_int_equal(e->cfg.compression_level, 1);

    write_file(e->dir, "high.conf",
               "[daemon]\nmax_connections = 1000000\nthreads = 128\nlog_level = warn\n"
               "[store]\ncompression_level = 19\n",
               path, sizeof(path));
    assert_int_equal(load(e, "--config", path, NULL), 0);
    assert_int_equal(e->cfg.max_connections, 1000000);
    assert_int_equal(e->cfg.threads, 128);
    assert_int_equal(e->cfg.log_level, LOG_LEVEL_WARN);
    assert_int_equal(e->cfg.compression_level, 19);
}

/* Without --config, $XDG_CONFIG_HOME/cairn/cairn.conf is read when it exists. */
static void test_default_config_file_is_read(void **state)
{
    struct env *e = *state;
    char cairn_dir[PATH_MAX + 16], path[PATH_MAX];

    snprintf(cairn_dir, sizeof(cairn_dir), "%s/cairn", e->xdg_config);
    assert_int_equal(mkdir(e->xdg_config, 0700), 0);
    assert_int_equal(mkdir(cairn_dir, 0700), 0);
    write_file(cairn_dir, "cairn.conf", "[daemon]\nthreads = 3\n", path, sizeof(path));
    assert_int_equal(load(e, NULL), 0);
    assert_string_equal(e->cfg.config_path, path);
    assert_int_equal(e->cfg.threads, 3);
}

static void test_missing_default_config_is_fine(void **state)
{
    struct env *e = *state;

    /* setup() pointed XDG_CONFIG_HOME at a directory that does not exist. */
    assert_int_equal(access(e->xdg_config, F_OK), -1);
    assert_int_equal(load(e, NULL), 0);
    assert_built_in_values(&e->cfg);
}

static void test_missing_explicit_config_is_invalid(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX + 32];

    snprintf(path, sizeof(path), "%s/no-such.conf", e->dir);
    assert_int_equal(load(e, "--config", path, NULL), CONFIG_E_INVALID);
    assert_non_null(strstr(e->err, path));
    assert_non_null(strstr(e->err, strerror(ENOENT)));
}

/* ---- precedence: file < environment < flags ------------------------------ */

static void test_precedence(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX];

    write_file(e->dir, "prec.conf",
               "[daemon]\nsocket = /file/cairnd.sock\nlog_level = warn\n"
               "[store]\ndata_dir = /file/data\n"
               "[backend]\nurl = local:/file/objects\n",
               path, sizeof(path));

    /* The file beats the defaults (XDG_RUNTIME_DIR would give another socket). */
    assert_int_equal(setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1), 0);
    assert_int_equal(load(e, "--config", path, NULL), 0);
    assert_string_equal(e->cfg.socket_path, "/file/cairnd.sock");
    assert_string_equal(e->cfg.data_dir, "/file/data");

    /* The environment beats the file, one variable at a time. */
    assert_int_equal(setenv("CAIRN_SOCKET", "/env/cairnd.sock", 1), 0);
    assert_int_equal(load(e, "--config", path, NULL), 0);
    assert_string_equal(e->cfg.socket_path, "/env/cairnd.sock");
    assert_string_equal(e->cfg.data_dir, "/file/data");
    assert_int_equal(setenv("CAIRN_DATA_DIR", "/env/data", 1), 0);
    assert_int_equal(load(e, "--config", path, NULL), 0);
    assert_string_equal(e->cfg.socket_path, "/env/cairnd.sock");
    assert_string_equal(e->cfg.data_dir, "/env/data");

    /* Flags beat both; flag order relative to --config does not matter. */
    assert_int_equal(load(e, "--socket", "/flag/cairnd.sock", "--config", path, "--data-dir",
                          "/flag/data", "--backend", "local:/flag/objects", "--log-level", "debug",
                          NULL),
                     0);
    assert_string_equal(e->cfg.socket_path, "/flag/cairnd.sock");
    assert_string_equal(e->cfg.data_dir, "/flag/data");
    assert_string_equal(e->cfg.backend_url, "local:/flag/objects");
    assert_int_equal(e->cfg.log_level, LOG_LEVEL_DEBUG);

    /* A flag for one setting leaves the other at the environment's value. */
    assert_int_equal(load(e, "--config", path, "--data-dir=/flag/data2", NULL), 0);
    assert_string_equal(e->cfg.socket_path, "/env/cairnd.sock");
    assert_string_equal(e->cfg.data_dir, "/flag/data2");
    assert_string_equal(e->cfg.backend_url, "local:/file/objects");
    assert_int_equal(e->cfg.log_level, LOG_LEVEL_WARN);

    /* An empty variable counts as unset. */
    assert_int_equal(setenv("CAIRN_SOCKET", "", 1), 0);
    assert_int_equal(setenv("CAIRN_DATA_DIR", "", 1), 0);
    assert_int_equal(load(e, "--config", path, NULL), 0);
    assert_string_equal(e->cfg.socket_path, "/file/cairnd.sock");
    assert_string_equal(e->cfg.data_dir, "/file/data");
}

/* The environment is checked like the file: a socket path longer than sun_path is refused. */
static void test_env_and_flag_values_are_checked(void **state)
{
    struct env *e = *state;
    char long_path[200];

    memset(long_path, 'a', sizeof(long_path) - 1);
    long_path[0] = '/';
    long_path[sizeof(long_path) - 1] = '\0';
    assert_int_equal(setenv("CAIRN_SOCKET", long_path, 1), 0);
    assert_int_equal(load(e, NULL), CONFIG_E_INVALID);
    assert_non_null(strstr(e->err, "CAIRN_SOCKET"));
    assert_int_equal(unsetenv("CAIRN_SOCKET"), 0);

    assert_int_equal(load(e, "--socket", long_path, NULL), CONFIG_E_INVALID);
    assert_non_null(strstr(e->err, "--socket"));
    assert_int_equal(load(e, "--log-level", "loud", NULL), CONFIG_E_INVALID);
    assert_non_null(strstr(e->err, "--log-level"));
    assert_int_equal(load(e, "--data-dir", "", NULL), CONFIG_E_INVALID);
    assert_non_null(strstr(e->err, "--data-dir"));
}

/*
 * A relative data directory, wherever it comes from, is below the working
 * directory at the time of loading, and comes out absolute (the local
 * backend refuses relative paths).
 */
static void test_relative_data_dir(void **state)
{
    struct env *e = *state;
    char cwd[PATH_MAX], expect[PATH_MAX + 32], path[PATH_MAX];
    char long_rel[PATH_MAX - 1];

    /* teardown goes back to the working directory of before */
    assert_int_equal(chdir(e->dir), 0);
    assert_non_null(getcwd(cwd, sizeof(cwd))); /* e->dir may go through a symlink */

    static const struct {
        const char *given, *below;
    } cases[] = {
        {"data", "/data"},   {"rel/data", "/rel/data"},
        {"./data", "/data"}, {".//x/./y", "/x/./y"},
        {".", ""},           {"./", ""},
        {"../up", "/../up"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(load(e, "--data-dir", cases[i].given, NULL), 0);
        snprintf(expect, sizeof(expect), "%s%s", cwd, cases[i].below);
        assert_string_equal(e->cfg.data_dir, expect);
    }
    /* From the environment and from the file alike. */
    assert_int_equal(setenv("CAIRN_DATA_DIR", "env-data", 1), 0);
    assert_int_equal(load(e, NULL), 0);
    snprintf(expect, sizeof(expect), "%s/env-data", cwd);
    assert_string_equal(e->cfg.data_dir, expect);
    assert_int_equal(unsetenv("CAIRN_DATA_DIR"), 0);
    write_file(e->dir, "rel.conf", "[store]\ndata_dir = file-data\n", path, sizeof(path));
    assert_int_equal(load(e, "--config", path, NULL), 0);
    snprintf(expect, sizeof(expect), "%s/file-data", cwd);
    assert_string_equal(e->cfg.data_dir, expect);
    /* Absolute ones are left alone. */
    assert_int_equal(load(e, "--data-dir", "/abs/data", NULL), 0);
    assert_string_equal(e->cfg.data_dir, "/abs/data");
    /* Too long once joined: refused, not cut. */
    memset(long_rel, 'a', sizeof(long_rel) - 1);
    long_rel[sizeof(long_rel) - 1] = '\0';
    assert_int_equal(load(e, "--data-dir", long_rel, NULL), CONFIG_E_INVALID);
    assert_non_null(strstr(e->err, "too long"));
    /* The root's children do not start with two slashes. */
    assert_int_equal(chdir("/"), 0);
    assert_int_equal(load(e, "--data-dir", "data", NULL), 0);
    assert_string_equal(e->cfg.data_dir, "/data");
    assert_int_equal(load(e, "--data-dir", ".", NULL), 0);
    assert_string_equal(e->cfg.data_dir, "/");
}

/* ---- file errors carry file:line ----------------------------------------- */

static void test_unknown_key(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX];

    write_file(e->dir, "unknown-key.conf",
               "# line 1 is a comment\n"
               "[daemon]\n"
               "threads = 2\n"
               "\n"
               "sockett = /x.sock\n"
               "log_level = debug\n",
               path, sizeof(path));
    assert_int_equal(load(e, "--config", path, NULL), CONFIG_E_INVALID);
    assert_err_at(e, path, 5, "sockett");
    assert_non_null(strstr(e->err, "unknown key"));

    /* A key of one section is unknown in another. */
    write_file(e->dir, "wrong-section.conf", "[store]\nsocket = /x.sock\n", path, sizeof(path));
    assert_int_equal(load(e, "--config", path, NULL), CONFIG_E_INVALID);
    assert_err_at(e, path, 2, "socket");
    assert_non_null(strstr(e->err, "unknown key"));
}

static void test_unknown_section(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX];

    write_file(e->dir, "unknown-section.conf",
               "[daemon]\n"
               "threads = 2\n"
               "; a comment\n"
               "[deamon]\n"
               "socket = /x.sock\n",
               path, sizeof(path));
    assert_int_equal(load(e, "--config", path, NULL), CONFIG_E_INVALID);
    assert_err_at(e, path, 5, "deamon");
    assert_non_null(strstr(e->err, "unknown section"));

    /* A key before any section header has no section, which is unknown too. */
    write_file(e->dir, "no-section.conf", "\nthreads = 2\n", path, sizeof(path));
    assert_int_equal(load(e, "--config", path, NULL), CONFIG_E_INVALID);
    assert_err_at(e, path, 2, "threads");
}

static void test_bad_values(void **state)
{
    static const struct {
        const char *section, *key, *value;
    } cases[] = {
        {"store", "compression_level", "0"}, {"store", "compression_level", "20"},
        {"store", "chunk_max", "32"},        {"store", "chunk_max", "2M"},
        {"store", "chunk_max", "1025K"},     {"store", "chunk_max", "64KB"},
        {"store", "chunk_max", "-64K"},      {"store", "chunk_avg", "big"},
        {"daemon", "max_connections", "0"},  {"daemon", "max_connections", "1000001"},
        {"daemon", "log_level", "loud"},     {"daemon", "threads", "129"},
        {"daemon", "threads", "-1"},         {"daemon", "threads", "2x"},
        {"daemon", "max_connections", "-5"}, {"store", "compression_level", ""},
    };
    struct env *e = *state;
    char path[PATH_MAX], conf[512];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        /* Valid lines before the bad one move it to line 3 + i. */
        size_t n =
            (size_t)snprintf(conf, sizeof(conf), "[%s]\n# bad value follows\n", cases[i].section);
        for (size_t j = 0; j < i; j++)
            n += (size_t)snprintf(conf + n, sizeof(conf) - n, "\n");
        snprintf(conf + n, sizeof(conf) - n, "%s = %s\n[daemon]\nthreads = 1\n", cases[i].key,
                 cases[i].value);
        write_file(e->dir, "bad.conf", conf, path, sizeof(path));
        if (load(e, "--config", path, NULL) != CONFIG_E_INVALID)
            fail_msg("%s = '%s' was accepted", cases[i].key, cases[i].value);
        assert_err_at(e, path, 3 + (int)i, cases[i].key);
    }
}

/* Each chunk size may be valid alone and the three still not fit together. */
static void test_chunk_sizes_must_be_ordered(void **state)
{
    static const char *const confs[] = {
        "[store]\nchunk_min = 64K\n",                    /* min == default avg */
        "[store]\nchunk_avg = 300K\n",                   /* avg not a power of two */
        "[store]\nchunk_avg = 512K\nchunk_max = 256K\n", /* avg > max */
    };
    struct env *e = *state;
    char path[PATH_MAX];

    for (size_t i = 0; i < sizeof(confs) / sizeof(confs[0]); i++) {
        write_file(e->dir, "order.conf", confs[i], path, sizeof(path));
        if (load(e, "--config", path, NULL) != CONFIG_E_INVALID)
            fail_msg("accepted: %s", confs[i]);
        assert_non_null(strstr(e->err, "chunk_min < chunk_avg < chunk_max"));
    }
}

/* Only the first problem is reported, with its own line. */
static void test_first_error_wins(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX];

    write_file(e->dir, "two.conf", "[daemon]\nthreads = 500\nlog_level = loud\n", path,
               sizeof(path));
    assert_int_equal(load(e, "--config", path, NULL), CONFIG_E_INVALID);
    assert_err_at(e, path, 2, "threads");
    assert_null(strstr(e->err, "log_level"));
}

static void test_syntax_error(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX];

    write_file(e->dir, "syntax.conf", "[daemon]\nthreads = 2\nthis line has no equals sign\n", path,
               sizeof(path));
    assert_int_equal(load(e, "--config", path, NULL), CONFIG_E_INVALID);
    assert_err_at(e, path, 3, "syntax error");
}

/* ---- the command line ---------------------------------------------------- */

/* Runs load() with stdout redirected to a file and returns what was printed. */
static int load_capturing_stdout(struct env *e, const char *flag, char *out, size_t out_len)
{
    char path[PATH_MAX + 32];
    int fd, saved, r;
    ssize_t n;

    snprintf(path, sizeof(path), "%s/stdout", e->dir);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    fflush(stdout);
    saved = dup(STDOUT_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fd, STDOUT_FILENO) >= 0);
    r = load(e, flag, NULL);
    fflush(stdout);
    assert_true(dup2(saved, STDOUT_FILENO) >= 0);
    close(saved);
    n = pread(fd, out, out_len - 1, 0);
    assert_true(n >= 0);
    out[n] = '\0';
    close(fd);
    return r;
}

static void test_help_and_version(void **state)
{
    struct env *e = *state;
    char out[4096];

    assert_int_equal(load_capturing_stdout(e, "--help", out, sizeof(out)), CONFIG_E_EXIT);
    assert_true(strncmp(out, "usage: cairnd", 13) == 0);
    assert_non_null(strstr(out, "--data-dir"));

    assert_int_equal(load_capturing_stdout(e, "--version", out, sizeof(out)), CONFIG_E_EXIT);
    assert_string_equal(out, "cairnd " CAIRN_VERSION "\n");
}

/* --help wins even when the configuration would be invalid: nothing else is read. */
static void test_help_before_config(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX + 32];

    snprintf(path, sizeof(path), "%s/no-such.conf", e->dir);
    fflush(stdout);
    assert_int_equal(load(e, "--config", path, "--version", NULL), CONFIG_E_EXIT);
}

static void test_usage_errors(void **state)
{
    struct env *e = *state;

    assert_int_equal(load(e, "--no-such-flag", NULL), CONFIG_E_USAGE);
    assert_non_null(strstr(e->err, "--no-such-flag"));

    assert_int_equal(load(e, "-x", NULL), CONFIG_E_USAGE);
    assert_non_null(strstr(e->err, "-x"));

    assert_int_equal(load(e, "--socket", NULL), CONFIG_E_USAGE);
    assert_non_null(strstr(e->err, "--socket"));
    assert_non_null(strstr(e->err, "value"));

    assert_int_equal(load(e, "--data-dir", "/d", "--config", NULL), CONFIG_E_USAGE);
    assert_non_null(strstr(e->err, "--config"));

    assert_int_equal(load(e, "--socket", "/s.sock", "stray", NULL), CONFIG_E_USAGE);
    assert_non_null(strstr(e->err, "stray"));

    /* GNU getopt moves operands to the end; one before the flags is still found. */
    assert_int_equal(load(e, "stray2", "--socket", "/s.sock", NULL), CONFIG_E_USAGE);
    assert_non_null(strstr(e->err, "stray2"));

    /* --help takes no value. */
    assert_int_equal(load(e, "--help=yes", NULL), CONFIG_E_USAGE);
}

/*
 * config_load() resets getopt itself: a parse that stopped in the middle (an
 * error, or a cluster of short options) does not leak into the next one.
 */
static void test_repeated_parses_are_independent(void **state)
{
    struct env *e = *state;

    assert_int_equal(load(e, "--bogus", "--socket", "/first.sock", NULL), CONFIG_E_USAGE);
    assert_int_equal(load(e, "--socket", "/second.sock", NULL), 0);
    assert_string_equal(e->cfg.socket_path, "/second.sock");

    assert_int_equal(load(e, "-xy", NULL), CONFIG_E_USAGE);
    assert_int_equal(load(e, "--socket", "/third.sock", NULL), 0);
    assert_string_equal(e->cfg.socket_path, "/third.sock");
    assert_int_equal(load(e, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_defaults_from_xdg, setup, teardown),
        cmocka_unit_test_setup_teardown(test_defaults_without_xdg, setup, teardown),
        cmocka_unit_test_setup_teardown(test_defaults_ignore_relative_xdg, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_every_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_chunk_size_suffixes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backend_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_print_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_chunk_sizes_must_be_ordered, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_range_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_default_config_file_is_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_default_config_is_fine, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_explicit_config_is_invalid, setup, teardown),
        cmocka_unit_test_setup_teardown(test_precedence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_and_flag_values_are_checked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_relative_data_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_section, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_values, setup, teardown),
        cmocka_unit_test_setup_teardown(test_first_error_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_syntax_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_help_and_version, setup, teardown),
        cmocka_unit_test_setup_teardown(test_help_before_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_usage_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repeated_parses_are_independent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backend_secrets, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
