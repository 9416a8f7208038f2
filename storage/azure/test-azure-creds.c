/*
 * Unit tests of the azure backend's credentials: base64 keys, the
 * connection string's parser (every form the issue names, case, '=' in
 * values, empty parts, refusals), and the order of the sources.
 */
#include "storage/azure/azure-creds.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#define DEV_KEY                                                                                    \
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

static void clear_env(void)
{
    unsetenv("AZURE_STORAGE_CONNECTION_STRING");
    unsetenv("AZURE_STORAGE_ACCOUNT");
    unsetenv("AZURE_STORAGE_KEY");
    unsetenv("AZURE_STORAGE_SAS_TOKEN");
}

static void test_base64(void **state)
{
    uint8_t out[64];

    (void)state;
    assert_int_equal(az_base64_decode(DEV_KEY, out, sizeof(out)), 64);
    assert_int_equal(out[0], 0x11);
    assert_int_equal(az_base64_decode("a2V5", out, sizeof(out)), 3);
    assert_memory_equal(out, "key", 3);
    assert_int_equal(az_base64_decode("a2U=", out, sizeof(out)), 2);
    assert_int_equal(az_base64_decode("aw==", out, sizeof(out)), 1);
    assert_int_equal(az_base64_decode("", out, sizeof(out)), -1);
    assert_int_equal(az_base64_decode("a2V", out, sizeof(out)), -1);
    assert_int_equal(az_base64_decode("a2V!", out, sizeof(out)), -1);
    assert_int_equal(az_base64_decode("a=V5", out, sizeof(out)), -1);
    assert_int_equal(az_base64_decode("aw==a2V5", out, sizeof(out)), -1);
    assert_int_equal(az_base64_decode("ax==", out, sizeof(out)), -1); /* stray bits */
    assert_int_equal(az_base64_decode("a2V5a2V5", out, 5), -1);
}

static void test_conn_parse(void **state)
{
    struct az_conn c;
    const char *msg;

    (void)state;
    assert_int_equal(
        az_conn_parse("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=" DEV_KEY
                      ";EndpointSuffix=core.windows.net",
                      &c, &msg),
        0);
    assert_string_equal(c.protocol, "https");
    assert_string_equal(c.account, "acct");
    assert_string_equal(c.key_b64, DEV_KEY);
    assert_string_equal(c.suffix, "core.windows.net");
    assert_int_equal(az_conn_parse(" accountname = acct ;;BLOBENDPOINT=http://127.0.0.1:1/acct;"
                                   "SharedAccessSignature=?sv=1&sig=a%3D;QueueEndpoint=x;",
                                   &c, &msg),
                     0);
    assert_string_equal(c.account, " acct ");
    assert_string_equal(c.blob_endpoint, "http://127.0.0.1:1/acct");
    assert_string_equal(c.sas, "sv=1&sig=a%3D");
    assert_int_equal(az_conn_parse("UseDevelopmentStorage=true", &c, &msg), 0);
    assert_true(c.dev_storage);
    assert_int_equal(az_conn_parse("", &c, &msg), 0);
    assert_int_equal(az_conn_parse("AccountName", &c, &msg), -EINVAL);
    assert_int_equal(az_conn_parse("AccountName=a;AccountName=b", &c, &msg), -EINVAL);
    assert_non_null(strstr(msg, "twice"));
    assert_int_equal(az_conn_parse("DefaultEndpointsProtocol=ftp", &c, &msg), -EINVAL);
    assert_int_equal(az_conn_parse("UseDevelopmentStorage=yes", &c, &msg), -EINVAL);
    char big[AZ_MAX_SAS + 64];
    snprintf(big, sizeof(big), "SharedAccessSignature=%0*d", AZ_MAX_SAS, 0);
    assert_int_equal(az_conn_parse(big, &c, &msg), -EINVAL);
    assert_string_equal(c.sas, "");
}

static struct az_opts opts(const char *account)
{
    struct az_opts o;
    memset(&o, 0, sizeof(o));
    snprintf(o.account, sizeof(o.account), "%s", account);
    return o;
}

