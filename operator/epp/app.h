/*
 * tandem-epp put together: the datastore fed by the pool watch (or --endpoints), the metrics
 * data source, the KV-event subscriber and index, the models' tokenizers, the scheduler, and the
 * three ports (gateway 8080, ext-proc 9002, metrics/API 9090). One libuv loop runs everything
 * but the informers, the KV subscriber and ext-proc's threads, which hand their work to it.
 */
#ifndef TANDEM_OPERATOR_EPP_APP_H
#define TANDEM_OPERATOR_EPP_APP_H

#include "operator/epp/flags.h"

/* Runs until SIGTERM/SIGINT (a graceful drain) or a start-up failure: the exit status. */
int epp_app_run(const struct epp_flags *f);

#endif
