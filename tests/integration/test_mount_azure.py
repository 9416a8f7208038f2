#!/usr/bin/env python3
"""The blob-test scenario on Azure: the databases of test_mount_s3.py (an
SQLite and a DuckDB file, 60,000 orders each) stored on the azure backend -
Azurite (azurefixture.py) behind the test proxy, which adds 20 ms to every
request - and queried read-only through `cairn mount` from cold, as
blob-test reads its DuckDB file from Azure blob storage through
AZURE_STORAGE_CONNECTION_STRING. The answers must equal those of the local
files, cold and warm, the cold queries must have been served by Get Blob
requests, and the file read through the mount must hash like the original.

Skipped as test_mount_s3.py is (FUSE, libfuse3, and for DuckDB
tests/duckdb/node_modules), and without node or tests/azure/node_modules.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import azurefixture  # noqa: E402
import cairntest as ct  # noqa: E402
import test_mount_s3 as ms  # noqa: E402
from test_azure_backend import AzureDaemon  # noqa: E402

CONTAINER = "cairn-mount-db"
DELAY_MS = 20  # rtt20


class MountAzureDatabases(ms.MountS3Databases):
    @classmethod
    def require_backend(cls):
        azurefixture.require_tools()

    @classmethod
    def start_backend(cls, home, dbase):
        cls.srv = azurefixture.AzureServer(os.path.join(cls.base, "azurite"), containers=[CONTAINER])
        cls.addClassCleanup(cls.srv.stop)
        cls.srv.start()
        cls.proxy = azurefixture.FaultProxy(cls.srv).start()
        cls.addClassCleanup(cls.proxy.stop)
        cls.proxy.delay_ms = DELAY_MS
        # the connection string as blob-test has it; the endpoint is the proxy's
        url = "azure://%s/%s/store?endpoint=%s&allow_http=1&stall_timeout=5&timeout=30" % (
            cls.srv.account, CONTAINER, cls.proxy.endpoint)
        return AzureDaemon(None, home, base=dbase, args=["--backend", url], env=cls.srv.env())

    def reset_gets(self):
        self.proxy.reset_counters()

    def gets(self):
        return self.proxy.methods.get("GET", 0)

if __name__ == "__main__":
    ct.main()