static void test_order(void **state)
{
    struct az_creds c;
    struct az_opts o = opts("acct");
    char msg[512];

    (void)state;
    clear_env();
    assert_int_equal(az_creds_resolve(&c, &o, msg, sizeof(msg)), -EINVAL);
    assert_non_null(strstr(msg, "no credentials"));
    setenv("AZURE_STORAGE_ACCOUNT", "acct", 1);
    setenv("AZURE_STORAGE_SAS_TOKEN", "?sv=2&sig=s", 1);
    assert_int_equal(az_creds_resolve(&c, &o, msg, sizeof(msg)), 0);
    assert_int_equal(c.auth, AZ_AUTH_SAS);
    assert_string_equal(c.sas, "sv=2&sig=s");
    setenv("AZURE_STORAGE_KEY", "a2V5", 1);
    assert_int_equal(az_creds_resolve(&c, &o, msg, sizeof(msg)), 0);
    assert_int_equal(c.auth, AZ_AUTH_KEY);
    assert_int_equal(c.key_len, 3);
    setenv("AZURE_STORAGE_ACCOUNT", "other", 1);
    assert_int_equal(az_creds_resolve(&c, &o, msg, sizeof(msg)), -EINVAL);
    assert_non_null(strstr(msg, "other"));
    /* The connection string comes before AZURE_STORAGE_ACCOUNT. */
    setenv("AZURE_STORAGE_CONNECTION_STRING",
           "DefaultEndpointsProtocol=http;AccountName=acct;AccountKey=" DEV_KEY
           ";EndpointSuffix=core.example",
           1);
    assert_int_equal(az_creds_resolve(&c, &o, msg, sizeof(msg)), 0);
    assert_int_equal(c.key_len, 64);
    assert_string_equal(c.endpoint, "http://acct.blob.core.example");
    assert_false(c.endpoint_http_ok);
    setenv("AZURE_STORAGE_CONNECTION_STRING", "AccountName=other;AccountKey=a2V5", 1);
    assert_int_equal(az_creds_resolve(&c, &o, msg, sizeof(msg)), -EINVAL);
    assert_int_equal(c.key_len, 0);
    setenv("AZURE_STORAGE_CONNECTION_STRING", "AccountName=acct", 1);
    assert_int_equal(az_creds_resolve(&c, &o, msg, sizeof(msg)), -EINVAL);
    setenv("AZURE_STORAGE_CONNECTION_STRING",
           "BlobEndpoint=https://h/;SharedAccessSignature=sv=1&sig=z", 1);
    assert_int_equal(az_creds_resolve(&c, &o, msg, sizeof(msg)), 0);
    assert_int_equal(c.auth, AZ_AUTH_SAS);
    assert_string_equal(c.endpoint, "https://h/");
    setenv("AZURE_STORAGE_CONNECTION_STRING", "UseDevelopmentStorage=true", 1);
    assert_int_equal(az_creds_resolve(&c, &o, msg, sizeof(msg)), -EINVAL);
    assert_non_null(strstr(msg, "devstoreaccount1"));
    struct az_opts dev = opts("devstoreaccount1");
    assert_int_equal(az_creds_resolve(&c, &dev, msg, sizeof(msg)), 0);
    assert_string_equal(c.endpoint, "http://127.0.0.1:10000/devstoreaccount1");
    assert_true(c.endpoint_http_ok);
    assert_int_equal(c.key_len, 64);
    /* The configuration comes first of all: the key, then the SAS. */
    snprintf(o.sas, sizeof(o.sas), "sv=3&sig=t");
    assert_int_equal(az_creds_resolve(&c, &o, msg, sizeof(msg)), 0);
    assert_string_equal(c.sas, "sv=3&sig=t");
    snprintf(o.account_key, sizeof(o.account_key), "not base64!");
    assert_int_equal(az_creds_resolve(&c, &o, msg, sizeof(msg)), -EINVAL);
    assert_non_null(strstr(msg, "base64"));
    snprintf(o.account_key, sizeof(o.account_key), "a2V5");
    assert_int_equal(az_creds_resolve(&c, &o, msg, sizeof(msg)), 0);
    assert_int_equal(c.auth, AZ_AUTH_KEY);
    assert_string_equal(c.origin, "account_key in the URL or [backend]");
    az_creds_clear(&c);
    assert_int_equal(c.key_len, 0);
    clear_env();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_conn_parse),
        cmocka_unit_test(test_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
