/* `cairn`: the command line client; everything but main() is in the CLI library. */

#include "client/cli.h"

int main(int argc, char **argv)
{
    return cli_main(argc, argv);
}
