/* Unit tests for agent/fetch.h: the pure parts of the model downloader (URI parsing, file name
 * safety, the file selection of a repository, Content-Range and Retry-After values, progress
 * lines), each with malformed inputs, and fetch_main's command line and file:// copies. The
 * HTTP side is driven black-box by fetch_e2e.py. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/fetch.h"

/* ---- URIs ---- */

static struct fetch_uri uri; /* 17 KB: not on the stack of every test */

static int parse(const char *s)
{
    char err[256];
    err[0] = '\0';
    int rc = fetch_parse_uri(s, &uri, err, sizeof(err));
    if (rc != 0) {
        assert_true(err[0] != '\0'); /* every refusal says why */
    }
    return rc;
}

static void test_uri_http(void **state)
{
    (void)state;
    assert_int_equal(parse("https://example.com/models/m.gguf"), 0);
    assert_int_equal(uri.scheme, FETCH_SCHEME_HTTP);
    assert_string_equal(uri.url, "https://example.com/models/m.gguf");
    assert_string_equal(uri.repo, "");
    assert_int_equal(parse("HTTP://host:8080/a?x=1"), 0);
    assert_string_equal(uri.url, "HTTP://host:8080/a?x=1");

    assert_int_equal(parse("http:///path"), -EINVAL);   /* no host */
    assert_int_equal(parse("https://"), -EINVAL);       /* no host */
    assert_int_equal(parse("http://h/a b"), -EINVAL);   /* whitespace */
    assert_int_equal(parse("http://h/a\tb"), -EINVAL);  /* control */
    assert_int_equal(parse("http://h/a\x7f"), -EINVAL); /* DEL */
    assert_int_equal(parse(""), -EINVAL);
    assert_int_equal(parse("s3://bucket/key"), -EINVAL);
    assert_int_equal(parse("pvc://claim/x"), -EINVAL);
    assert_int_equal(parse("/models/x.gguf"), -EINVAL);
    assert_int_equal(parse("http:/host/x"), -EINVAL);

    char *big = malloc(FETCH_URI_MAX + 16);
    assert_non_null(big);
    memcpy(big, "http://h/", 9);
    memset(big + 9, 'a', FETCH_URI_MAX);
    big[FETCH_URI_MAX + 9] = '\0';
    assert_int_equal(parse(big), -ENAMETOOLONG);
    free(big);
}

static void test_uri_hf(void **state)
{
    (void)state;
    assert_int_equal(parse("hf://meta-llama/Llama-3.1-8B-Instruct"), 0);
    assert_int_equal(uri.scheme, FETCH_SCHEME_HF);
    assert_string_equal(uri.repo, "meta-llama/Llama-3.1-8B-Instruct");
    assert_string_equal(uri.revision, "main");
    assert_string_equal(uri.file, "");

    assert_int_equal(parse("HF://org/repo/"), 0); /* a trailing '/' is the whole repo */
    assert_string_equal(uri.repo, "org/repo");
    assert_string_equal(uri.file, "");

    assert_int_equal(parse("hf://TheBloke/m_GGUF/m.Q4_K_M.gguf"), 0);
    assert_string_equal(uri.repo, "TheBloke/m_GGUF");
    assert_string_equal(uri.revision, "main");
    assert_string_equal(uri.file, "m.Q4_K_M.gguf");

    assert_int_equal(parse("hf://org/repo@v1.0/sub/dir/w@2.gguf"), 0);
    assert_string_equal(uri.repo, "org/repo");
    assert_string_equal(uri.revision, "v1.0");
    assert_string_equal(uri.file, "sub/dir/w@2.gguf");

    assert_int_equal(parse("hf://org/repo@0123abcdef"), 0);
    assert_string_equal(uri.revision, "0123abcdef");
    assert_string_equal(uri.file, "");

    assert_int_equal(parse("hf://org/repo@refs%2Fpr%2F1/x.gguf"), 0);
    assert_string_equal(uri.revision, "refs%2Fpr%2F1");
    assert_string_equal(uri.file, "x.gguf");

    const char *bad[] = {
        "hf://",
        "hf://org",
        "hf://org/",
        "hf:///repo",
        "hf://org//x",
        "hf://o rg/repo",
        "hf://o@rg/repo",
        "hf://org/re$po",
        "hf://./repo",
        "hf://org/..",
        "hf://org/repo@",
        "hf://org/repo@/x",
        "hf://org/repo@a:b",
        "hf://org/repo@..",
        "hf://org/repo@%zz",
        "hf://org/repo@%2",
        "hf://org/repo/../x",
        "hf://org/repo/a/..",
        "hf://org/repo/./x",
        "hf://org/repo/a//b",
        "hf://org/repo/a\\b",
        "hf://org/repo?x=1",
        "hf://org/repo#frag",
        "hf://org/repo/x/",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (parse(bad[i]) == 0) {
            fail_msg("accepted %s", bad[i]);
        }
    }
}

