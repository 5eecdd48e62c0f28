/* Unit tests for engine/cli/flags.h: the engine flags shared by tandem-engine and tandem-agent,
 * their errors, and the generation-config sampling defaults (openai_defaults_*). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/cli/flags.h"
#include "engine/server/openai.h"

#ifdef TANDEM_HAVE_CUDA
#include "engine/backend/cuda_backend.h"
#endif

/* Parses argv (no program name) with engine_flags_parse only; returns the first non-1 result, or
 * 1 when every argument was an engine flag. */
static int parse_all(struct engine_flags *f, int argc, const char **argv)
{
    struct cli_args a = {.argc = argc, .argv = (char **)argv};
    for (a.i = 0; a.i < argc; a.i++) {
        int r = engine_flags_parse(&a, f);
        if (r != 1) {
            return r;
        }
    }
    return 1;
}

static void test_engine_flags_values(void **state)
{
    (void)state;
    struct engine_flags f;
    engine_flags_init(&f);
    const char *argv[] = {"--model",
                          "m.gguf",
                          "--max-model-len=4096",
                          "--max-num-seqs",
                          "8",
                          "--block-size",
                          "32",
                          "--kv-cache-memory",
                          "512MiB",
                          "--kv-cache-dtype",
                          "fp16",
                          "--no-enable-prefix-caching",
                          "--device",
                          "cpu",
                          "--tensor-parallel-size",
                          "1",
                          "--gpu-memory-utilization",
                          "0.9",
                          "--generation-config",
                          "vllm"};
    assert_int_equal(parse_all(&f, (int)ARRAY_SIZE(argv), argv), 1);
    assert_string_equal(f.model_path, "m.gguf");
    assert_int_equal(f.cfg.max_model_len, 4096);
    assert_int_equal(f.cfg.max_num_seqs, 8);
    assert_int_equal(f.cfg.block_size, 32);
    assert_int_equal(f.cfg.kv_cache_bytes, 512u << 20);
    assert_int_equal(f.cfg.kv_dtype, ENGINE_KV_F16);
    assert_true(f.cfg.disable_prefix_caching);
    assert_string_equal(f.device, "cpu");
    assert_int_equal(f.tensor_parallel_size, 1);
    assert_float_equal(f.gpu_memory_utilization, 0.9, 1e-12);
    assert_string_equal(f.generation_config, "vllm");
    assert_int_equal(engine_flags_check(&f), 0);
    engine_flags_free(&f);
}

static void test_engine_flags_not_ours(void **state)
{
    (void)state;
    struct engine_flags f;
    engine_flags_init(&f);
    const char *argv[] = {"--port", "8000"};
    assert_int_equal(parse_all(&f, 2, argv), 0);
    engine_flags_free(&f);
}

static void test_engine_flags_bad_values(void **state)
{
    (void)state;
    const char *bad[][2] = {
        {"--max-num-seqs", "0"},
        {"--block-size", "x"},
        {"--kv-cache-dtype", "int4"},
        {"--device", "tpu"},
        {"--tensor-parallel-size", "0"},
        {"--gpu-memory-utilization", "0"},
        {"--gpu-memory-utilization", "1.5"},
        {"--kv-cache-memory", "lots"},
        {"--override-generation-config", "{\"temperature\":-1}"},
        {"--override-generation-config", "[1]"},
        {"--override-generation-config", "{\"top_k\":2.5}"},
        {"--override-generation-config", "{bad json"},
        {"--scheduling-policy", "lifo"},
    };
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        struct engine_flags f;
        engine_flags_init(&f);
        const char *argv[] = {bad[i][0], bad[i][1]};
        if (parse_all(&f, 2, argv) != 2) {
            fail_msg("%s %s was accepted", bad[i][0], bad[i][1]);
        }
        engine_flags_free(&f);
    }
    /* a flag without its value */
    struct engine_flags f;
    engine_flags_init(&f);
    const char *argv[] = {"--max-model-len"};
    assert_int_equal(parse_all(&f, 1, argv), 2);
    engine_flags_free(&f);
}

static void test_engine_flags_check(void **state)
{
    (void)state;
    struct engine_flags f;
    engine_flags_init(&f);
    f.tensor_parallel_size = 2;
    f.device = "cpu";
    assert_int_equal(engine_flags_check(&f), 0); /* two ranks of CPU threads */
    assert_int_equal(f.cfg.tensor_parallel_size, 2);
    f.tensor_parallel_size = 1;
#ifdef TANDEM_HAVE_CUDA
    char why[256];
    const int gpus = cuda_backend_device_count(why, sizeof why);
#else
    const int gpus = 0; /* no CUDA backend in this build */
#endif
    f.device = "cuda";
    assert_int_equal(engine_flags_check(&f), gpus > 0 ? 0 : 2);
    f.device = "auto";
    assert_int_equal(engine_flags_check(&f), 0);
    if (gpus > 0) {
        assert_non_null(f.cfg.backend);
        assert_string_equal(f.cfg.backend->name, "cuda");
    } else {
        assert_null(f.cfg.backend); /* the cpu backend */
    }
    f.device = "cpu";
    assert_int_equal(engine_flags_check(&f), 0);
    assert_null(f.cfg.backend);
    engine_flags_free(&f);
}

static void test_chat_template_twice(void **state)
{
    (void)state;
    struct engine_flags f;
    engine_flags_init(&f);
    const char *argv[] = {"--chat-template", "{{ a }}", "--chat-template", "{{ b }}"};
    assert_int_equal(parse_all(&f, 4, argv), 1);
    assert_string_equal(f.chat_template, "{{ b }}"); /* the later wins; the first is freed */
    engine_flags_free(&f);
}

