/*
 * Runs a fuzz harness over files, without libFuzzer: every build (gcc, and
 * the sanitizer build) replays the committed corpus and regression inputs of
 * each harness this way, so an input that once crashed keeps being tried.
 *
 *   fuzz-replay-NAME PATH...   each PATH a file or a directory of files
 *
 * Exits 0 when every input ran (a crash or a sanitizer report ends the
 * process before that), 1 when an input could not be read or none was found.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz.h"

/* Most bytes of one input; libFuzzer's own default -max_len is far below. */
#define REPLAY_MAX (16u * 1024 * 1024)

static int run_file(const char *path, unsigned long *count)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;
    size_t len;

    if (!f) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!(buf = malloc(REPLAY_MAX + 1))) {
        fclose(f);
        fprintf(stderr, "out of memory\n");
        return -1;
    }
    len = fread(buf, 1, REPLAY_MAX + 1, f);
    if (ferror(f) || len > REPLAY_MAX) {
        fprintf(stderr, "%s: %s\n", path, ferror(f) ? "read error" : "over 16 MiB");
        fclose(f);
        free(buf);
        return -1;
    }
    fclose(f);
    /* An exact-size copy, so that the sanitizers see a read past the input. */
    uint8_t *input = malloc(len ? len : 1);
    if (!input) {
        free(buf);
        return -1;
    }
    memcpy(input, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(input, len);
    free(input);
    (*count)++;
    return 0;
}

static int compare(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_path(const char *path, unsigned long *count)
{
    struct stat st;
    DIR *d;
    struct dirent *e;
    char **names = NULL;
    size_t n = 0, cap = 0;
    int r = 0;

    if (stat(path, &st) != 0) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode))
        return run_file(path, count);
    if (!(d = opendir(path))) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        if (n == cap) {
            char **grown = realloc(names, (cap = cap ? cap * 2 : 64) * sizeof(*names));
            if (!grown) {
                r = -1;
                break;
            }
            names = grown;
        }
        if (asprintf(&names[n], "%s/%s", path, e->d_name) < 0) {
            r = -1;
            break;
        }
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof(*names), compare); /* the same order every run */
    for (size_t i = 0; i < n; i++) {
        if (r == 0 && run_file(names[i], count) != 0)
            r = -1;
        free(names[i]);
    }
    free(names);
    return r;
}

int main(int argc, char **argv)
{
    unsigned long count = 0;
    int r = 0;

    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE-OR-DIRECTORY...\n", argv[0]);
        return 2;
    }
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        if (run_path(argv[i], &count) != 0)
            r = 1;
    }
    if (count == 0) {
        fprintf(stderr, "no inputs found\n");
        r = 1;
    }
    printf("%lu inputs ran\n", count);
    return r;
}