static void test_uri_file(void **state)
{
    (void)state;
    assert_int_equal(parse("file:///models/a%20b/m.gguf"), 0);
    assert_int_equal(uri.scheme, FETCH_SCHEME_FILE);
    assert_string_equal(uri.path, "/models/a b/m.gguf");
    assert_int_equal(parse("FILE://localhost/x"), 0);
    assert_string_equal(uri.path, "/x");
    assert_int_equal(parse("file:///"), 0);
    assert_string_equal(uri.path, "/");

    assert_int_equal(parse("file://host/x"), -EINVAL);
    assert_int_equal(parse("file://relative"), -EINVAL);
    assert_int_equal(parse("file://"), -EINVAL);
    assert_int_equal(parse("file:///a%00b"), -EINVAL);
    assert_int_equal(parse("file:///a%2"), -EINVAL);
    assert_int_equal(parse("file:///a%g0"), -EINVAL);
    assert_int_equal(parse("file:///a?b"), -EINVAL);
    assert_int_equal(parse("file:///a#b"), -EINVAL);
}

/* ---- names and selection ---- */

static void test_safe_relpath(void **state)
{
    (void)state;
    const char *good[] = {"config.json", "a/b/c.safetensors", "..a",      "a..",
                          "a/...",       "x y.json",          "日本.json"};
    const char *bad[] = {"",     "/etc/passwd", "../evil", "a/../b", "a/..", "..",
                         ".",    "./a",         "a/./b",   "a//b",   "a/",   "a\\b",
                         "a\nb", "a\x01",       "\x7f",    "//x"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        if (!fetch_safe_relpath(good[i])) {
            fail_msg("refused %s", good[i]);
        }
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (fetch_safe_relpath(bad[i])) {
            fail_msg("accepted %s", bad[i]);
        }
    }
    char *big = malloc(FETCH_URI_MAX + 1);
    assert_non_null(big);
    memset(big, 'a', FETCH_URI_MAX);
    big[FETCH_URI_MAX] = '\0';
    assert_false(fetch_safe_relpath(big));
    free(big);
}

static void test_select_default(void **state)
{
    (void)state;
    const char *yes[] = {
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "model-00001-of-00004.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "tokenizer.model",
        "chat_template.jinja",
        "vocab.txt",
        "merges.txt",
        "qwen.tiktoken",
        "1_Pooling/config.json",
    };
    const char *no[] = {
        "pytorch_model.bin",
        "pytorch_model-00001-of-00002.bin",
        "model.pt",
        "consolidated.pth",
        "tf_model.h5",
        "flax_model.msgpack",
        "model.onnx",
        "model.Q4_K_M.gguf",
        "rust_model.ot",
        "README.md",
        ".gitattributes",
        "LICENSE",
        "original/consolidated.00.pth",
        "original/params.json",
        "original/tokenizer.model",
        "a/original/x.json",
        ".cache/huggingface/x.json",
        "onnx/model.onnx",
        "sub/",
        "tokenizer.model.bak",
    };
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (!fetch_select(yes[i], NULL, 0)) {
            fail_msg("did not select %s", yes[i]);
        }
    }
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++) {
        if (fetch_select(no[i], NULL, 0)) {
            fail_msg("selected %s", no[i]);
        }
    }
}

