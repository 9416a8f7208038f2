/*
 * Unit tests of cairnd's configuration, continued (test-config.c has the
 * rest): errors in the file carry its file:line, and the command line.
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

/* ---- file errors carry file:line ----------------------------------------- */

static void test_unknown_key(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX];

    tc_write_file(e->dir, "unknown-key.conf",
                  "# line 1 is a comment\n"
                  "[daemon]\n"
                  "threads = 2\n"
                  "\n"
                  "sockett = /x.sock\n"
                  "log_level = debug\n",
                  path, sizeof(path));
    assert_int_equal(tc_load(e, "--config", path, NULL), CONFIG_E_INVALID);
    tc_assert_err_at(e, path, 5, "sockett");
    assert_non_null(strstr(e->err, "unknown key"));

    /* A key of one section is unknown in another. */
    tc_write_file(e->dir, "wrong-section.conf", "[store]\nsocket = /x.sock\n", path, sizeof(path));
    assert_int_equal(tc_load(e, "--config", path, NULL), CONFIG_E_INVALID);
    tc_assert_err_at(e, path, 2, "socket");
    assert_non_null(strstr(e->err, "unknown key"));
}

static void test_unknown_section(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX];

    tc_write_file(e->dir, "unknown-section.conf",
                  "[daemon]\n"
                  "threads = 2\n"
                  "; a comment\n"
                  "[deamon]\n"
                  "socket = /x.sock\n",
                  path, sizeof(path));
    assert_int_equal(tc_load(e, "--config", path, NULL), CONFIG_E_INVALID);
    tc_assert_err_at(e, path, 5, "deamon");
    assert_non_null(strstr(e->err, "unknown section"));

    /* A header without its bracket is the error, on its line (not a later key's). */
    tc_write_file(e->dir, "bracket.conf", "[daemon]\nthreads = 2\n[store\ncache_size = 8M\n", path,
                  sizeof(path));
    assert_int_equal(tc_load(e, "--config", path, NULL), CONFIG_E_INVALID);
    tc_assert_err_at(e, path, 3, "ends with ']'");

    /* A size spelled 64MB: the message says how sizes are written. */
    tc_write_file(e->dir, "mb.conf", "[store]\ncache_size = 64MB\n", path, sizeof(path));
    assert_int_equal(tc_load(e, "--config", path, NULL), CONFIG_E_INVALID);
    tc_assert_err_at(e, path, 2, "cache_size");
    assert_non_null(strstr(e->err, "sizes are written 64M, 512K or 2G"));

    /* A key before any section header has no section, which is unknown too. */
    tc_write_file(e->dir, "no-section.conf", "\nthreads = 2\n", path, sizeof(path));
    assert_int_equal(tc_load(e, "--config", path, NULL), CONFIG_E_INVALID);
    tc_assert_err_at(e, path, 2, "threads");
}

static void test_bad_values(void **state)
{
    static const struct {
        const char *section, *key, *value;
    } cases[] = {
        {"store", "compression_level", "0"},
        {"store", "compression_level", "20"},
        {"store", "chunk_max", "32"},
        {"store", "chunk_max", "2M"},
        {"store", "chunk_max", "1025K"},
        {"store", "chunk_max", "64KB"},
        {"store", "chunk_max", "-64K"},
        {"store", "chunk_avg", "big"},
        {"daemon", "max_connections", "0"},
        {"daemon", "max_connections", "1000001"},
        {"daemon", "log_level", "loud"},
        {"daemon", "threads", "129"},
        {"daemon", "threads", "-1"},
        {"daemon", "threads", "2x"},
        {"daemon", "max_connections", "-5"},
        {"store", "compression_level", ""},
        {"daemon", "connection_memory", "3M"},
        {"daemon", "connection_memory", "65537M"},
        {"daemon", "connection_memory", "lots"},
        {"daemon", "client_timeout", "2d"},
        {"daemon", "client_timeout", "-1s"},
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
        tc_write_file(e->dir, "bad.conf", conf, path, sizeof(path));
        if (tc_load(e, "--config", path, NULL) != CONFIG_E_INVALID)
            fail_msg("%s = '%s' was accepted", cases[i].key, cases[i].value);
        tc_assert_err_at(e, path, 3 + (int)i, cases[i].key);
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
        tc_write_file(e->dir, "order.conf", confs[i], path, sizeof(path));
        if (tc_load(e, "--config", path, NULL) != CONFIG_E_INVALID)
            fail_msg("accepted: %s", confs[i]);
        assert_non_null(strstr(e->err, "chunk_min < chunk_avg < chunk_max"));
    }
}

