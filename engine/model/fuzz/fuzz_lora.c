/*
 * Fuzz target for the LoRA adapter loader on llama.cpp's adapter GGUF (lora_load, lora.h). The
 * input is written to a memfd and loaded through its /proc path against a fixed tiny llama config
 * (2 layers, n_embd 32, 2 heads, 1 KV head, head_dim 16, n_ff 32), twice: as a GGUF model's
 * (adjacent-pair RoPE: the adapter's rows are used as they are) and as a Hugging Face
 * checkpoint's (q/k B rows permuted into NeoX order). An accepted adapter must fit the model
 * (every pair's shapes those of lora_target_dims, ranks within LORA_MAX_RANK, finite scales, at
 * least one pair), every byte of its A and B is read (so ASan sees a view out of bounds), and the
 * two loads must agree up to exactly that permutation. Any rejection is fine if it says why.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "e2e/fuzz/fuzz_heap.h"
#include "engine/model/lora.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The load's heap bound, stated in docs/fuzzing.md: the GGUF header's (8 x size + 64 KiB), the
 * adapter's fixed per-layer table, and for the permuting load a copy of q's and k's B (at most
 * the input's size). */
#define LORA_HEAP_FACTOR 9
#define LORA_HEAP_SLACK  (128 * 1024)

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_lora: check failed: %s (line %d)\n", #cond, __LINE__);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static volatile uint8_t g_sink;

static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint8_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc ^= b[i];
    }
    g_sink = acc;
}

/* The fixed base model: only cfg is read by lora_load. */
static model base_model(bool rope_neox)
{
    model m;
    memset(&m, 0, sizeof(m));
    m.cfg.arch = MODEL_ARCH_LLAMA;
    m.cfg.n_layer = 2;
    m.cfg.n_embd = 32;
    m.cfg.n_head = 2;
    m.cfg.n_head_kv = 1;
    m.cfg.head_dim = 16;
    m.cfg.n_rot = 16;
    m.cfg.n_ff = 32;
    m.cfg.rope_neox = rope_neox;
    return m;
}

static void check_tensor(const model_tensor *t, int64_t ne0, int64_t ne1)
{
    CHECK(t->data && t->name);
    CHECK(t->n_dims == 2 && t->ne[0] == ne0 && t->ne[1] == ne1);
    CHECK(t->nbytes == td_row_bytes(t->type, ne0) * (size_t)ne1);
    touch(t->data, t->nbytes);
}

static void check_adapter(const model *m, const lora_adapter *a)
{
    CHECK(a->format == MODEL_FORMAT_GGUF);
    CHECK(a->n_layer == m->cfg.n_layer);
    CHECK(a->rank >= 1 && a->rank <= LORA_MAX_RANK);
    CHECK(a->n_adapted > 0);
    size_t n = 0, bytes = 0;
    int32_t rank = 0;
    for (int l = 0; l < a->n_layer; l++) {
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            const lora_weights *w = &a->layers[l][t];
            if (!w->a.data) {
                CHECK(!w->b.data);
                continue;
            }
            int64_t in, out;
            lora_target_dims(m, (lora_target)t, &in, &out);
            const int64_t r = w->a.ne[1];
            CHECK(r >= 1 && r <= a->rank);
            check_tensor(&w->a, in, r);
            check_tensor(&w->b, r, out);
            CHECK(isfinite(w->scale));
            rank = r > rank ? (int32_t)r : rank;
            bytes += w->a.nbytes + w->b.nbytes;
            n++;
        }
    }
    CHECK(n == a->n_adapted && rank == a->rank && bytes == a->bytes);
}

/* hf's q/k B rows are gguf's in NeoX order (row h*hd + j*hd/2 + i of hf is row h*hd + 2i + j of
 * gguf); everything else is the same bytes. */
static void check_permutation(const model *m, const lora_adapter *gguf, const lora_adapter *hf)
{
    CHECK(gguf->n_adapted == hf->n_adapted && gguf->rank == hf->rank);
    const int64_t hd = m->cfg.head_dim, half = hd / 2;
    for (int l = 0; l < gguf->n_layer; l++) {
        for (int t = 0; t < LORA_N_TARGETS; t++) {
            const lora_weights *g = &gguf->layers[l][t], *h = &hf->layers[l][t];
            CHECK(!g->a.data == !h->a.data);
            if (!g->a.data) {
                continue;
            }
            CHECK(g->scale == h->scale || (isnan(g->scale) && isnan(h->scale)));
            CHECK(memcmp(g->a.data, h->a.data, g->a.nbytes) == 0);
            CHECK(g->b.nbytes == h->b.nbytes);
            if (t != LORA_Q && t != LORA_K) {
                CHECK(memcmp(g->b.data, h->b.data, g->b.nbytes) == 0);
                continue;
            }
            const int64_t heads = t == LORA_Q ? m->cfg.n_head : m->cfg.n_head_kv;
            const size_t row = td_row_bytes(g->b.type, g->b.ne[0]);
            const uint8_t *gb = g->b.data, *hb = h->b.data;
            for (int64_t head = 0; head < heads; head++) {
                for (int64_t i = 0; i < half; i++) {
                    for (int64_t j = 0; j < 2; j++) {
                        const int64_t gr = head * hd + 2 * i + j, hr = head * hd + j * half + i;
                        CHECK(memcmp(gb + (size_t)gr * row, hb + (size_t)hr * row, row) == 0);
                    }
                }
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0) {
        return 0;
    }
    int fd = memfd_create("fuzz_lora", MFD_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64], err[512];
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    const model gguf_model = base_model(false), hf_model = base_model(true);

    lora_adapter *a = NULL, *b = NULL;
    err[0] = '\0';
    FUZZ_HEAP_BOUND("lora adapter", size, LORA_HEAP_FACTOR, LORA_HEAP_SLACK,
                    a = lora_load(&gguf_model, path, err, sizeof(err)));
    if (a) {
        check_adapter(&gguf_model, a);
    } else {
        CHECK(err[0] != '\0');
    }
    err[0] = '\0';
    FUZZ_HEAP_BOUND("lora adapter (permuted)", size, LORA_HEAP_FACTOR, LORA_HEAP_SLACK,
                    b = lora_load(&hf_model, path, err, sizeof(err)));
    if (b) {
        check_adapter(&hf_model, b);
    } else {
        CHECK(err[0] != '\0');
    }
    /* the layout changes row order only: both loads accept or refuse the same file */
    CHECK(!a == !b);
    if (a && b) {
        check_permutation(&gguf_model, a, b);
    }
    lora_free(a);
    lora_free(b);
    close(fd);
    return 0;
}
