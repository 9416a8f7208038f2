/* The environment of the configuration's unit tests (test-config.h). */
#include "daemon/app/test-config.h"

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

static const char *const env_vars[] = {
    "XDG_RUNTIME_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "HOME", "CAIRN_SOCKET", "CAIRN_DATA_DIR",
};

int tc_setup(void **state)
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

int tc_teardown(void **state)
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
void tc_write_file(const char *dir, const char *name, const char *content, char *path,
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
int tc_load(struct env *e, ...)
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
void tc_assert_err_at(const struct env *e, const char *path, int line, const char *word)
{
    char prefix[PATH_MAX + 32];

    snprintf(prefix, sizeof(prefix), "%s:%d: ", path, line);
    if (strncmp(e->err, prefix, strlen(prefix)) != 0)
        fail_msg("error '%s' does not start with '%s'", e->err, prefix);
    if (!strstr(e->err, word))
        fail_msg("error '%s' does not mention '%s'", e->err, word);
}

void tc_assert_built_in_values(const struct config *cfg)
{
    assert_string_equal(cfg->backend_url, "local");
    assert_int_equal(cfg->log_level, LOG_LEVEL_INFO);
    assert_int_equal(cfg->compression_level, COMPRESS_DEFAULT_LEVEL);
    assert_int_equal(cfg->chunk_min, 16 * 1024);
    assert_int_equal(cfg->chunk_avg, 64 * 1024);
    assert_int_equal(cfg->chunk_max, 256 * 1024);
    assert_int_equal(cfg->max_text, 16 * 1024 * 1024);
    assert_int_equal(cfg->max_connections, 4096);
    assert_int_equal(cfg->client_timeout_ms, 60000);
    assert_int_equal(cfg->connection_memory, 64 * 1024 * 1024);
    assert_int_equal(cfg->threads, 0);
}
