/*
 * tandem-epp: the endpoint picker of an InferencePool (docs/epp.md).
 */
#include "lib/log.h"
#include "operator/epp/app.h"
#include "operator/epp/flags.h"

int main(int argc, char **argv)
{
    struct epp_flags f;
    int rc = epp_flags_parse(argc, argv, &f);
    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    enum log_level level = LOGL_INFO;
    enum log_format format = LOG_FORMAT_TEXT;
    if (log_parse_level(f.log_level, &level) != 0 || log_parse_format(f.log_format, &format) != 0) {
        log_init("tandem-epp", LOGL_INFO, LOG_FORMAT_TEXT);
        log_error("--log-level or --log-format: unknown value");
        return 2;
    }
    log_init("tandem-epp", level, format);
    return epp_app_run(&f);
}
