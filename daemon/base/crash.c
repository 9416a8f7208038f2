#include "daemon/base/crash.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/base/log.h"

static const char *crash_at;

void crash_init(void)
{
    const char *v = getenv("CAIRN_CRASH_AT");
    crash_at = v && *v ? v : NULL;
}

void crash_point(const char *name)
{
    if (!crash_at || strcmp(crash_at, name) != 0)
        return;
    log_warn("crash point %s reached: killing myself (CAIRN_CRASH_AT)", name);
    raise(SIGKILL);
}
