/*
 * Unit tests of the inode table of `cairn mount` (mount-inode.c): an
 * identity keeps the one number it got, also when another identity asked
 * for the same number and the one that held it first has gone, and a
 * number never stands for two identities. The table's hash of identities
 * is replaced by one that makes them all collide.
 */

#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "client/mount.h"

#define HOME 1000

static uint64_t all_collide(enum mount_kind kind, const char *path, const char *hash)
{
    (void)kind, (void)path, (void)hash;
    return HOME;
}

static uint64_t ask_root(enum mount_kind kind, const char *path, const char *hash)
{
    (void)kind, (void)path, (void)hash;
    return MOUNT_INO_ROOT;
}

static struct mount_node named(char *path)
{
    struct mount_node n = {.kind = MOUNT_NAMED, .path = path};

    memset(n.hash, 'a', PROTO_HASH_HEX);
    return n;
}

static uint64_t ref(struct mount_fs *fs, char *path)
{
    struct mount_node want = named(path);
    uint64_t ino;

    assert_int_equal(mount_node_ref(fs, &want, &ino), 0);
    return ino;
}

static void assert_names(struct mount_fs *fs, uint64_t ino, const char *path)
{
    struct mount_node copy;

    assert_int_equal(mount_node_get(fs, ino, &copy), 0);
    assert_string_equal(copy.path, path);
    free(copy.path);
}

static void test_an_identity_keeps_its_number(void **state)
{
    struct mount_fs fs;
    struct mount_node copy;
    uint64_t a, b, c;

    (void)state;
    assert_int_equal(mount_fs_init(&fs, "/nonexistent"), 0);
    fs.ino_of = all_collide;
    a = ref(&fs, "a");
    b = ref(&fs, "b");
    assert_int_equal(a, HOME);
    assert_int_equal(b, HOME + 1);
    /* a goes; b, asked for again, is the b the kernel knows, not a second one on a's number. */
    mount_node_forget(&fs, a, 1);
    assert_int_equal(ref(&fs, "b"), b);
    assert_int_equal(mount_node_get(&fs, a, &copy), -ESTALE);
    /* A newcomer takes the free number; each number is one identity. */
    c = ref(&fs, "c");
    assert_int_equal(c, HOME);
    assert_names(&fs, b, "b");
    assert_names(&fs, c, "c");
    /* b's lookups (two) go, then b. */
    mount_node_forget(&fs, b, 1);
    assert_names(&fs, b, "b");
    mount_node_forget(&fs, b, 1);
    assert_int_equal(mount_node_get(&fs, b, &copy), -ESTALE);
    assert_int_equal(ref(&fs, "a"), HOME + 1);
    mount_fs_deinit(&fs);
}

/* Past the growth of the table (twice the buckets), every identity is found at its number. */
static void test_many_identities_through_growth(void **state)
{
    enum { N = 1200 };
    struct mount_fs fs;
    static char names[N][16];
    static uint64_t inos[N];

    (void)state;
    assert_int_equal(mount_fs_init(&fs, "/nonexistent"), 0);
    fs.ino_of = all_collide;
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "n%d", i);
        inos[i] = ref(&fs, names[i]);
        assert_int_equal(inos[i], HOME + (uint64_t)i);
    }
    assert_true(fs.nbuckets > 256);
    /* Every other one goes; the rest keep their numbers. */
    for (int i = 0; i < N; i += 2)
        mount_node_forget(&fs, inos[i], 1);
    for (int i = 1; i < N; i += 2) {
        assert_int_equal(ref(&fs, names[i]), inos[i]);
        assert_names(&fs, inos[i], names[i]);
    }
    mount_fs_deinit(&fs);
}

/* The root's and by-hash's numbers are never given to a node. */
static void test_reserved_numbers(void **state)
{
    struct mount_fs fs;

    (void)state;
    assert_int_equal(mount_fs_init(&fs, "/nonexistent"), 0);
    fs.ino_of = ask_root;
    assert_int_equal(ref(&fs, "x"), MOUNT_INO_HASHDIR + 1);
    assert_int_equal(ref(&fs, "y"), MOUNT_INO_HASHDIR + 2);
    mount_fs_deinit(&fs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_an_identity_keeps_its_number),
        cmocka_unit_test(test_many_identities_through_growth),
        cmocka_unit_test(test_reserved_numbers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
