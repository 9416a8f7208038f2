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
#include "daemon/app/test-config.h"

/* ---- defaults ------------------------------------------------------------ */

static void test_defaults_from_xdg(void **state)
{
    struct env *e = *state;
    char expect[PATH_MAX + 64];

    assert_int_equal(setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1), 0);
    assert_int_equal(setenv("XDG_DATA_HOME", "/srv/xdg-data", 1), 0);
    assert_int_equal(tc_load(e, NULL), 0);
    assert_string_equal(e->cfg.socket_path, "/run/user/4242/cairn/cairnd.sock");
    assert_string_equal(e->cfg.data_dir, "/srv/xdg-data/cairn");
    snprintf(expect, sizeof(expect), "%s/cairn/cairn.conf", e->xdg_config);
    assert_string_equal(e->cfg.config_path, expect);
    tc_assert_built_in_values(&e->cfg);
}

static void test_defaults_without_xdg(void **state)
{
    struct env *e = *state;
    char expect[PATH_MAX + 64];

    assert_int_equal(unsetenv("XDG_CONFIG_HOME"), 0);
    assert_int_equal(tc_load(e, NULL), 0);
    snprintf(expect, sizeof(expect), "/tmp/cairn-%u/cairnd.sock", (unsigned)getuid());
    assert_string_equal(e->cfg.socket_path, expect);
    snprintf(expect, sizeof(expect), "%s/.local/share/cairn", e->home);
    assert_string_equal(e->cfg.data_dir, expect);
    snprintf(expect, sizeof(expect), "%s/.config/cairn/cairn.conf", e->home);
    assert_string_equal(e->cfg.config_path, expect);
    tc_assert_built_in_values(&e->cfg);
}

/* The XDG base directory spec says relative paths are invalid and must be ignored. */
static void test_defaults_ignore_relative_xdg(void **state)
{
    struct env *e = *state;
    char expect[PATH_MAX + 64];

    assert_int_equal(setenv("XDG_RUNTIME_DIR", "run/user", 1), 0);
    assert_int_equal(setenv("XDG_DATA_HOME", "", 1), 0);
    assert_int_equal(tc_load(e, NULL), 0);
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

    tc_write_file(e->dir, "all.conf", all_keys_conf, path, sizeof(path));
    assert_int_equal(tc_load(e, "--config", path, NULL), 0);
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

    tc_write_file(e->dir, "be.conf", conf, path, sizeof(path));
    assert_int_equal(tc_load(e, "--config", path, NULL), 0);
    assert_string_equal(e->cfg.backend_url, "sftp://u@h/store");
    assert_string_equal(e->cfg.backend_params,
                        "&key=/keys/id%20ed25519&known_hosts=/keys/kh%26x&accept_new_host=1"
                        "&connections=2&timeout=5000&keepalive=0");
    tc_write_file(e->dir, "bad.conf", "[backend]\nport = 22\n", path, sizeof(path));
    assert_int_equal(tc_load(e, "--config", path, NULL), CONFIG_E_INVALID);
}

/*
 * [backend] secrets (secret_access_key, session_token, api_token, account_key,
 * sas) are taken
 * only from a file that group and others can neither read nor write; the
 * other s3 and r2 keys are taken from any file. --print-config shows none
 * of the secrets, whether they are [backend] keys or parameters of the url.
 */