static void test_select_include(void **state)
{
    (void)state;
    const char *gguf[] = {"*.gguf"};
    assert_true(fetch_select("m.Q4_K_M.gguf", gguf, 1));
    assert_true(fetch_select("sub/m.gguf", gguf, 1));   /* '*' matches '/' */
    assert_false(fetch_select("config.json", gguf, 1)); /* the default set is replaced */

    const char *two[] = {"original/*", "config.json"};
    assert_true(fetch_select("original/params.json", two, 2));
    assert_true(fetch_select("config.json", two, 2));
    assert_false(fetch_select("model.safetensors", two, 2));

    const char *broken[] = {"[", ""}; /* an unclosed bracket, an empty glob: match nothing */
    assert_false(fetch_select("config.json", broken, 2));
    assert_false(fetch_select("x", broken + 1, 1));
}

/* ---- header values ---- */

static void test_content_range(void **state)
{
    (void)state;
    int64_t first = 7, last = 7, complete = 7;
    assert_int_equal(fetch_parse_content_range("bytes 0-99/100", &first, &last, &complete), 0);
    assert_true(first == 0 && last == 99 && complete == 100);
    assert_int_equal(fetch_parse_content_range("bytes 100-199/*", &first, &last, &complete), 0);
    assert_true(first == 100 && last == 199 && complete == -1);
    assert_int_equal(fetch_parse_content_range("bytes */1000", &first, &last, &complete), 0);
    assert_true(first == -1 && last == -1 && complete == 1000);
    assert_int_equal(fetch_parse_content_range("  Bytes  5-5/6 ", &first, &last, &complete), 0);
    assert_true(first == 5 && last == 5 && complete == 6);
    assert_int_equal(fetch_parse_content_range("bytes 0-9223372036854775806/9223372036854775807",
                                               &first, &last, &complete),
                     0);
    assert_true(complete == INT64_MAX);

    const char *bad[] = {
        "",
        "bytes",
        "bytes ",
        "bytes 0-99",
        "bytes0-99/100",
        "items 0-99/100",
        "bytes 5-4/10",
        "bytes 0-10/10",
        "bytes -1-2/3",
        "bytes 1--2/3",
        "bytes +1-2/3",
        "bytes */*",
        "bytes 1-2/3x",
        "bytes 1-2/ 3",
        "bytes 1-2//3",
        "bytes 99999999999999999999-1/2",
        "bytes 0-1/99999999999999999999",
        "bytes */-1",
        "bytes 1-2/3\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        first = last = complete = 42;
        if (fetch_parse_content_range(bad[i], &first, &last, &complete) != -EINVAL) {
            fail_msg("accepted \"%s\"", bad[i]);
        }
        assert_true(first == 42 && last == 42 && complete == 42); /* untouched */
    }
}

static void test_retry_after(void **state)
{
    (void)state;
    long s = -1;
    time_t now = 1445412450; /* Wed, 21 Oct 2015 07:27:30 GMT */
    assert_int_equal(fetch_parse_retry_after("120", now, &s), 0);
    assert_int_equal(s, 120);
    assert_int_equal(fetch_parse_retry_after(" 0 ", now, &s), 0);
    assert_int_equal(s, 0);
    assert_int_equal(fetch_parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now, &s), 0);
    assert_int_equal(s, 30);
    assert_int_equal(fetch_parse_retry_after("Wednesday, 21-Oct-15 07:28:00 GMT", now, &s), 0);
    assert_int_equal(s, 30);
    assert_int_equal(fetch_parse_retry_after("Wed Oct 21 07:28:00 2015", now, &s), 0);
    assert_int_equal(s, 30);
    assert_int_equal(fetch_parse_retry_after("Tue, 20 Oct 2015 07:28:00 GMT", now, &s), 0);
    assert_int_equal(s, 0); /* in the past */
    assert_int_equal(fetch_parse_retry_after("9999999999", now, &s), 0);
    assert_true(s >= 9999999999L); /* LONG_MAX when it saturates */

    const char *bad[] = {"",        "  ",
                         "-5",      "+5",
                         "5s",      "1.5",
                         "5 5",     "99999999999999999999",
                         "garbage", "Wed, 99 Foo 20x5 GMT",
                         "@1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        s = -7;
        if (fetch_parse_retry_after(bad[i], now, &s) != -EINVAL) {
            fail_msg("accepted \"%s\" (%ld)", bad[i], s);
        }
        assert_int_equal(s, -7);
    }
}

/* ---- progress ---- */

