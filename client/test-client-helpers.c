/*
 * Unit tests of the client library's and the CLI's helpers that need no
 * daemon: -m KEY=VALUE, UTF-8 and mime, paths, and output as text or JSON.
 */
#include "client/test-client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- helpers --- */

/* Parses a msgpack payload built in `sbuf` into `msg`. */
static void parse(struct proto_msg *msg, const msgpack_sbuffer *sbuf)
{
    assert_int_equal(proto_msg_parse(msg, (const uint8_t *)sbuf->data, sbuf->size), 0);
}

static char *json_line(json_t *json)
{
    char *text = json_dumps(json, JSON_COMPACT);

    json_decref(json);
    return text;
}

/* Runs cli_print_fields() and returns what it printed. */
static char *fields_text(const msgpack_object *map, const char *const *keys)
{
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);

    cli_print_fields(out, map, keys);
    fclose(out);
    return text;
}

/* --- -m KEY=VALUE --- */

static void test_parse_meta(void **state)
{
    struct client_meta m;
    char plain[] = "author=ann", empty[] = "k=", eqs[] = "url=a=b", none[] = "novalue",
         nokey[] = "=v", blank[] = "";

    assert_int_equal(cli_parse_meta(plain, &m), 0);
    assert_string_equal(m.key, "author");
    assert_string_equal(m.value, "ann");
    assert_int_equal(cli_parse_meta(empty, &m), 0);
    assert_string_equal(m.key, "k");
    assert_string_equal(m.value, "");
    assert_int_equal(cli_parse_meta(eqs, &m), 0);
    assert_string_equal(m.key, "url");
    assert_string_equal(m.value, "a=b");
    assert_int_equal(cli_parse_meta(none, &m), -EINVAL);
    assert_int_equal(cli_parse_meta(nokey, &m), -EINVAL);
    assert_int_equal(cli_parse_meta(blank, &m), -EINVAL);
}

/* --- UTF-8 and mime --- */

static void test_utf8_seq(void **state)
{
    static const struct {
        const char *bytes;
        size_t len;
        int expect;
    } cases[] = {
        {"a", 1, 1},
        {"\xc3\xa9", 2, 2},
        {"\xe2\x82\xac", 3, 3},
        {"\xf0\x9f\x98\x80", 4, 4},
        {"\xf4\x8f\xbf\xbf", 4, 4}, /* U+10FFFF */
        {"\xc0\xaf", 2, 0},         /* overlong '/' */
        {"\xe0\x80\xaf", 3, 0},     /* overlong */
        {"\xed\xa0\x80", 3, 0},     /* surrogate */
        {"\xf4\x90\x80\x80", 4, 0}, /* above U+10FFFF */
        {"\xf5\x80\x80\x80", 4, 0},
        {"\x80", 1, 0},  /* lone continuation */
        {"\xc3", 1, -1}, /* cut short */
        {"\xe2\x82", 2, -1},
        {"\xe2\x28\xa1", 3, 0}, /* bad continuation */
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(client_utf8_seq((const uint8_t *)cases[i].bytes, cases[i].len),
                         cases[i].expect);
}

static void test_mime_guess(void **state)
{
    static const char text[] = "text/plain", binary[] = "application/octet-stream";
    uint8_t buf[CLIENT_MIME_WINDOW + 16];

    assert_string_equal(client_mime_guess((const uint8_t *)"hello\n", 6), text);
    assert_string_equal(client_mime_guess((const uint8_t *)"caf\xc3\xa9", 5), text);
    assert_string_equal(client_mime_guess((const uint8_t *)"", 0), text);
    assert_string_equal(client_mime_guess((const uint8_t *)"a\0b", 3), binary);
    assert_string_equal(client_mime_guess((const uint8_t *)"\xff\xfe", 2), binary);
    /* Cut by the end of the content: not UTF-8. */
    assert_string_equal(client_mime_guess((const uint8_t *)"caf\xc3", 4), binary);

    /* A sequence cut by the 8 KiB window still counts as text... */
    memset(buf, 'x', sizeof(buf));
    memcpy(buf + CLIENT_MIME_WINDOW - 1, "\xc3\xa9", 2);
    assert_string_equal(client_mime_guess(buf, sizeof(buf)), text);
    /* ...and what lies beyond the window is not looked at. */
    buf[CLIENT_MIME_WINDOW + 4] = '\0';
    assert_string_equal(client_mime_guess(buf, sizeof(buf)), text);
    buf[CLIENT_MIME_WINDOW - 2] = '\0';
    assert_string_equal(client_mime_guess(buf, sizeof(buf)), binary);
}

/* --- paths --- */

static void test_socket_path(void **state)
{
    char path[108], small[8], longdir[200];

    setenv("CAIRN_SOCKET", "/run/x.sock", 1);
    setenv("XDG_RUNTIME_DIR", "/run/user/1000", 1);
    assert_int_equal(client_socket_path(path, sizeof(path)), 0);
    assert_string_equal(path, "/run/x.sock");

    setenv("CAIRN_SOCKET", "", 1); /* empty counts as unset */
    assert_int_equal(client_socket_path(path, sizeof(path)), 0);
    assert_string_equal(path, "/run/user/1000/cairn/cairnd.sock");
    assert_int_equal(client_socket_path(small, sizeof(small)), -ENAMETOOLONG);

    unsetenv("CAIRN_SOCKET");
    unsetenv("XDG_RUNTIME_DIR");
    assert_int_equal(client_socket_path(path, sizeof(path)), 0);
    char expect[64];
    snprintf(expect, sizeof(expect), "/tmp/cairn-%u/cairnd.sock", (unsigned)getuid());
    assert_string_equal(path, expect);

    /* Longer than a socket address can hold, even if the buffer is large. */
    memset(longdir, 'd', sizeof(longdir) - 1);
    longdir[0] = '/';
    longdir[sizeof(longdir) - 1] = '\0';
    setenv("XDG_RUNTIME_DIR", longdir, 1);
    char big[512];
    assert_int_equal(client_socket_path(big, sizeof(big)), -ENAMETOOLONG);
    unsetenv("XDG_RUNTIME_DIR");
}

static void test_data_dir(void **state)
{
    char dir[256];

    setenv("CAIRN_DATA_DIR", "/srv/cairn", 1);
    setenv("XDG_DATA_HOME", "/home/u/.data", 1);
    setenv("HOME", "/home/u", 1);
    assert_int_equal(cli_data_dir(dir, sizeof(dir), NULL), 0);
    assert_string_equal(dir, "/srv/cairn");
    unsetenv("CAIRN_DATA_DIR");
    assert_int_equal(cli_data_dir(dir, sizeof(dir), NULL), 0);
    assert_string_equal(dir, "/home/u/.data/cairn");
    setenv("XDG_DATA_HOME", "", 1);
    assert_int_equal(cli_data_dir(dir, sizeof(dir), NULL), 0);
    assert_string_equal(dir, "/home/u/.local/share/cairn");
    assert_int_equal(cli_data_dir(dir, 8, NULL), -ENAMETOOLONG);
}

/* --- output --- */

static void test_json_reply(void **state)
{
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    struct proto_msg msg;
    char *text;

    msgpack_sbuffer_init(&sbuf);
    msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 9);
    proto_pack_cstr(&pk, "id");
    msgpack_pack_uint64(&pk, 7);
    proto_pack_cstr(&pk, "ok");
    msgpack_pack_true(&pk);
    proto_pack_cstr(&pk, "more");
    msgpack_pack_false(&pk);
    proto_pack_cstr(&pk, "name");
    proto_pack_cstr(&pk, "say \"hi\"\n\\"); /* needs escaping */
    proto_pack_cstr(&pk, "bad");
    proto_pack_str(&pk, "caf\xe9!", 5); /* Latin-1, not UTF-8 */
    proto_pack_cstr(&pk, "size");
    msgpack_pack_uint64(&pk, UINT64_C(5000000000));
    proto_pack_cstr(&pk, "tags");
    msgpack_pack_array(&pk, 2);
    proto_pack_cstr(&pk, "a");
    proto_pack_cstr(&pk, "\xc3\xa9");
    proto_pack_cstr(&pk, "meta");
    msgpack_pack_map(&pk, 1);
    proto_pack_cstr(&pk, "k");
    proto_pack_cstr(&pk, "v");
    proto_pack_cstr(&pk, "new");
    msgpack_pack_true(&pk);
    parse(&msg, &sbuf);

    text = json_line(cli_json_reply(msg.map));
    assert_string_equal(text, "{\"name\":\"say \\\"hi\\\"\\n\\\\\",\"bad\":\"caf\xef\xbf\xbd!\","
                              "\"size\":5000000000,\"tags\":[\"a\",\"\xc3\xa9\"],"
                              "\"meta\":{\"k\":\"v\"},\"new\":true}");
    free(text);
    /* A nested map keeps every key: only a reply's own framing is dropped. */
    text = json_line(cli_json_value(msg.map));
    assert_non_null(strstr(text, "\"id\":7,\"ok\":true,\"more\":false"));
    free(text);
    proto_msg_deinit(&msg);
    msgpack_sbuffer_destroy(&sbuf);
}

