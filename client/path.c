/* Where the daemon's socket is when nobody says otherwise. */

#include "client/client.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/un.h>
#include <unistd.h>

static const char *env(const char *name)
{
    const char *value = getenv(name);

    return value && value[0] ? value : NULL;
}

int client_socket_path(char *buf, size_t size)
{
    const char *path = env("CAIRN_SOCKET");
    const char *runtime = env("XDG_RUNTIME_DIR");
    size_t max = sizeof(((struct sockaddr_un *)NULL)->sun_path);
    int n;

    if (path)
        n = snprintf(buf, size, "%s", path);
    else if (runtime)
        n = snprintf(buf, size, "%s/cairn/cairnd.sock", runtime);
    else
        n = snprintf(buf, size, "/tmp/cairn-%u/cairnd.sock", (unsigned)getuid());
    if (n < 0 || (size_t)n >= size || (size_t)n >= max)
        return -ENAMETOOLONG;
    return 0;
}
