/*
 * The shared credentials file (~/.aws/credentials or
 * $AWS_SHARED_CREDENTIALS_FILE) as the s3 backend reads it at start: the
 * input is the file, and the profile looked up is "fuzz".
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "storage/s3/s3-creds.h"
#include "tests/fuzz/fuzz.h"

static int fd = -1;
static struct s3_opts opts;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    char path[64];
    const char *msg;

    (void)argc;
    (void)argv;
    if ((fd = memfd_create("credentials", 0)) < 0) {
        perror("memfd_create");
        exit(1);
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_SESSION_TOKEN");
    if (s3_parse_url("s3://bucket/prefix?profile=fuzz", &opts, &msg) != 0) {
        fprintf(stderr, "s3_parse_url: %s\n", msg);
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct s3_creds creds;
    char msg[512];

    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
        abort();
    (void)s3_creds_resolve(&creds, &opts, msg, sizeof(msg));
    s3_creds_clear(&creds);
    return 0;
}
