/* cairnd's command line: its usage text and its flags (config_load applies them last). */
#include "daemon/app/config-flags.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "daemon/app/config.h"

static const char usage_text[] =
    "usage: cairnd [--socket PATH] [--data-dir DIR] [--backend URL] [--log-level LEVEL]\n"
    "              [--config FILE] [--encryption MODE]\n"
    "              [--read-only | --rebuild-index | --upgrade | --print-config]\n"
    "       cairnd --help | --version\n"
    "\n"
    "Runs the cairn storage daemon in the foreground.\n"
    "\n"
    "  --socket PATH      Unix socket to listen on\n"
    "                     (default $XDG_RUNTIME_DIR/cairn/cairnd.sock or "
    "/tmp/cairn-$UID/cairnd.sock)\n"
    "  --data-dir DIR     metadata database and local objects (default $XDG_DATA_HOME/cairn);\n"
    "                     a relative DIR is taken from the working directory\n"
    "  --backend URL      object backend: local (default), local:/PATH,\n"
    "                     sftp://USER@HOST[:PORT]/PATH[?key=FILE&known_hosts=FILE&...],\n"
    "                     s3://BUCKET[/PREFIX][?endpoint=URL&region=NAME&...],\n"
    "                     r2://BUCKET[/PREFIX]?account=ID[&...] or\n"
    "                     azure://ACCOUNT/CONTAINER[/PREFIX][?endpoint=URL&...]\n"
    "  --log-level LEVEL  error, warn, info (default) or debug\n"
    "  --config FILE      INI configuration (default $XDG_CONFIG_HOME/cairn/cairn.conf)\n"
    "  --encryption MODE  for a store made at this start: on (aes-256-gcm) or off (default)\n"
    "  --read-only        serve what the data directory holds and write nothing to it\n"
    "  --rebuild-index    recreate the metadata database from the packs, then exit\n"
    "  --upgrade          convert a data directory of format 1 to packs, then exit\n"
    "  --print-config     print the effective settings and where each came from, then exit\n";

int config_parse_flags(struct flags *fl, int argc, char **argv, char *err, size_t err_len)
{
    /* One option a line, which clang-format would pack into columns. */
    /* clang-format off */
    static const struct option opts[] = {
        {"socket", required_argument, NULL, 's'},  {"data-dir", required_argument, NULL, 'd'},
        {"backend", required_argument, NULL, 'b'}, {"log-level", required_argument, NULL, 'l'},
        {"config", required_argument, NULL, 'c'},  {"help", no_argument, NULL, 'h'},
        {"version", no_argument, NULL, 'V'},       {"rebuild-index", no_argument, NULL, 'R'},
        {"upgrade", no_argument, NULL, 'U'},       {"print-config", no_argument, NULL, 'P'},
        {"encryption", required_argument, NULL, 'E'}, {"read-only", no_argument, NULL, 'O'},
        {NULL, 0, NULL, 0},
    };
    /* clang-format on */
    int c;

    memset(fl, 0, sizeof(*fl));
    opterr = 0;
    optind = 0; /* 0, not 1: glibc then also forgets a half-read "-xy" cluster */
    while ((c = getopt_long(argc, argv, ":", opts, NULL)) != -1) {
        switch (c) {
        case 's':
            fl->socket = optarg;
            break;
        case 'd':
            fl->data_dir = optarg;
            break;
        case 'b':
            fl->backend = optarg;
            break;
        case 'l':
            fl->log_level = optarg;
            break;
        case 'c':
            fl->config = optarg;
            break;
        case 'E':
            fl->encryption = optarg;
            break;
        case 'O':
            fl->read_only = true;
            break;
        case 'R':
            fl->rebuild_index = true;
            break;
        case 'U':
            fl->upgrade = true;
            break;
        case 'P':
            fl->print_config = true;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return CONFIG_E_EXIT;
        case 'V':
            printf("cairnd %s\n", CAIRN_VERSION);
            return CONFIG_E_EXIT;
        case ':':
            snprintf(err, err_len, "option %s needs a value", argv[optind - 1]);
            return CONFIG_E_USAGE;
        default:
            if (optopt)
                snprintf(err, err_len, "unknown option -%c", optopt);
            else
                snprintf(err, err_len, "unknown option %s", argv[optind - 1]);
            return CONFIG_E_USAGE;
        }
    }
    if (optind < argc) {
        snprintf(err, err_len, "unexpected argument '%s'", argv[optind]);
        return CONFIG_E_USAGE;
    }
    if (fl->read_only + fl->rebuild_index + fl->upgrade + fl->print_config > 1) {
        snprintf(err, err_len,
                 "--read-only, --rebuild-index, --upgrade and --print-config do not go together");
        return CONFIG_E_USAGE;
    }
    return 0;
}
