/*
 * cairnd's config file (INI): the input is the file given with --config,
 * loaded as at start (every section, key and value checked, the backend's
 * options gathered into its URL), then printed as --print-config does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/app/config.h"
#include "tests/fuzz/fuzz.h"

static int fd = -1;
static char path[64];
static FILE *sink;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* A file only its owner can read: secrets in it are allowed. */
    if ((fd = memfd_create("cairn.conf", 0)) < 0 || fchmod(fd, 0600) != 0 ||
        !(sink = fopen("/dev/null", "w"))) {
        perror("fuzz-config");
        exit(1);
    }
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    unsetenv("CAIRN_SOCKET");
    unsetenv("CAIRN_DATA_DIR");
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct config cfg;
    char arg0[] = "cairnd", arg1[] = "--config", err[1024];
    char *argv[] = {arg0, arg1, path, NULL};

    if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != (ssize_t)size)
        abort();
    if (config_load(&cfg, 3, argv, err, sizeof(err)) == 0)
        config_print(&cfg, sink);
    return 0;
}
