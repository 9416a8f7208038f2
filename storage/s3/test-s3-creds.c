/*
 * Unit tests of S3 credential resolution: the order (URL/[backend], then
 * the environment, then the profile), the profile from profile=, AWS_PROFILE
 * or "default" in ~/.aws/credentials or $AWS_SHARED_CREDENTIALS_FILE with
 * comments and odd spacing, r2's API token and parent key, half-given
 * pairs and missing profiles as errors, the message when there is nothing,
 * and that origin never holds a secret. Each test runs with a private HOME
 * in a mkdtemp directory and none of the AWS variables of the real one.
 */
#include "storage/s3/s3-creds.h"

#include <errno.h>
#include <ftw.h>
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

static const char *const vars[] = {
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",       "AWS_SESSION_TOKEN",
    "AWS_PROFILE",       "AWS_SHARED_CREDENTIALS_FILE", "CLOUDFLARE_API_TOKEN",
};

static char dir[PATH_MAX];
static struct s3_opts o;
static struct s3_creds c;
static char msg[512];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

static int setup(void **state)
{
    char aws[PATH_MAX + 8];
    const char *tmp = getenv("TMPDIR");

    snprintf(dir, sizeof(dir), "%s/cairn-test-s3-creds-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    assert_non_null(mkdtemp(dir));
    snprintf(aws, sizeof(aws), "%s/.aws", dir);
    assert_int_equal(mkdir(aws, 0700), 0);
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
        unsetenv(vars[i]);
    setenv("HOME", dir, 1);
    return 0;
}

static int teardown(void **state)
{
    assert_int_equal(nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
    return 0;
}

static void write_creds(const char *name, const char *text)
{
    char path[PATH_MAX + 32];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    assert_non_null(f = fopen(path, "w"));
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static void url(const char *u)
{
    const char *m;
    if (s3_parse_url(u, &o, &m))
        fail_msg("%s: %s", u, m);
}

static int resolve(void)
{
    msg[0] = '\0';
    int r = s3_creds_resolve(&c, &o, msg, sizeof(msg));
    if (r) {
        assert_int_not_equal(msg[0], '\0');
        assert_string_equal(c.access_key_id, "");
        assert_string_equal(c.secret_access_key, "");
    }
    return r;
}

static const char creds_file[] = "# the shared credentials file\n"
                                 "[default]\n"
                                 "aws_access_key_id = AKIDDEFAULT\n"
                                 "aws_secret_access_key = SecretDefault\n"
                                 "\n"
                                 "; another comment\n"
                                 "  [ backup ]  \n"
                                 "aws_access_key_id=AKIDBACKUP\n"
                                 "\taws_secret_access_key\t=\tSecret/Backup+x= \r\n"
                                 "aws_session_token = TokenBackup\n"
                                 "region = eu-west-1\n"
                                 "[half]\n"
                                 "aws_access_key_id = AKIDHALF\n";

static void test_order(void **state)
{
    (void)state;
    write_creds(".aws/credentials", creds_file);
    setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "SecretEnv", 1);
    setenv("AWS_SESSION_TOKEN", "TokenEnv", 1);
    /* 1. The URL or [backend]. */
    url("s3://bkt?access_key_id=AKIDCONF&secret_access_key=SecretConf");
    assert_int_equal(resolve(), 0);
    assert_int_equal(c.source, S3_CREDS_CONFIG);
    assert_string_equal(c.access_key_id, "AKIDCONF");
    assert_string_equal(c.secret_access_key, "SecretConf");
    assert_string_equal(c.session_token, "");
    assert_false(c.temporary);
    /* 2. The environment. */
    url("s3://bkt");
    assert_int_equal(resolve(), 0);
    assert_int_equal(c.source, S3_CREDS_ENV);
    assert_string_equal(c.access_key_id, "AKIDENV");
    assert_string_equal(c.secret_access_key, "SecretEnv");
    assert_string_equal(c.session_token, "TokenEnv");
    assert_null(strstr(c.origin, "Secret"));
    /* 3. The default profile. */
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    assert_int_equal(resolve(), 0);
    assert_int_equal(c.source, S3_CREDS_PROFILE);
    assert_string_equal(c.access_key_id, "AKIDDEFAULT");
    assert_string_equal(c.secret_access_key, "SecretDefault");
    assert_string_equal(c.session_token, "");
    char expect[PATH_MAX + 64];
    snprintf(expect, sizeof(expect), "profile default in %s/.aws/credentials", dir);
    assert_string_equal(c.origin, expect);
    s3_creds_clear(&c);
    assert_string_equal(c.secret_access_key, "");
}

static void test_profiles(void **state)
{
    (void)state;
    write_creds(".aws/credentials", creds_file);
    /* AWS_PROFILE, with spacing, tabs, CRLF and comments around. */
    setenv("AWS_PROFILE", "backup", 1);
    url("s3://bkt");
    assert_int_equal(resolve(), 0);
    assert_string_equal(c.access_key_id, "AKIDBACKUP");
    assert_string_equal(c.secret_access_key, "Secret/Backup+x=");
    assert_string_equal(c.session_token, "TokenBackup");
    /* profile= beats AWS_PROFILE. */
    url("s3://bkt?profile=default");
    assert_int_equal(resolve(), 0);
    assert_string_equal(c.access_key_id, "AKIDDEFAULT");
    /* A profile named but not there, or half there, is an error. */
    url("s3://bkt?profile=nope");
    assert_int_equal(resolve(), -EINVAL);
    assert_non_null(strstr(msg, "profile nope is not in"));
    url("s3://bkt?profile=half");
    assert_int_equal(resolve(), -EINVAL);
    assert_non_null(strstr(msg, "needs aws_access_key_id and aws_secret_access_key"));
    /* $AWS_SHARED_CREDENTIALS_FILE instead of ~/.aws/credentials. */
    char other[PATH_MAX + 16];
    snprintf(other, sizeof(other), "%s/other", dir);
    write_creds("other", "[backup]\naws_access_key_id = AKIDOTHER\n"
                         "aws_secret_access_key = SecretOther\n");
    setenv("AWS_SHARED_CREDENTIALS_FILE", other, 1);
    url("s3://bkt");
    assert_int_equal(resolve(), 0);
    assert_string_equal(c.access_key_id, "AKIDOTHER");
    assert_non_null(strstr(c.origin, "profile backup in "));
    assert_non_null(strstr(c.origin, "/other"));
    /* Named file missing: said, with the path. */
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/creds", 1);
    assert_int_equal(resolve(), -EIO);
    assert_non_null(strstr(msg, "/nonexistent/creds"));
    /* A malformed file. */
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    write_creds(".aws/credentials", "[backup\naws_access_key_id = x\n");
    assert_int_equal(resolve(), -EINVAL);
    assert_non_null(strstr(msg, "without ']'"));
}

static void test_none_and_halves(void **state)
{
    (void)state;
    url("s3://bkt");
    assert_int_equal(resolve(), -EINVAL);
    assert_string_equal(msg, "s3 backend: no credentials: set AWS_ACCESS_KEY_ID and "
                             "AWS_SECRET_ACCESS_KEY, a profile in ~/.aws/credentials, or "
                             "access_key_id/secret_access_key in [backend]");
    /* A file without the default profile is the same "nothing". */
    write_creds(".aws/credentials", "[other]\naws_access_key_id = a\naws_secret_access_key = b\n");
    assert_int_equal(resolve(), -EINVAL);
    assert_non_null(strstr(msg, "no credentials"));
    /* Half a pair is a mistake to report, not a reason to look further. */
    setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
    assert_int_equal(resolve(), -EINVAL);
    assert_string_equal(msg,
                        "s3 backend: AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
    unsetenv("AWS_ACCESS_KEY_ID");
    setenv("AWS_SECRET_ACCESS_KEY", "SecretEnv", 1);
    assert_int_equal(resolve(), -EINVAL);
    assert_string_equal(msg,
                        "s3 backend: AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    url("s3://bkt?access_key_id=AKIDCONF");
    assert_int_equal(resolve(), -EINVAL);
    assert_non_null(strstr(msg, "secret_access_key is not"));
    /* A session token in the environment without the key it belongs to is not used. */
    write_creds(".aws/credentials", creds_file);
    setenv("AWS_SESSION_TOKEN", "Stray", 1);
    url("s3://bkt");
    assert_int_equal(resolve(), 0);
    assert_string_equal(c.session_token, "");
}

static void test_r2_token(void **state)
{
    (void)state;
    /* With an API token the key is a parent and needs no secret. */
    url("r2://bkt?account=abc&api_token=CfTokenConf&access_key_id=parent1");
    assert_int_equal(resolve(), 0);
    assert_true(c.temporary);
    assert_string_equal(c.api_token, "CfTokenConf");
    assert_string_equal(c.access_key_id, "parent1");
    assert_string_equal(c.secret_access_key, "");
    assert_non_null(strstr(c.origin, "parent key of temporary credentials"));
    assert_null(strstr(c.origin, "CfToken"));
    /* CLOUDFLARE_API_TOKEN, with the parent key from the environment. */
    setenv("CLOUDFLARE_API_TOKEN", "CfTokenEnv", 1);
    setenv("AWS_ACCESS_KEY_ID", "parent2", 1);
    url("r2://bkt?account=abc");
    assert_int_equal(resolve(), 0);
    assert_true(c.temporary);
    assert_string_equal(c.api_token, "CfTokenEnv");
    assert_string_equal(c.access_key_id, "parent2");
    assert_non_null(strstr(c.origin, "CLOUDFLARE_API_TOKEN"));
    /* Without a token, r2 keys are used as they are and need their secret. */
    unsetenv("CLOUDFLARE_API_TOKEN");
    assert_int_equal(resolve(), -EINVAL);
    setenv("AWS_SECRET_ACCESS_KEY", "R2Secret", 1);
    assert_int_equal(resolve(), 0);
    assert_false(c.temporary);
    assert_string_equal(c.api_token, "");
    assert_string_equal(c.secret_access_key, "R2Secret");
    /* An s3:// backend ignores CLOUDFLARE_API_TOKEN. */
    setenv("CLOUDFLARE_API_TOKEN", "CfTokenEnv", 1);
    url("s3://bkt");
    assert_int_equal(resolve(), 0);
    assert_false(c.temporary);
    assert_string_equal(c.api_token, "");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_profiles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_none_and_halves, setup, teardown),
        cmocka_unit_test_setup_teardown(test_r2_token, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
