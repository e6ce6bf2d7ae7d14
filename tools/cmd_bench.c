#include <stdio.h>
#include "commands.h"
int td_cmd_bench(int argc, char **argv) { (void)argc; (void)argv; return 0; }
