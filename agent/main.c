/*
 * tandem-agent: the node agent of every serving pod (docs/agent.md).
 *   serve   the engine in-process (OpenAI API on the engine port), the P/D sidecar on the pod's
 *           serving port, the KV event publisher and the KV transfer side channel
 *   fetch   download a model (http(s)://, hf://, file://) for the pod's init container
 * The command line is the one the operator renders (operator/controller/desired.c).
 */
#include <stdio.h>
#include <string.h>

#include "agent/fetch.h"
#include "agent/serve.h"
#include "lib/version.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: tandem-agent COMMAND [flags]\n"
               "\n"
               "commands:\n"
               "  serve      run the engine, the P/D sidecar and the KV event publisher\n"
               "  fetch      download a model (http(s)://, hf://, file://) to a path\n"
               "\n"
               "  --help, -h     this text; 'tandem-agent COMMAND --help' lists a command's flags\n"
               "  --version      print the version and exit\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "serve") == 0) {
        return agent_serve_main(argc - 1, argv + 1);
    }
    if (strcmp(argv[1], "fetch") == 0) {
        return fetch_main(argc - 1, argv + 1);
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("tandem-agent %s\n", TANDEM_VERSION);
        return 0;
    }
    usage(stderr);
    fprintf(stderr, "tandem-agent: unknown command '%s'\n", argv[1]);
    return 2;
}