static void test_progress(void **state)
{
    (void)state;
    char line[256];
    const double mib = 1048576.0;
    fetch_format_progress(line, sizeof(line), "model.gguf", (int64_t)(123.4 * mib),
                          (int64_t)(456.7 * mib), 45.6 * mib);
    assert_string_equal(line, "fetch: model.gguf 123.4/456.7 MiB (27%) 45.6 MiB/s");

    fetch_format_progress(line, sizeof(line), "x", 3 * (int64_t)1073741824, 6 * (int64_t)1073741824,
                          512.0);
    assert_string_equal(line, "fetch: x 3.0/6.0 GiB (50%) 512 B/s");

    fetch_format_progress(line, sizeof(line), "c.json", 700, 700, 2048.0);
    assert_string_equal(line, "fetch: c.json 700/700 B (100%) 2.0 KiB/s");

    /* unknown total */
    fetch_format_progress(line, sizeof(line), "u", 5 * 1048576, -1, 1024.0 * 1024.0);
    assert_string_equal(line, "fetch: u 5.0 MiB 1.0 MiB/s");

    /* 100% only when complete */
    fetch_format_progress(line, sizeof(line), "p", 9999, 10000, 0.0);
    assert_string_equal(line, "fetch: p 9.8/9.8 KiB (99%) 0 B/s");
    fetch_format_progress(line, sizeof(line), "p", 0, 0, 0.0);
    assert_string_equal(line, "fetch: p 0/0 B (100%) 0 B/s");

    /* malformed inputs */
    fetch_format_progress(line, sizeof(line), "n", -5, 100, -3.0);
    assert_string_equal(line, "fetch: n 0/100 B (0%) 0 B/s");
    fetch_format_progress(line, sizeof(line), "n", 200, 100, 0.0 / 0.0);
    assert_string_equal(line, "fetch: n 200/100 B (100%) 0 B/s");
    fetch_format_progress(line, sizeof(line), "n", INT64_MAX, INT64_MAX, 1e300);
    assert_non_null(strstr(line, "(100%) 0 B/s"));

    char tiny[10];
    memset(tiny, 'x', sizeof(tiny));
    fetch_format_progress(tiny, sizeof(tiny), "long-name", 1, 2, 1.0);
    assert_int_equal(strlen(tiny), sizeof(tiny) - 1);
    assert_string_equal(tiny, "fetch: lo");
}

/* ---- the command ---- */

static int run(int argc, const char **argv)
{
    return fetch_main(argc, (char **)argv);
}

