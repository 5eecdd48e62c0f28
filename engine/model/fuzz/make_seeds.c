/*
 * Writes the seed corpus of fuzz_gguf or fuzz_lora into a directory (ctest fixtures run it before
 * the fuzz targets, e2e/fuzz/campaign.sh before a campaign), so no model file is kept in the
 * repository. A directory named fuzz_lora (or *_fuzz_lora, as the campaign names it) gets LoRA
 * adapters for fuzz_lora's tiny llama (2 layers, n_embd 32, 2 heads, 1 KV head, n_ff 32): F32 on
 * every projection at rank 2, F16 on q and v at rank 4 without alpha, and one with a wrong A
 * shape. Any other gets fuzz_gguf's: three tiny valid models (llama F32, qwen3 F16 with q/k
 * norms, qwen2 BF16 with biases and tied output), one file with every metadata kind the writer
 * has plus Q8_0/Q4_0 tensors, and headers with version 2 and 1. Tensor bytes are a fixed
 * pattern: the loaders validate shapes and bounds, not values.
 *
 *   model_fuzz_seeds DIR      (DIR is created when missing)
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/model/gguf_writer.h"
#include "lib/err.h"

enum { DIM = 32, FFN = 32, HEADS = 2, VOCAB = 8, LORA_LAYERS = 2, KV_HEADS = 1 };

static int add(gguf_writer *w, const char *name, tdtype type, int64_t ne0, int64_t ne1)
{
    static uint8_t data[DIM * FFN * 4];
    for (size_t i = 0; i < sizeof(data); i++) {
        data[i] = (uint8_t)(i * 37u + 11u);
    }
    const int64_t ne[2] = {ne0, ne1};
    size_t bytes = td_row_bytes(type, ne0) * (size_t)ne1;
    return gguf_writer_add_tensor(w, name, type, ne1 > 1 ? 2 : 1, ne, data, bytes);
}

static int tiny_model(const char *dir, const char *file, const char *arch, tdtype type, bool bias,
                      bool qk_norm, bool tied)
{
    gguf_writer *w = gguf_writer_new(0);
    if (!w) {
        return -ENOMEM;
    }
    static const char *const tokens[VOCAB] = {"a", "b", "c", "ab", "<s>", "</s>", " ", "x"};
    char key[96];
    int rc = gguf_writer_set_str(w, "general.architecture", arch);
    struct {
        const char *suffix;
        uint32_t value;
    } hp[] = {{"context_length", 64},
              {"embedding_length", DIM},
              {"block_count", 1},
              {"feed_forward_length", FFN},
              {"attention.head_count", HEADS},
              {"attention.head_count_kv", 1}};
    for (size_t i = 0; rc == 0 && i < sizeof(hp) / sizeof(hp[0]); i++) {
        snprintf(key, sizeof(key), "%s.%s", arch, hp[i].suffix);
        rc = gguf_writer_set_u32(w, key, hp[i].value);
    }
    snprintf(key, sizeof(key), "%s.attention.layer_norm_rms_epsilon", arch);
    rc = rc ? rc : gguf_writer_set_f32(w, key, 1e-5f);
    rc = rc ? rc : gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    rc = rc ? rc : gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tokens, NULL, VOCAB);
    rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 4);
    rc = rc ? rc : gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 5);
    const int64_t hd = DIM / HEADS;
    rc = rc ? rc : add(w, "token_embd.weight", type, DIM, VOCAB);
    rc = rc ? rc : add(w, "output_norm.weight", TD_F32, DIM, 1);
    if (!tied) {
        rc = rc ? rc : add(w, "output.weight", type, DIM, VOCAB);
    }
    rc = rc ? rc : add(w, "blk.0.attn_norm.weight", TD_F32, DIM, 1);
    rc = rc ? rc : add(w, "blk.0.attn_q.weight", type, DIM, HEADS * hd);
    rc = rc ? rc : add(w, "blk.0.attn_k.weight", type, DIM, hd);
    rc = rc ? rc : add(w, "blk.0.attn_v.weight", type, DIM, hd);
    rc = rc ? rc : add(w, "blk.0.attn_output.weight", type, HEADS * hd, DIM);
    if (bias) {
        rc = rc ? rc : add(w, "blk.0.attn_q.bias", TD_F32, HEADS * hd, 1);
        rc = rc ? rc : add(w, "blk.0.attn_k.bias", TD_F32, hd, 1);
        rc = rc ? rc : add(w, "blk.0.attn_v.bias", TD_F32, hd, 1);
    }
    if (qk_norm) {
        rc = rc ? rc : add(w, "blk.0.attn_q_norm.weight", TD_F32, hd, 1);
        rc = rc ? rc : add(w, "blk.0.attn_k_norm.weight", TD_F32, hd, 1);
    }
    rc = rc ? rc : add(w, "blk.0.ffn_norm.weight", TD_F32, DIM, 1);
    rc = rc ? rc : add(w, "blk.0.ffn_gate.weight", type, DIM, FFN);
    rc = rc ? rc : add(w, "blk.0.ffn_up.weight", type, DIM, FFN);
    rc = rc ? rc : add(w, "blk.0.ffn_down.weight", type, FFN, DIM);
    char path[4096], err[256] = "";
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    rc = rc ? rc : gguf_writer_write_file(w, path, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "model_fuzz_seeds: %s: %s\n", path, err[0] ? err : tandem_strerror(rc));
    }
    gguf_writer_free(w);
    return rc;
}

static int kv_types_quant(const char *dir)
{
    gguf_writer *w = gguf_writer_new(64);
    if (!w) {
        return -ENOMEM;
    }
    static const char *const strs[] = {"x", "yz", ""};
    static const float f32s[] = {1.5f, -2.0f};
    static const int32_t i32s[] = {-1, 0, 7};
    int rc = gguf_writer_set_str(w, "general.architecture", "llama");
    rc = rc ? rc : gguf_writer_set_u32(w, "k.u32", 7);
    rc = rc ? rc : gguf_writer_set_i32(w, "k.i32", -7);
    rc = rc ? rc : gguf_writer_set_f32(w, "k.f32", 0.25f);
    rc = rc ? rc : gguf_writer_set_bool(w, "k.bool", true);
    rc = rc ? rc : gguf_writer_set_arr_str(w, "k.arr_str", strs, NULL, 3);
    rc = rc ? rc : gguf_writer_set_arr_f32(w, "k.arr_f32", f32s, 2);
    rc = rc ? rc : gguf_writer_set_arr_i32(w, "k.arr_i32", i32s, 3);
    rc = rc ? rc : add(w, "q8", TD_Q8_0, 64, 2);
    rc = rc ? rc : add(w, "q4", TD_Q4_0, 32, 3);
    rc = rc ? rc : add(w, "f16", TD_F16, 8, 1);
    char path[4096], err[256] = "";
    snprintf(path, sizeof(path), "%s/kv_types_quant.gguf", dir);
    rc = rc ? rc : gguf_writer_write_file(w, path, err, sizeof(err));
    gguf_writer_free(w);
    return rc;
}

/* An empty v3 file (no keys, no tensors) with its version field set to `version`. */
static int empty_with_version(const char *dir, const char *file, uint32_t version)
{
    gguf_writer *w = gguf_writer_new(0);
    if (!w) {
        return -ENOMEM;
    }
    char path[4096], err[256] = "";
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    int rc = gguf_writer_write_file(w, path, err, sizeof(err));
    gguf_writer_free(w);
    FILE *f = rc ? NULL : fopen(path, "r+b");
    if (!f) {
        return rc ? rc : -errno;
    }
    const uint8_t le[4] = {(uint8_t)version, (uint8_t)(version >> 8), (uint8_t)(version >> 16),
                           (uint8_t)(version >> 24)};
    rc = fseek(f, 4, SEEK_SET) == 0 && fwrite(le, 1, 4, f) == 4 ? 0 : -EIO;
    return fclose(f) == 0 ? rc : -EIO;
}

