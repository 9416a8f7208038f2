#pragma once

/*
 * The libFuzzer entry points every harness defines (LLVMFuzzerInitialize
 * only where it needs one); replay.c calls them the same way without
 * libFuzzer.
 */

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

#include <stdlib.h>
#include <string.h>

/* A NUL-terminated copy of an input (malloc'd), for parsers of C strings. NULL when out of memory.
 */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s) {
        memcpy(s, data, size);
        s[size] = '\0';
    }
    return s;
}