static void test_usage(void **state)
{
    (void)state;
    const char *help[] = {"fetch", "--help"};
    assert_int_equal(run(2, help), 0);
    const char *none[] = {"fetch"};
    assert_int_equal(run(1, none), 2);
    const char *no_output[] = {"fetch", "--uri", "https://h/x"};
    assert_int_equal(run(3, no_output), 2);
    const char *no_uri[] = {"fetch", "--output", "/tmp/x"};
    assert_int_equal(run(3, no_uri), 2);
    const char *unknown[] = {"fetch", "--uri", "https://h/x", "--output", "/tmp/x", "--bogus"};
    assert_int_equal(run(6, unknown), 2);
    const char *scheme[] = {"fetch", "--uri", "s3://b/k", "--output", "/tmp/x"};
    assert_int_equal(run(5, scheme), 2);
    const char *bad_hf[] = {"fetch", "--uri", "hf://org", "--output", "/tmp/x"};
    assert_int_equal(run(5, bad_hf), 2);
    const char *retries[] = {"fetch", "--uri=https://h/x", "--output=/tmp/x", "--retries", "x"};
    assert_int_equal(run(5, retries), 2);
    const char *retries_big[] = {"fetch", "--uri=https://h/x", "--output=/tmp/x", "--retries=101"};
    assert_int_equal(run(4, retries_big), 2);
    const char *timeout[] = {"fetch", "--uri=https://h/x", "--output=/tmp/x", "--timeout=-1"};
    assert_int_equal(run(4, timeout), 2);
    const char *extra[] = {"fetch", "--uri=https://h/x", "--output=/tmp/x", "positional"};
    assert_int_equal(run(4, extra), 2);
    const char *include_one[] = {"fetch", "--uri=https://h/x", "--output=/tmp/x", "--include=*"};
    assert_int_equal(run(4, include_one), 2);
    const char *include_file[] = {"fetch", "--uri=hf://o/r/x.gguf", "--output=/tmp/x",
                                  "--include=*"};
    assert_int_equal(run(4, include_file), 2);
    const char *empty_output[] = {"fetch", "--uri=https://h/x", "--output="};
    assert_int_equal(run(3, empty_output), 2);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    char *s = calloc(1, 4096);
    if (s) {
        (void)!fread(s, 1, 4095, f);
    }
    fclose(f);
    return s;
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

static void test_file_copy(void **state)
{
    (void)state;
    char root[] = "/tmp/tandem-fetch-test-XXXXXX";
    char path[512], uri_text[600], out[512];
    assert_non_null(mkdtemp(root));
    snprintf(path, sizeof(path), "%s/src", root);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/src/sub", root);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof(path), "%s/src/config.json", root);
    write_text(path, "{\"a\":1}\n");
    snprintf(path, sizeof(path), "%s/src/sub/w.gguf", root);
    write_text(path, "GGUF weights");
    snprintf(path, sizeof(path), "%s/src/link.json", root);
    assert_int_equal(symlink("config.json", path), 0); /* followed: a regular file */
    snprintf(path, sizeof(path), "%s/src/loop", root);
    assert_int_equal(symlink(".", path), 0); /* a symlinked directory: skipped */

    /* A directory, into an output whose parents do not exist yet. */
    snprintf(uri_text, sizeof(uri_text), "--uri=file://%s/src", root);
    snprintf(out, sizeof(out), "--output=%s/models/deep/m", root);
    const char *dir_args[] = {"fetch", uri_text, out};
    assert_int_equal(run(3, dir_args), 0);
    snprintf(path, sizeof(path), "%s/models/deep/m/sub/w.gguf", root);
    char *text = read_text(path);
    assert_non_null(text);
    assert_string_equal(text, "GGUF weights");
    free(text);
    snprintf(path, sizeof(path), "%s/models/deep/m/link.json", root);
    text = read_text(path);
    assert_non_null(text);
    assert_string_equal(text, "{\"a\":1}\n");
    free(text);
    snprintf(path, sizeof(path), "%s/models/deep/m/loop", root);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof(path), "%s/models/deep/m/config.json.part", root);
    assert_int_equal(access(path, F_OK), -1);

    /* --include filters a directory. */
    snprintf(out, sizeof(out), "--output=%s/models/only", root);
    const char *inc_args[] = {"fetch", uri_text, out, "--include", "*.gguf"};
    assert_int_equal(run(5, inc_args), 0);
    snprintf(path, sizeof(path), "%s/models/only/sub/w.gguf", root);
    assert_int_equal(access(path, F_OK), 0);
    snprintf(path, sizeof(path), "%s/models/only/config.json", root);
    assert_int_equal(access(path, F_OK), -1);

    /* One file; a second run keeps it. */
    snprintf(uri_text, sizeof(uri_text), "--uri=file://%s/src/sub/w.gguf", root);
    snprintf(out, sizeof(out), "--output=%s/models/w.gguf", root);
    const char *file_args[] = {"fetch", uri_text, out};
    assert_int_equal(run(3, file_args), 0);
    assert_int_equal(run(3, file_args), 0);
    snprintf(path, sizeof(path), "%s/models/w.gguf", root);
    text = read_text(path);
    assert_non_null(text);
    assert_string_equal(text, "GGUF weights");
    free(text);

    /* A missing source fails (exit 1), naming the URI. */
    snprintf(uri_text, sizeof(uri_text), "--uri=file://%s/missing", root);
    const char *missing[] = {"fetch", uri_text, out};
    assert_int_equal(run(3, missing), 1);

    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uri_http),       cmocka_unit_test(test_uri_hf),
        cmocka_unit_test(test_uri_file),       cmocka_unit_test(test_safe_relpath),
        cmocka_unit_test(test_select_default), cmocka_unit_test(test_select_include),
        cmocka_unit_test(test_content_range),  cmocka_unit_test(test_retry_after),
        cmocka_unit_test(test_progress),       cmocka_unit_test(test_usage),
        cmocka_unit_test(test_file_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