static void test_backend_secrets(void **state)
{
    static const char *const secrets[] = {"secret_access_key", "session_token", "api_token",
                                          "account_key", "sas"};
    struct env *e = *state;
    char path[PATH_MAX], conf[512], expect[PATH_MAX + 128];
    char *text = NULL;
    size_t len = 0;
    FILE *out;

    tc_write_file(e->dir, "s3.conf",
                  "[backend]\nurl = s3://bkt/p\nendpoint = http://127.0.0.1:9000\nallow_http = 1\n"
                  "region = eu-west-1\naccess_key_id = AKID\nprofile = p\n",
                  path, sizeof(path));
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(tc_load(e, "--config", path, NULL), 0);
    assert_string_equal(e->cfg.backend_params, "&endpoint=http%3A//127.0.0.1%3A9000&allow_http=1"
                                               "&region=eu-west-1&access_key_id=AKID&profile=p");
    for (size_t i = 0; i < sizeof(secrets) / sizeof(secrets[0]); i++) {
        snprintf(conf, sizeof(conf), "[backend]\nurl = r2://bkt?account=abc\n%s = TopSecret\n",
                 secrets[i]);
        tc_write_file(e->dir, "secret.conf", conf, path, sizeof(path));
        assert_int_equal(chmod(path, 0640), 0);
        assert_int_equal(tc_load(e, "--config", path, NULL), CONFIG_E_INVALID);
        snprintf(expect, sizeof(expect), "%s:3: [backend] %s: this file holds a secret", path,
                 secrets[i]);
        if (strncmp(e->err, expect, strlen(expect)))
            fail_msg("%s", e->err);
        assert_non_null(strstr(e->err, "chmod 600"));
        assert_int_equal(chmod(path, 0602), 0);
        assert_int_equal(tc_load(e, "--config", path, NULL), CONFIG_E_INVALID);
        assert_int_equal(chmod(path, 0600), 0);
        assert_int_equal(tc_load(e, "--config", path, NULL), 0);
        assert_non_null(strstr(e->cfg.backend_params, "=TopSecret"));
    }
    tc_write_file(e->dir, "all.conf",
                  "[backend]\nurl = s3://bkt?region=x&secret_access_key=UrlSecret&access_key_id=A\n"
                  "secret_access_key = FileSecret\nsession_token = FileToken\nconnections = 4\n",
                  path, sizeof(path));
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(tc_load(e, "--config", path, "--print-config", NULL), 0);
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
    text = NULL;
    /* azure's secrets, as keys and as url parameters */
    tc_write_file(e->dir, "az.conf",
                  "[backend]\nurl = azure://acct/box?sas=sv%3DUrlSecret&timeout=9\n"
                  "account_key = FileSecret==\n",
                  path, sizeof(path));
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(tc_load(e, "--config", path, NULL), CONFIG_E_INVALID);
    assert_int_equal(chmod(path, 0600), 0);
    assert_int_equal(tc_load(e, "--config", path, "--print-config", NULL), 0);
    assert_non_null(out = open_memstream(&text, &len));
    config_print(&e->cfg, out);
    assert_int_equal(fclose(out), 0);
    assert_null(strstr(text, "Secret"));
    assert_non_null(strstr(text, "url = azure://acct/box?sas=REDACTED&timeout=9\n"));
    snprintf(expect, sizeof(expect), "# account_key: %s:3 (set, not shown)\n", path);
    assert_non_null(strstr(text, expect));
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

    tc_write_file(
        e->dir, "pc.conf",
        "[store]\ncompression_level = 7\n\npack_size = 32M\n[backend]\nurl = sftp://u@h/x\n"
        "key = /k/id x\n",
        path, sizeof(path));
    assert_int_equal(setenv("CAIRN_SOCKET", "/run/env.sock", 1), 0);
    assert_int_equal(
        tc_load(e, "--config", path, "--data-dir", "/flag/data", "--print-config", NULL), 0);
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
    tc_write_file(e->dir, "again.conf", text, again, sizeof(again));
    struct config first = e->cfg;
    assert_int_equal(tc_load(e, "--config", again, NULL), 0);
    assert_string_equal(e->cfg.socket_path, first.socket_path);
    assert_string_equal(e->cfg.data_dir, first.data_dir);
    assert_int_equal(e->cfg.compression_level, 7);
    assert_int_equal(e->cfg.pack_size, 32u << 20);
    assert_string_equal(e->cfg.backend_url, first.backend_url);
    assert_string_equal(e->cfg.backend_params, first.backend_params);
    free(text);
    /* Not with the other one-shot modes. */
    assert_int_equal(tc_load(e, "--print-config", "--upgrade", NULL), CONFIG_E_USAGE);
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
        tc_write_file(e->dir, "chunk.conf", conf, path, sizeof(path));
        assert_int_equal(tc_load(e, "--config", path, NULL), 0);
        assert_int_equal(e->cfg.chunk_max, cases[i].bytes);
    }
}

