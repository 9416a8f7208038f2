/* `cairn mount` in a build without libfuse3: says so. */

#include "client/cli.h"

int cli_cmd_mount(struct cli *cli, int argc, char **argv)
{
    cli_error(0, CLI_CODE_FAILED, NULL,
              "mount: this cairn was built without FUSE (libfuse3 was not found)");
    return CLI_EXIT_USAGE;
}
