#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Flag values, kept apart so they can be applied after the file and the environment. */
struct flags {
    const char *socket, *data_dir, *backend, *log_level, *config, *encryption;
    bool read_only, rebuild_index, upgrade, print_config;
};

/*
 * Parses argv into *fl: 0; CONFIG_E_EXIT after --help or --version (printed);
 * CONFIG_E_USAGE with a message in err.
 */
int config_parse_flags(struct flags *fl, int argc, char **argv, char *err, size_t err_len);
