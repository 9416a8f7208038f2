/*
 * The part of cairnd's configuration file the CLI needs: where the daemon
 * listens ([daemon] socket) and keeps its data ([store] data_dir, for the
 * log of a daemon the CLI starts). The file is the daemon's: the same
 * default path ($XDG_CONFIG_HOME/cairn/cairn.conf, else
 * ~/.config/cairn/cairn.conf) or --config FILE, which the CLI then passes on
 * to a daemon it starts. Everything else in it is the daemon's to check.
 */
#include "client/cli.h"

#include <errno.h>
#include <ini.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int on_entry(void *user, const char *section, const char *key, const char *value)
{
    struct cli_config *cc = user;
    char *dst = NULL;
    size_t len = 0;

    if (!key)
        return 1;
    if (strcmp(section, "daemon") == 0 && strcmp(key, "socket") == 0) {
        dst = cc->socket;
        len = sizeof(cc->socket);
    } else if (strcmp(section, "store") == 0 && strcmp(key, "data_dir") == 0) {
        dst = cc->data_dir;
        len = sizeof(cc->data_dir);
    }
    if (dst && value[0] && strlen(value) < len)
        memcpy(dst, value, strlen(value) + 1);
    return 1; /* the daemon reports what is wrong with the file */
}

static int default_path(char *buf, size_t size)
{
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    struct passwd *pw;
    int n;

    if (xdg && xdg[0] == '/')
        n = snprintf(buf, size, "%s/cairn/cairn.conf", xdg);
    else if ((home && home[0]) || ((pw = getpwuid(getuid())) && (home = pw->pw_dir)[0]))
        n = snprintf(buf, size, "%s/.config/cairn/cairn.conf", home);
    else
        return -ENOENT;
    return n < 0 || (size_t)n >= size ? -ENAMETOOLONG : 0;
}

int cli_config_load(struct cli_config *cc, const char *path)
{
    char def[sizeof(cc->path)];
    FILE *f;
    int r;

    cc->socket[0] = cc->data_dir[0] = '\0';
    cc->loaded = true;
    if (!path) {
        if (default_path(def, sizeof(def)) < 0)
            return 0;
        path = def;
    }
    snprintf(cc->path, sizeof(cc->path), "%s", path);
    f = fopen(path, "r");
    if (!f) {
        /* A missing default file is fine, as for the daemon; a missing --config FILE is not. */
        if (path == def && errno == ENOENT)
            return 0;
        cli_error(0, CLI_CODE_CONFIG, NULL, "config %s: %s", path, strerror(errno));
        return -1;
    }
    r = ini_parse_file(f, on_entry, cc);
    fclose(f);
    if (r < 0) {
        cli_error(0, CLI_CODE_CONFIG, NULL, "config %s: cannot read it", path);
        return -1;
    }
    return 0;
}