static int model_seeds(const char *dir)
{
    int rc = tiny_model(dir, "tiny_llama_f32.gguf", "llama", TD_F32, false, false, false);
    rc = rc ? rc : tiny_model(dir, "tiny_qwen3_f16.gguf", "qwen3", TD_F16, false, true, false);
    rc =
        rc ? rc : tiny_model(dir, "tiny_qwen2_bf16_tied.gguf", "qwen2", TD_BF16, true, false, true);
    rc = rc ? rc : kv_types_quant(dir);
    rc = rc ? rc : empty_with_version(dir, "empty_v2.gguf", 2);
    rc = rc ? rc : empty_with_version(dir, "version1.gguf", 1);
    return rc;
}

/* A LoRA adapter GGUF for fuzz_lora's model: blk.L.<target>.weight.lora_a {in, rank} and
 * lora_b {rank, out} for the targets in mask (bit i: targets[i] below) on every layer; alpha < 0
 * leaves adapter.lora.alpha out; a_extra widens every A (a wrong shape). */
static int lora_adapter(const char *dir, const char *file, tdtype type, int64_t rank, unsigned mask,
                        float alpha, int64_t a_extra)
{
    static const struct {
        const char *name;
        int64_t in, out;
    } targets[] = {{"attn_q", DIM, DIM},
                   {"attn_k", DIM, DIM / HEADS * KV_HEADS},
                   {"attn_v", DIM, DIM / HEADS * KV_HEADS},
                   {"attn_output", DIM, DIM},
                   {"ffn_gate", DIM, FFN},
                   {"ffn_up", DIM, FFN},
                   {"ffn_down", FFN, DIM}};
    gguf_writer *w = gguf_writer_new(0);
    if (!w) {
        return -ENOMEM;
    }
    int rc = gguf_writer_set_str(w, "general.type", "adapter");
    rc = rc ? rc : gguf_writer_set_str(w, "general.architecture", "llama");
    rc = rc ? rc : gguf_writer_set_str(w, "adapter.type", "lora");
    if (alpha >= 0.0f) {
        rc = rc ? rc : gguf_writer_set_f32(w, "adapter.lora.alpha", alpha);
    }
    for (int l = 0; l < LORA_LAYERS; l++) {
        for (size_t t = 0; t < sizeof(targets) / sizeof(targets[0]); t++) {
            if (!(mask & (1u << t))) {
                continue;
            }
            char name[64];
            snprintf(name, sizeof(name), "blk.%d.%s.weight.lora_a", l, targets[t].name);
            rc = rc ? rc : add(w, name, type, targets[t].in + a_extra, rank);
            snprintf(name, sizeof(name), "blk.%d.%s.weight.lora_b", l, targets[t].name);
            rc = rc ? rc : add(w, name, type, rank, targets[t].out);
        }
    }
    char path[4096], err[256] = "";
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    rc = rc ? rc : gguf_writer_write_file(w, path, err, sizeof(err));
    if (rc) {
        fprintf(stderr, "model_fuzz_seeds: %s: %s\n", path, err[0] ? err : tandem_strerror(rc));
    }
    gguf_writer_free(w);
    return rc;
}

