/*
 * tandem-agent serve: the engine in-process, the P/D sidecar, the KV event publisher.
 */
#ifndef TANDEM_AGENT_SERVE_H
#define TANDEM_AGENT_SERVE_H

/* `tandem-agent serve [flags]`; argv[0] is "serve". Exit status: 0 after a graceful stop, 1 on
 * a start-up or serving failure, 2 bad usage. */
int agent_serve_main(int argc, char **argv);

#endif
