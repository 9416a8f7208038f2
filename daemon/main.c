#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "daemon/app/config.h"
#include "daemon/app/daemon.h"
#include "daemon/base/log.h"

int main(int argc, char **argv)
{
    struct config cfg;
    struct daemon *d = NULL;
    char err[1024];
    int r;

    /*
     * Everything cairnd makes (the data directory's contents, SQLite's files,
     * packs, the read cache) is its user's alone, whatever umask it was
     * started with; the modes it asks for explicitly say the same.
     */
    umask(077);
    /*
     * A core dump would write out whatever secrets are in memory (backend
     * credentials, document content) to wherever core_pattern says.
     */
    setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0});
    /* Messages before the configuration is read carry their priority too. */
    log_init_early();
    r = config_load(&cfg, argc, argv, err, sizeof(err));
    if (r == CONFIG_E_EXIT)
        return 0;
    if (r) {
        log_plain(LOG_LEVEL_ERROR, "%s", err);
        if (r == CONFIG_E_USAGE) {
            fprintf(stderr, "%sTry 'cairnd --help'.\n", log_to_journal() ? "<3>" : "");
            return 2;
        }
        return 1;
    }
    if (cfg.print_config) {
        config_print(&cfg, stdout);
        return fflush(stdout) == 0 && !ferror(stdout) ? 0 : 1;
    }
    log_init(cfg.log_level);
    /*
     * SQLite's allocation statistics take one process-wide mutex on every
     * malloc and free; with searches on several threads that lock was a fifth
     * of their time. Nothing reads the statistics. Set before any connection.
     */
    sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
    r = daemon_new(&d, &cfg, err, sizeof(err));
    if (r) {
        log_plain(LOG_LEVEL_ERROR, "%s", err);
        daemon_free(d);
        return 1;
    }
    if (cfg.rebuild_index || cfg.upgrade) {
        char summary[512] = "";
        r = daemon_rebuild(d, summary, sizeof(summary));
        if (r)
            log_plain(LOG_LEVEL_ERROR, "%s failed: %s", cfg.upgrade ? "upgrade" : "rebuild",
                      r < 0 ? strerror(-r) : "storage error");
        else if (cfg.upgrade)
            printf("cairnd: %s %s: %s\n", d->upgraded ? "upgraded" : "nothing to upgrade in",
                   cfg.data_dir, summary);
        else
            printf("cairnd: rebuilt %s: %s\n", cfg.data_dir, summary);
        daemon_free(d);
        return r ? 1 : 0;
    }
    r = daemon_run(d);
    daemon_free(d);
    return r ? 1 : 0;
}