static int lora_seeds(const char *dir)
{
    const unsigned all = 0x7f, qv = 0x5;
    int rc = lora_adapter(dir, "lora_f32_all_r2.gguf", TD_F32, 2, all, 4.0f, 0);
    rc = rc ? rc : lora_adapter(dir, "lora_f16_qv_r4_no_alpha.gguf", TD_F16, 4, qv, -1.0f, 0);
    rc = rc ? rc : lora_adapter(dir, "lora_bad_shape.gguf", TD_F32, 2, qv, 8.0f, 1);
    return rc;
}

/* True when dir's last component is fuzz_lora or ends in _fuzz_lora. */
static bool is_lora_dir(const char *dir)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') {
        len--;
    }
    const char *base = dir;
    for (size_t i = 0; i < len; i++) {
        if (dir[i] == '/') {
            base = dir + i + 1;
        }
    }
    const size_t blen = (size_t)(dir + len - base);
    static const char want[] = "fuzz_lora";
    const size_t wlen = sizeof(want) - 1;
    return blen >= wlen && memcmp(base + blen - wlen, want, wlen) == 0 &&
           (blen == wlen || base[blen - wlen - 1] == '_');
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: model_fuzz_seeds DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "model_fuzz_seeds: %s: %s\n", dir, strerror(errno));
        return 1;
    }
    int rc = is_lora_dir(dir) ? lora_seeds(dir) : model_seeds(dir);
    if (rc) {
        fprintf(stderr, "model_fuzz_seeds: %s\n", tandem_strerror(rc));
        return 1;
    }
    return 0;
}
