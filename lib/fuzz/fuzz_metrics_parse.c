/*
 * Fuzz target for lib/metrics: parse a scrape, check what the callback gets (valid names, one
 * value per label, valid UTF-8), mirror the samples into a registry of gauges, render it, and
 * parse the rendering back: the renderer's output must always be accepted by the parser, with the
 * same number of samples.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/metrics.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_metrics_parse: check failed: %s (line %d)\n", #cond, __LINE__);  \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#define MAX_FAMILIES 32

struct mirror {
    struct metrics_registry *reg;
    struct metric_family *fam[MAX_FAMILIES];
    char *names[MAX_FAMILIES];
    size_t nlabels[MAX_FAMILIES];
    size_t nfam;
    size_t samples;  /* samples seen */
    size_t mirrored; /* samples that went into a series */
};

static int valid_utf8(const char *s)
{
    size_t len = strlen(s);
    for (size_t i = 0; i < len;) {
        size_t n = tandem_utf8_seq_len((const unsigned char *)s + i, len - i);
        if (n == 0) {
            return 0;
        }
        i += n;
    }
    return 1;
}

static int on_sample(void *ud, const char *name, size_t nlabels, const char *const *label_names,
                     const char *const *label_values, double value)
{
    struct mirror *m = ud;
    m->samples++;
    CHECK(name[0] != '\0' && strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                          "0123456789_:") == strlen(name));
    CHECK(!(name[0] >= '0' && name[0] <= '9'));
    for (size_t i = 0; i < nlabels; i++) {
        CHECK(label_names[i][0] != '\0' && strchr(label_names[i], ':') == NULL);
        CHECK(valid_utf8(label_values[i]));
        for (size_t j = 0; j < i; j++) {
            CHECK(strcmp(label_names[i], label_names[j]) != 0);
        }
    }
    size_t f = 0;
    while (f < m->nfam && strcmp(m->names[f], name) != 0) {
        f++;
    }
    if (f == m->nfam) {
        if (m->nfam == MAX_FAMILIES) {
            return 0;
        }
        m->names[f] = strdup(name);
        CHECK(m->names[f] != NULL);
        m->fam[f] = metrics_gauge_new(m->reg, name, "mirrored \\ help\n", nlabels, label_names);
        m->nlabels[f] = nlabels;
        m->nfam++;
    }
    /* Families are created from the first sample's label names; others are skipped. */
    if (!m->fam[f] || m->nlabels[f] != nlabels) {
        return 0;
    }
    struct metric *series = metrics_child(m->fam[f], label_values);
    CHECK(series != NULL);
    metric_set(series, value);
    m->mirrored++;
    return 0;
}

static int count_sample(void *ud, const char *name, size_t nlabels, const char *const *label_names,
                        const char *const *label_values, double value)
{
    (void)name, (void)nlabels, (void)label_names, (void)label_values, (void)value;
    (*(size_t *)ud)++;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct mirror m = {0};
    m.reg = metrics_registry_new();
    CHECK(m.reg != NULL);
    char err[256];
    int rc = metrics_parse_text((const char *)data, size, on_sample, &m, err, sizeof(err));
    if (rc != 0) {
        CHECK(rc == -EINVAL);
        CHECK(strncmp(err, "line ", 5) == 0);
    }
    struct buf out;
    buf_init(&out, 1 << 24);
    CHECK(metrics_render(m.reg, &out) == 0);
    size_t reparsed = 0;
    rc = metrics_parse_text(buf_cstr(&out), out.len, count_sample, &reparsed, err, sizeof(err));
    if (rc != 0) {
        fprintf(stderr, "fuzz_metrics_parse: rendering does not parse: %s\n%s\n", err,
                buf_cstr(&out));
        abort();
    }
    /* Repeated series collapse into one, so the rendering has at most as many samples. */
    CHECK(reparsed <= m.mirrored);
    CHECK(m.mirrored == 0 || reparsed > 0);
    buf_free(&out);
    for (size_t i = 0; i < m.nfam; i++) {
        free(m.names[i]);
    }
    metrics_registry_free(m.reg);
    return 0;
}