static void test_defaults_merge(void **state)
{
    (void)state;
    struct openai_defaults d;
    char err[256];
    memset(&d, 0, sizeof d);
    const char *gc = "{\"bos_token_id\":1,\"do_sample\":true,\"temperature\":0.6,\"top_p\":0.95,"
                     "\"top_k\":20,\"max_new_tokens\":64,\"repetition_penalty\":1.1}";
    assert_int_equal(openai_defaults_merge(&d, gc, strlen(gc), err, sizeof err), 0);
    assert_true(d.has_temperature && d.has_top_p && d.has_top_k && d.has_max_tokens &&
                d.has_repetition_penalty);
    assert_false(d.has_min_p);
    assert_float_equal(d.temperature, 0.6, 1e-6);
    assert_int_equal(d.top_k, 20);
    assert_int_equal(d.max_tokens, 64);
    const char *ov = "{\"temperature\":0,\"min_p\":0.05,\"top_k\":-1}";
    assert_int_equal(openai_defaults_merge(&d, ov, strlen(ov), err, sizeof err), 0);
    assert_float_equal(d.temperature, 0, 0);
    assert_float_equal(d.min_p, 0.05, 1e-6);
    assert_int_equal(d.top_k, 0); /* -1 means off, as 0 */
    assert_float_equal(d.top_p, 0.95, 1e-6);
    char desc[256];
    openai_defaults_describe(&d, desc, sizeof desc);
    assert_non_null(strstr(desc, "temperature=0"));
    assert_non_null(strstr(desc, "max_new_tokens=64"));

    /* errors name the key and leave d unchanged */
    struct openai_defaults before = d;
    const char *bad[] = {"{\"top_p\":0}",
                         "{\"temperature\":\"hot\"}",
                         "{\"max_new_tokens\":0}",
                         "{\"repetition_penalty\":0}",
                         "{\"min_p\":2}",
                         "3",
                         "{"};
    for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
        err[0] = '\0';
        if (openai_defaults_merge(&d, bad[i], strlen(bad[i]), err, sizeof err) != -EINVAL) {
            fail_msg("%s was accepted", bad[i]);
        }
        assert_true(err[0] != '\0');
        assert_memory_equal(&d, &before, sizeof d);
    }
    assert_int_equal(openai_defaults_merge(&d, bad[0], strlen(bad[0]), err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "top_p"));
}

static void test_defaults_apply(void **state)
{
    (void)state;
    struct openai_defaults d;
    char err[128];
    memset(&d, 0, sizeof d);
    const char *gc = "{\"temperature\":0.3,\"top_k\":5,\"min_p\":0.1}";
    assert_int_equal(openai_defaults_merge(&d, gc, strlen(gc), err, sizeof err), 0);
    struct openai_request r;
    struct openai_error e;
    memset(&e, 0, sizeof e);
    const char *body = "{\"prompt\":\"hi\",\"temperature\":0.9,\"min_p\":null}";
    assert_int_equal(openai_parse_completion(body, strlen(body), &r, &e), 0);
    openai_apply_defaults(&r, &d);
    assert_float_equal(r.sampling.temperature, 0.9, 1e-6); /* the request's own value wins */
    assert_int_equal(r.sampling.top_k, 5);
    assert_float_equal(r.sampling.min_p, 0.1, 1e-6); /* null counts as absent */
    assert_float_equal(r.sampling.top_p, 1.0, 0);    /* neither sets it: vLLM's default */
    openai_request_deinit(&r);
}

static void test_generation_config_dir(void **state)
{
    (void)state;
    char dir[] = "/tmp/tandem-test-flags-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs("{\"temperature\":0.7,\"top_p\":0.8,\"eos_token_id\":[1,2]}", fp);
    fclose(fp);

    struct engine_flags f;
    struct openai_defaults d;
    engine_flags_init(&f);
    f.model_path = dir; /* auto: the model directory's file */
    f.override_generation_config = "{\"top_p\":0.5}";
    assert_int_equal(engine_flags_generation_defaults(&f, &d), 0);
    assert_true(d.has_temperature);
    assert_float_equal(d.temperature, 0.7, 1e-6);
    assert_float_equal(d.top_p, 0.5, 1e-6); /* the override wins */

    f.generation_config = "vllm"; /* ignore the model's */
    assert_int_equal(engine_flags_generation_defaults(&f, &d), 0);
    assert_false(d.has_temperature);
    assert_true(d.has_top_p);

    f.generation_config = "/nonexistent/dir"; /* an explicit directory must have the file */
    assert_int_equal(engine_flags_generation_defaults(&f, &d), 2);

    fp = fopen(path, "w");
    fputs("{\"temperature\":-3}", fp);
    fclose(fp);
    f.generation_config = "auto";
    assert_int_equal(engine_flags_generation_defaults(&f, &d), 2); /* names the file */
    engine_flags_free(&f);
    unlink(path);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_flags_values),
        cmocka_unit_test(test_engine_flags_not_ours),
        cmocka_unit_test(test_engine_flags_bad_values),
        cmocka_unit_test(test_engine_flags_check),
        cmocka_unit_test(test_chat_template_twice),
        cmocka_unit_test(test_defaults_merge),
        cmocka_unit_test(test_defaults_apply),
        cmocka_unit_test(test_generation_config_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
