/*
 * Fuzz target for kubeconfig loading (lib/kube/config.h): the input is written to a temporary
 * file and loaded with kube_config_from_kubeconfig, with the current context and with an
 * explicit one, alone and merged with itself (a ':' list). Any input must either give a usable
 * config (a server URL, a namespace, lengths that match the bytes) or fail with -EINVAL/-ENOENT
 * and a message that names the file.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/kube/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_kubeconfig: check failed: %s (line %d)\n", #cond, __LINE__);     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static char path[64];

static void cleanup(void)
{
    if (path[0]) {
        unlink(path);
    }
}

static void check_load(const char *paths, const char *context)
{
    struct kube_config *c = NULL;
    char err[512] = "";
    int rc = kube_config_from_kubeconfig(paths, context, &c, err, sizeof(err));
    if (rc == 0) {
        CHECK(c);
        CHECK(c->server);
        CHECK(strncmp(c->server, "http://", 7) == 0 || strncmp(c->server, "https://", 8) == 0);
        CHECK(c->namespace && c->namespace[0]);
        CHECK(c->context);
        CHECK(c->ca_pem_len == 0 || c->ca_pem);
        CHECK(!c->client_cert_pem == !c->client_key_pem);
        struct kube_config *d = kube_config_dup(c);
        CHECK(d);
        CHECK(strcmp(d->server, c->server) == 0);
        kube_config_free(d);
        kube_config_free(c);
    } else {
        CHECK(c == NULL);
        CHECK(rc == -EINVAL || rc == -ENOENT || rc == -ENOMEM || rc == -EFBIG || rc == -EISDIR);
        CHECK(strstr(err, path) != NULL || strstr(err, "kubeconfig") != NULL);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!path[0]) {
        snprintf(path, sizeof(path), "/tmp/fuzz-kubeconfig-%ld", (long)getpid());
        atexit(cleanup);
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        return 0;
    }
    if (size > 0 && fwrite(data, 1, size, f) != size) {
        fclose(f);
        return 0;
    }
    fclose(f);
    check_load(path, NULL);
    check_load(path, "dev");
    char list[160];
    snprintf(list, sizeof(list), "%s:%s", path, path);
    check_load(list, NULL);
    return 0;
}
