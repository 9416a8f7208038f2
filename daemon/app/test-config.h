#pragma once

/*
 * What the unit tests of cairnd's configuration share (test-config-util.c):
 * a private environment and temporary directory per test, and config_load()
 * run on an argument list.
 */

#include <limits.h>
#include <stddef.h>

#include "daemon/app/config.h"

struct env {
    char dir[PATH_MAX / 2]; /* mkdtemp result, removed at the end */
    char home[PATH_MAX];    /* $HOME: exists, but holds no config file */
    char xdg_config[PATH_MAX];
    char cwd[PATH_MAX]; /* the working directory before the test, restored after it */
    struct config cfg;
    char err[1024];
};

/* cmocka setup and teardown: the private environment in *state. */
int tc_setup(void **state);
int tc_teardown(void **state);
/* Writes `content` to dir/name and returns the path in `path`. */
void tc_write_file(const char *dir, const char *name, const char *content, char *path,
                   size_t path_len);
/* Runs config_load() with "cairnd" followed by the NULL-terminated arguments. */
int tc_load(struct env *e, ...);
/* Asserts that err starts with "path:line: " and mentions `word`. */
void tc_assert_err_at(const struct env *e, const char *path, int line, const char *word);
void tc_assert_built_in_values(const struct config *cfg);

/* The tests of errors and of the command line (test-config-errors.c). */
int test_config_errors_run(void);