static void test_format_time(void **state)
{
    char buf[CLI_TIME_MAX];

    cli_format_time(0, buf);
    assert_string_equal(buf, "1970-01-01T00:00:00Z");
    cli_format_time(1700000000, buf);
    assert_string_equal(buf, "2023-11-14T22:13:20Z");
}

static void test_print_fields(void **state)
{
    static const char *const keys[] = {"hash", "name", "created", "tags", "meta", "absent", NULL};
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    struct proto_msg msg;
    char *text;

    msgpack_sbuffer_init(&sbuf);
    msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 5);
    proto_pack_cstr(&pk, "meta");
    msgpack_pack_map(&pk, 2);
    proto_pack_cstr(&pk, "a");
    proto_pack_cstr(&pk, "1");
    proto_pack_cstr(&pk, "b");
    proto_pack_cstr(&pk, "2");
    proto_pack_cstr(&pk, "hash");
    proto_pack_cstr(&pk, "ab12");
    proto_pack_cstr(&pk, "name");
    proto_pack_cstr(&pk, "");
    proto_pack_cstr(&pk, "created");
    msgpack_pack_uint64(&pk, 1700000000);
    proto_pack_cstr(&pk, "tags");
    msgpack_pack_array(&pk, 2);
    proto_pack_cstr(&pk, "x");
    proto_pack_cstr(&pk, "y");
    parse(&msg, &sbuf);

    text = fields_text(msg.map, keys);
    assert_string_equal(text, "hash: ab12\n"
                              "name:\n"
                              "created: 2023-11-14T22:13:20Z\n"
                              "tags:\n  x\n  y\n"
                              "meta:\n  a=1\n  b=2\n");
    free(text);
    proto_msg_deinit(&msg);
    msgpack_sbuffer_destroy(&sbuf);
}

int test_client_helpers_run(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_meta),  cmocka_unit_test(test_utf8_seq),
        cmocka_unit_test(test_mime_guess),  cmocka_unit_test(test_socket_path),
        cmocka_unit_test(test_data_dir),    cmocka_unit_test(test_json_reply),
        cmocka_unit_test(test_format_time), cmocka_unit_test(test_print_fields),
    };

    return cmocka_run_group_tests_name("client: helpers", tests, NULL, NULL);
}