/* Only the first problem is reported, with its own line. */
static void test_first_error_wins(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX];

    tc_write_file(e->dir, "two.conf", "[daemon]\nthreads = 500\nlog_level = loud\n", path,
                  sizeof(path));
    assert_int_equal(tc_load(e, "--config", path, NULL), CONFIG_E_INVALID);
    tc_assert_err_at(e, path, 2, "threads");
    assert_null(strstr(e->err, "log_level"));
}

static void test_syntax_error(void **state)
{
    struct env *e = *state;
    char path[PATH_MAX];

    tc_write_file(e->dir, "syntax.conf", "[daemon]\nthreads = 2\nthis line has no equals sign\n",
                  path, sizeof(path));
    assert_int_equal(tc_load(e, "--config", path, NULL), CONFIG_E_INVALID);
    tc_assert_err_at(e, path, 3, "syntax error");
}

/* ---- the command line ---------------------------------------------------- */

/* Runs tc_load() with stdout redirected to a file and returns what was printed. */
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
    r = tc_load(e, flag, NULL);
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
    assert_int_equal(tc_load(e, "--config", path, "--version", NULL), CONFIG_E_EXIT);
}

static void test_usage_errors(void **state)
{
    struct env *e = *state;

    assert_int_equal(tc_load(e, "--no-such-flag", NULL), CONFIG_E_USAGE);
    assert_non_null(strstr(e->err, "--no-such-flag"));

    assert_int_equal(tc_load(e, "-x", NULL), CONFIG_E_USAGE);
    assert_non_null(strstr(e->err, "-x"));

    assert_int_equal(tc_load(e, "--socket", NULL), CONFIG_E_USAGE);
    assert_non_null(strstr(e->err, "--socket"));
    assert_non_null(strstr(e->err, "value"));

    assert_int_equal(tc_load(e, "--data-dir", "/d", "--config", NULL), CONFIG_E_USAGE);
    assert_non_null(strstr(e->err, "--config"));

    assert_int_equal(tc_load(e, "--socket", "/s.sock", "stray", NULL), CONFIG_E_USAGE);
    assert_non_null(strstr(e->err, "stray"));

    /* GNU getopt moves operands to the end; one before the flags is still found. */
    assert_int_equal(tc_load(e, "stray2", "--socket", "/s.sock", NULL), CONFIG_E_USAGE);
    assert_non_null(strstr(e->err, "stray2"));

    /* --help takes no value. */
    assert_int_equal(tc_load(e, "--help=yes", NULL), CONFIG_E_USAGE);
}

/*
 * config_load() resets getopt itself: a parse that stopped in the middle (an
 * error, or a cluster of short options) does not leak into the next one.
 */
static void test_repeated_parses_are_independent(void **state)
{
    struct env *e = *state;

    assert_int_equal(tc_load(e, "--bogus", "--socket", "/first.sock", NULL), CONFIG_E_USAGE);
    assert_int_equal(tc_load(e, "--socket", "/second.sock", NULL), 0);
    assert_string_equal(e->cfg.socket_path, "/second.sock");

    assert_int_equal(tc_load(e, "-xy", NULL), CONFIG_E_USAGE);
    assert_int_equal(tc_load(e, "--socket", "/third.sock", NULL), 0);
    assert_string_equal(e->cfg.socket_path, "/third.sock");
    assert_int_equal(tc_load(e, NULL), 0);
}

int test_config_errors_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_chunk_sizes_must_be_ordered, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_unknown_key, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_unknown_section, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_bad_values, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_first_error_wins, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_syntax_error, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_help_and_version, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_help_before_config, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_usage_errors, tc_setup, tc_teardown),
        cmocka_unit_test_setup_teardown(test_repeated_parses_are_independent, tc_setup,
                                        tc_teardown),
    };

    return cmocka_run_group_tests_name("configuration: errors and the command line", tests, NULL,
                                       NULL);
}