/* The ends of every numeric range are accepted. */
static void test_file_range_bounds(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX];

    tc_write_file(e->dir, "low.conf",
                  "[daemon]\nmax_connections = 1\nthreads = 0\nlog_level = error\n"
                  "connection_memory = 4M\nclient_timeout = 0\n"
                  "[store]\ncompression_level = 1\n",
                  path, sizeof(path));
    assert_int_equal(tc_load(e, "--config", path, NULL), 0);
    assert_int_equal(e->cfg.max_connections, 1);
    assert_int_equal(e->cfg.connection_memory, 4 * 1024 * 1024);
    assert_int_equal(e->cfg.client_timeout_ms, 0);
    assert_int_equal(e->cfg.threads, 0);
    assert_int_equal(e->cfg.log_level, LOG_LEVEL_ERROR);
    assert_int_equal(e->cfg.compression_level, 1);

    tc_write_file(e->dir, "high.conf",
                  "[daemon]\nmax_connections = 1000000\nthreads = 128\nlog_level = warn\n"
                  "connection_memory = 65536M\nclient_timeout = 1d\n"
                  "[store]\ncompression_level = 19\n",
                  path, sizeof(path));
    assert_int_equal(tc_load(e, "--config", path, NULL), 0);
    assert_int_equal(e->cfg.max_connections, 1000000);
    assert_int_equal(e->cfg.connection_memory, 64ull * 1024 * 1024 * 1024);
    assert_int_equal(e->cfg.client_timeout_ms, 86400000);
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
    tc_write_file(cairn_dir, "cairn.conf", "[daemon]\nthreads = 3\n", path, sizeof(path));
    assert_int_equal(tc_load(e, NULL), 0);
    assert_string_equal(e->cfg.config_path, path);
    assert_int_equal(e->cfg.threads, 3);
}

static void test_missing_default_config_is_fine(void **state)
{
    struct env *e = *state;

    /* tc_setup() pointed XDG_CONFIG_HOME at a directory that does not exist. */
    assert_int_equal(access(e->xdg_config, F_OK), -1);
    assert_int_equal(tc_load(e, NULL), 0);
    tc_assert_built_in_values(&e->cfg);
}

static void test_missing_explicit_config_is_invalid(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX + 32];

    snprintf(path, sizeof(path), "%s/no-such.conf", e->dir);
    assert_int_equal(tc_load(e, "--config", path, NULL), CONFIG_E_INVALID);
    assert_non_null(strstr(e->err, path));
    assert_non_null(strstr(e->err, strerror(ENOENT)));
}

/* ---- precedence: file < environment < flags ------------------------------ */

static void test_precedence(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX];

    tc_write_file(e->dir, "prec.conf",
                  "[daemon]\nsocket = /file/cairnd.sock\nlog_level = warn\n"
                  "[store]\ndata_dir = /file/data\n"
                  "[backend]\nurl = local:/file/objects\n",
                  path, sizeof(path));

    /* The file beats the defaults (XDG_RUNTIME_DIR would give another socket). */
    assert_int_equal(setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1), 0);
    assert_int_equal(tc_load(e, "--config", path, NULL), 0);
    assert_string_equal(e->cfg.socket_path, "/file/cairnd.sock");
    assert_string_equal(e->cfg.data_dir, "/file/data");

    /* The environment beats the file, one variable at a time. */
    assert_int_equal(setenv("CAIRN_SOCKET", "/env/cairnd.sock", 1), 0);
    assert_int_equal(tc_load(e, "--config", path, NULL), 0);
    assert_string_equal(e->cfg.socket_path, "/env/cairnd.sock");
    assert_string_equal(e->cfg.data_dir, "/file/data");
    assert_int_equal(setenv("CAIRN_DATA_DIR", "/env/data", 1), 0);
    assert_int_equal(tc_load(e, "--config", path, NULL), 0);
    assert_string_equal(e->cfg.socket_path, "/env/cairnd.sock");
    assert_string_equal(e->cfg.data_dir, "/env/data");

    /* Flags beat both; flag order relative to --config does not matter. */
    assert_int_equal(tc_load(e, "--socket", "/flag/cairnd.sock", "--config", path, "--data-dir",
                             "/flag/data", "--backend", "local:/flag/objects", "--log-level",
                             "debug", NULL),
                     0);
    assert_string_equal(e->cfg.socket_path, "/flag/cairnd.sock");
    assert_string_equal(e->cfg.data_dir, "/flag/data");
    assert_string_equal(e->cfg.backend_url, "local:/flag/objects");
    assert_int_equal(e->cfg.log_level, LOG_LEVEL_DEBUG);

    /* A flag for one setting leaves the other at the environment's value. */
    assert_int_equal(tc_load(e, "--config", path, "--data-dir=/flag/data2", NULL), 0);
    assert_string_equal(e->cfg.socket_path, "/env/cairnd.sock");
    assert_string_equal(e->cfg.data_dir, "/flag/data2");
    assert_string_equal(e->cfg.backend_url, "local:/file/objects");
    assert_int_equal(e->cfg.log_level, LOG_LEVEL_WARN);

    /* An empty variable counts as unset. */
    assert_int_equal(setenv("CAIRN_SOCKET", "", 1), 0);
    assert_int_equal(setenv("CAIRN_DATA_DIR", "", 1), 0);
    assert_int_equal(tc_load(e, "--config", path, NULL), 0);
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
    assert_int_equal(tc_load(e, NULL), CONFIG_E_INVALID);
    assert_non_null(strstr(e->err, "CAIRN_SOCKET"));
    assert_int_equal(unsetenv("CAIRN_SOCKET"), 0);

    assert_int_equal(tc_load(e, "--socket", long_path, NULL), CONFIG_E_INVALID);
    assert_non_null(strstr(e->err, "--socket"));
    assert_int_equal(tc_load(e, "--log-level", "loud", NULL), CONFIG_E_INVALID);
    assert_non_null(strstr(e->err, "--log-level"));
    assert_int_equal(tc_load(e, "--data-dir", "", NULL), CONFIG_E_INVALID);
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
        assert_int_equal(tc_load(e, "--data-dir", cases[i].given, NULL), 0);
        snprintf(expect, sizeof(expect), "%s%s", cwd, cases[i].below);
        assert_string_equal(e->cfg.data_dir, expect);
    }
    /* From the environment and from the file alike. */
    assert_int_equal(setenv("CAIRN_DATA_DIR", "env-data", 1), 0);
    assert_int_equal(tc_load(e, NULL), 0);
    snprintf(expect, sizeof(expect), "%s/env-data", cwd);
    assert_string_equal(e->cfg.data_dir, expect);
    assert_int_equal(unsetenv("CAIRN_DATA_DIR"), 0);
    tc_write_file(e->dir, "rel.conf", "[store]\ndata_dir = file-data\n", path, sizeof(path));
    assert_int_equal(tc_load(e, "--config", path, NULL), 0);
    snprintf(expect, sizeof(expect), "%s/file-data", cwd);
    assert_string_equal(e->cfg.data_dir, expect);
    /* Absolute ones are left alone. */
    assert_int_equal(tc_load(e, "--data-dir", "/abs/data", NULL), 0);
    assert_string_equal(e->cfg.data_dir, "/abs/data");
    /* Too long once joined: refused, not cut. */
    memset(long_rel, 'a', sizeof(long_rel) - 1);
    long_rel[sizeof(long_rel) - 1] = '\0';
    assert_int_equal(tc_load(e, "--data-dir", long_rel, NULL), CONFIG_E_INVALID);
    assert_non_null(strstr(e->err, "too long"));
    /* The root's children do not start with two slashes. */
    assert_int_equal(chdir("/"), 0);
    assert_int_equal(tc_load(e, "--data-dir", "data", NULL), 0);
    assert_string_equal(e->cfg.data_dir, "/data");
    assert_int_equal(tc_load(e, "--data-dir", ".", NULL), 0);
    assert_string_equal(e->cfg.data_dir, "/");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_defaults_from_xdg, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_defaults_without_xdg, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_defaults_ignore_relative_xdg, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_file_every_key, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_file_chunk_size_suffixes, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_backend_options, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_print_config, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_file_range_bounds, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_default_config_file_is_read, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_missing_default_config_is_fine, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_missing_explicit_config_is_invalid, tc_setup,
                                        tc_teardown),
        cmocka_unit_test_setup_teardown(test_precedence, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_env_and_flag_values_are_checked, tc_setup,
                                        tc_teardown),
        cmocka_unit_test_setup_teardown(test_relative_data_dir, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_backend_secrets, tc_setup, tc_teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL) + test_config_errors_run();
}
