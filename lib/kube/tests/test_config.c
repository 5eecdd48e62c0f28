/*
 * Unit tests of lib/kube/config.h: valid kubeconfigs (token, tokenFile, CA and client
 * certificates from files resolved against the kubeconfig's directory and from base64 data,
 * insecure-skip-tls-verify, namespaces, explicit contexts), kubectl-style merging of several files
 * in $KUBECONFIG, many malformed kubeconfigs (each error must name the file and the field), the
 * in-cluster config from a temporary service-account directory (IPv4 and IPv6 hosts), and the
 * resolution order of kube_config_load. All files live in a temporary directory.
 */
#include <errno.h>
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

#include "lib/kube/config.h"

static char tmpdir[64];

static void write_file(const char *name, const char *text, char *path_out, size_t path_len)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    if (path_out) {
        snprintf(path_out, path_len, "%s", path);
    }
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/kube-config-XXXXXX");
    if (!mkdtemp(tmpdir)) {
        return -1;
    }
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
    unsetenv("KUBECONFIG");
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* "hello-ca" / "CERT" / "KEY" in base64 */
#define B64_CA   "aGVsbG8tY2E="
#define B64_CERT "Q0VSVA=="
#define B64_KEY  "S0VZ"

static const char valid[] = "apiVersion: v1\n"
                            "kind: Config\n"
                            "current-context: dev\n"
                            "clusters:\n"
                            "- name: c1\n"
                            "  cluster:\n"
                            "    server: https://10.1.2.3:6443/\n"
                            "    certificate-authority-data: " B64_CA "\n"
                            "- name: c2\n"
                            "  cluster:\n"
                            "    server: http://127.0.0.1:8080\n"
                            "    insecure-skip-tls-verify: true\n"
                            "    certificate-authority: certs/ca.pem\n"
                            "users:\n"
                            "- name: u1\n"
                            "  user:\n"
                            "    token: abc.def\n"
                            "- name: u2\n"
                            "  user:\n"
                            "    client-certificate-data: " B64_CERT "\n"
                            "    client-key-data: " B64_KEY "\n"
                            "- name: u3\n"
                            "  user:\n"
                            "    tokenFile: tok\n"
                            "    client-certificate: certs/c.pem\n"
                            "    client-key: certs/k.pem\n"
                            "- name: u4\n"
                            "  user:\n"
                            "    exec:\n"
                            "      command: aws\n"
                            "contexts:\n"
                            "- name: dev\n"
                            "  context:\n"
                            "    cluster: c1\n"
                            "    user: u1\n"
                            "    namespace: team-a\n"
                            "- name: other\n"
                            "  context:\n"
                            "    cluster: c2\n"
                            "    user: u3\n"
                            "- name: certs\n"
                            "  context:\n"
                            "    cluster: c1\n"
                            "    user: u2\n"
                            "- name: anon\n"
                            "  context:\n"
                            "    cluster: c2\n"
                            "- name: execctx\n"
                            "  context:\n"
                            "    cluster: c1\n"
                            "    user: u4\n";

static void test_valid(void **state)
{
    (void)state;
    char path[256], err[512] = "";
    char certs[256];
    snprintf(certs, sizeof(certs), "%s/certs", tmpdir);
    mkdir(certs, 0700);
    write_file("certs/ca.pem", "CA-FROM-FILE\n", NULL, 0);
    write_file("certs/c.pem", "CERT-FILE", NULL, 0);
    write_file("certs/k.pem", "KEY-FILE", NULL, 0);
    write_file("tok", "  file-token\n", NULL, 0);
    write_file("valid.yaml", valid, path, sizeof(path));

    struct kube_config *c = NULL;
    assert_int_equal(kube_config_from_kubeconfig(path, NULL, &c, err, sizeof(err)), 0);
    assert_string_equal(c->server, "https://10.1.2.3:6443");
    assert_int_equal(c->ca_pem_len, 8);
    assert_memory_equal(c->ca_pem, "hello-ca", 8);
    assert_string_equal(c->token, "abc.def");
    assert_null(c->token_file);
    assert_null(c->client_cert_pem);
    assert_string_equal(c->namespace, "team-a");
    assert_string_equal(c->context, "dev");
    assert_int_equal(c->insecure_skip_tls_verify, 0);
    struct kube_config *d = kube_config_dup(c);
    assert_non_null(d);
    assert_string_equal(d->server, c->server);
    assert_memory_equal(d->ca_pem, c->ca_pem, c->ca_pem_len);
    kube_config_free(d);
    kube_config_free(c);

    /* relative paths resolve against the kubeconfig's directory, not the cwd */
    char cwd[4096];
    assert_non_null(getcwd(cwd, sizeof(cwd)));
    assert_int_equal(chdir("/"), 0);
    assert_int_equal(kube_config_from_kubeconfig(path, "other", &c, err, sizeof(err)), 0);
    assert_int_equal(chdir(cwd), 0);
    assert_string_equal(c->server, "http://127.0.0.1:8080");
    assert_int_equal(c->insecure_skip_tls_verify, 1);
    assert_int_equal(c->ca_pem_len, strlen("CA-FROM-FILE\n"));
    assert_memory_equal(c->ca_pem, "CA-FROM-FILE\n", c->ca_pem_len);
    assert_string_equal(c->token, "file-token");
    assert_non_null(strstr(c->token_file, "/tok"));
    assert_int_equal(c->token_file[0], '/');
    assert_int_equal(c->client_cert_pem_len, 9);
    assert_memory_equal(c->client_cert_pem, "CERT-FILE", 9);
    assert_memory_equal(c->client_key_pem, "KEY-FILE", 8);
    assert_string_equal(c->namespace, "default");
    kube_config_free(c);

    assert_int_equal(kube_config_from_kubeconfig(path, "certs", &c, err, sizeof(err)), 0);
    assert_int_equal(c->client_cert_pem_len, 4);
    assert_memory_equal(c->client_cert_pem, "CERT", 4);
    assert_int_equal(c->client_key_pem_len, 3);
    assert_memory_equal(c->client_key_pem, "KEY", 3);
    assert_null(c->token);
    kube_config_free(c);

    assert_int_equal(kube_config_from_kubeconfig(path, "anon", &c, err, sizeof(err)), 0);
    assert_null(c->token);
    assert_null(c->client_cert_pem);
    kube_config_free(c);

    /* an exec user is refused, naming the field */
    assert_int_equal(kube_config_from_kubeconfig(path, "execctx", &c, err, sizeof(err)), -EINVAL);
    assert_null(c);
    assert_non_null(strstr(err, path));
    assert_non_null(strstr(err, "users[3].user.exec: unsupported authentication"));
}

static void test_server_without_scheme(void **state)
{
    (void)state;
    char path[256], err[256];
    write_file("noscheme.yaml",
               "current-context: x\nclusters:\n- name: c\n  cluster:\n    server: 'k8s.local:443'\n"
               "contexts:\n- name: x\n  context:\n    cluster: c\n",
               path, sizeof(path));
    struct kube_config *c = NULL;
    assert_int_equal(kube_config_from_kubeconfig(path, NULL, &c, err, sizeof(err)), 0);
    assert_string_equal(c->server, "https://k8s.local:443");
    kube_config_free(c);
}

static void test_malformed(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *context;
        const char *expect; /* part of the message after the file name */
    } cases[] = {
        {"", NULL, "current-context: not set"},
        {"\n# only a comment\n", NULL, "current-context: not set"},
        {"clusters: [\n", NULL, "not valid YAML"},
        {"key: [a, b\nother: }\n", NULL, "not valid YAML"},
        {"- just\n- a list\n", NULL, "top level: expected a mapping, got array"},
        {"plain text\n", NULL, "top level: expected a mapping, got string"},
        {"current-context: 5\n", NULL, "current-context: expected string, got integer"},
        {"clusters: nope\n", NULL, "clusters: expected array, got string"},
        {"clusters:\n- 5\n", NULL, "clusters[0]: expected object, got integer"},
        {"clusters:\n- cluster: {server: x}\n", NULL, "clusters[0].name: required field"},
        {"clusters:\n- name: [a]\n  cluster: {}\n", NULL, "clusters[0].name: expected non-empty"},
        {"clusters:\n- name: c\n", NULL, "clusters[0].cluster: required field is missing"},
        {"clusters:\n- name: c\n  cluster: 7\n", NULL, "clusters[0].cluster: expected object"},
        {"clusters:\n- name: c\n  cluster:\n    server: 443\n", NULL,
         "clusters[0].cluster.server: expected string, got integer"},
        {"clusters:\n- name: c\n  cluster:\n    server: s\n    insecure-skip-tls-verify: maybe\n",
         NULL, "clusters[0].cluster.insecure-skip-tls-verify: expected boolean, got string"},
        {"clusters:\n- name: c\n  cluster:\n    server: s\n    certificate-authority-data: "
         "'not base64!!'\n",
         NULL, "clusters[0].cluster.certificate-authority-data: invalid base64"},
        {"users:\n- name: u\n  user:\n    client-key-data: 'QUJD=A'\n", NULL,
         "users[0].user.client-key-data: invalid base64"},
        {"users:\n- name: u\n  user:\n    token: [1, 2]\n", NULL,
         "users[0].user.token: expected string, got array"},
        {"contexts:\n- name: x\n  context:\n    namespace: {a: 1}\n", NULL,
         "contexts[0].context.namespace: expected string, got object"},
        {"current-context: nope\ncontexts:\n- name: x\n  context: {cluster: c}\n", NULL,
         "context \"nope\" not found"},
        {"current-context: x\ncontexts:\n- name: x\n  context: {cluster: c}\n", "missing",
         "context \"missing\" not found"},
        {"current-context: x\ncontexts:\n- name: x\n  context: {user: u}\n", NULL,
         "contexts[0].context.cluster: required field is missing"},
        {"current-context: x\ncontexts:\n- name: x\n  context: {cluster: c}\n", NULL,
         "contexts[0].context.cluster: cluster \"c\" not found"},
        {"current-context: x\nclusters:\n- name: c\n  cluster: {server: s}\ncontexts:\n- name: x\n"
         "  context: {cluster: c, user: u}\n",
         NULL, "contexts[0].context.user: user \"u\" not found"},
        {"current-context: x\nclusters:\n- name: c\n  cluster: {insecure-skip-tls-verify: true}\n"
         "contexts:\n- name: x\n  context: {cluster: c}\n",
         NULL, "clusters[0].cluster.server: required field is missing"},
        {"current-context: x\nclusters:\n- name: c\n  cluster: {server: s}\nusers:\n- name: u\n"
         "  user: {auth-provider: {name: gcp}}\ncontexts:\n- name: x\n"
         "  context: {cluster: c, user: u}\n",
         NULL, "users[0].user.auth-provider: unsupported authentication"},
        {"current-context: x\nclusters:\n- name: c\n  cluster: {server: s}\nusers:\n- name: u\n"
         "  user: {username: admin, password: secret}\ncontexts:\n- name: x\n"
         "  context: {cluster: c, user: u}\n",
         NULL, "users[0].user.username: unsupported authentication"},
        {"current-context: x\nclusters:\n- name: c\n  cluster: {server: s}\nusers:\n- name: u\n"
         "  user: {client-certificate-data: " B64_CERT "}\ncontexts:\n- name: x\n"
         "  context: {cluster: c, user: u}\n",
         NULL, "users[0].user.client-key: required together with client-certificate"},
        {"current-context: x\nclusters:\n- name: c\n  cluster: {server: s, certificate-authority: "
         "/nonexistent/ca.pem}\ncontexts:\n- name: x\n  context: {cluster: c}\n",
         NULL, "clusters[0].cluster.certificate-authority: /nonexistent/ca.pem: No such file"},
        {"current-context: x\nclusters:\n- name: c\n  cluster: {server: s}\nusers:\n- name: u\n"
         "  user: {tokenFile: missing-token}\ncontexts:\n- name: x\n"
         "  context: {cluster: c, user: u}\n",
         NULL, "users[0].user.tokenFile:"},
        {"current-context: x\nclusters:\n- name: c\n  cluster: {server: s}\nusers:\n- name: u\n"
         "  user: {}\ncontexts:\n- name: x\n  context: {cluster: c, user: u}\n- name: x2\n"
         "  context: 3\n",
         NULL, "contexts[1].context: expected object, got integer"},
        {"a: &a [*a]\n", NULL, "not valid YAML"},
        {"a: 1\na: 2\n", NULL, "not valid YAML"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char name[32], path[256], err[512] = "";
        snprintf(name, sizeof(name), "bad%zu.yaml", i);
        write_file(name, cases[i].text, path, sizeof(path));
        struct kube_config *c = (struct kube_config *)&c; /* must be reset to NULL */
        int rc = kube_config_from_kubeconfig(path, cases[i].context, &c, err, sizeof(err));
        char want_prefix[300];
        snprintf(want_prefix, sizeof(want_prefix), "kubeconfig %s: ", path);
        if (rc != -EINVAL || c != NULL || strncmp(err, want_prefix, strlen(want_prefix)) != 0 ||
            !strstr(err, cases[i].expect)) {
            fail_msg("case %zu: rc %d err '%s' (want '%s')", i, rc, err, cases[i].expect);
        }
    }
    /* a missing file */
    char err[512] = "";
    struct kube_config *c = NULL;
    assert_int_equal(
        kube_config_from_kubeconfig("/nonexistent/kubeconfig", NULL, &c, err, sizeof(err)),
        -ENOENT);
    assert_non_null(strstr(err, "kubeconfig /nonexistent/kubeconfig: No such file"));
    /* a directory */
    assert_int_equal(kube_config_from_kubeconfig(tmpdir, NULL, &c, err, sizeof(err)), -EISDIR);
    assert_non_null(strstr(err, tmpdir));
}

static void test_merge(void **state)
{
    (void)state;
    char p1[256], p2[256], p3[256], err[512] = "";
    /* first file: no current-context, defines cluster "shared" and user "u" */
    write_file("m1.yaml",
               "clusters:\n- name: shared\n  cluster: {server: 'https://first:1'}\n"
               "users:\n- name: u\n  user: {token: first-token}\n"
               "contexts:\n- name: ctx-a\n  context: {cluster: shared, user: u, namespace: a}\n",
               p1, sizeof(p1));
    /* second: sets current-context and redefines "shared" and "u" (these lose) */
    write_file("m2.yaml",
               "current-context: ctx-b\n"
               "clusters:\n- name: shared\n  cluster: {server: 'https://second:2'}\n"
               "- name: own\n  cluster: {server: 'https://own:3'}\n"
               "users:\n- name: u\n  user: {token: second-token}\n"
               "contexts:\n- name: ctx-b\n  context: {cluster: shared, user: u, namespace: b}\n"
               "- name: ctx-a\n  context: {cluster: own}\n",
               p2, sizeof(p2));
    write_file("m3.yaml", "current-context: ctx-a\n", p3, sizeof(p3));
    char list[1024];
    snprintf(list, sizeof(list), "%s:%s/missing.yaml:%s:%s", p1, tmpdir, p2, p3);
    struct kube_config *c = NULL;
    assert_int_equal(kube_config_from_kubeconfig(list, NULL, &c, err, sizeof(err)), 0);
    assert_string_equal(c->context, "ctx-b");
    assert_string_equal(c->server, "https://first:1");
    assert_string_equal(c->token, "first-token");
    assert_string_equal(c->namespace, "b");
    kube_config_free(c);
    /* explicit context: ctx-a from the first file wins over the second's */
    assert_int_equal(kube_config_from_kubeconfig(list, "ctx-a", &c, err, sizeof(err)), 0);
    assert_string_equal(c->server, "https://first:1");
    assert_string_equal(c->namespace, "a");
    kube_config_free(c);
    /* through $KUBECONFIG */
    setenv("KUBECONFIG", list, 1);
    assert_int_equal(kube_config_from_kubeconfig(NULL, NULL, &c, err, sizeof(err)), 0);
    assert_string_equal(c->context, "ctx-b");
    kube_config_free(c);
    assert_int_equal(kube_config_load(NULL, "ctx-a", &c, err, sizeof(err)), 0);
    assert_string_equal(c->namespace, "a");
    kube_config_free(c);
    /* the flag beats $KUBECONFIG */
    assert_int_equal(kube_config_load(p2, NULL, &c, err, sizeof(err)), 0);
    assert_string_equal(c->server, "https://second:2");
    kube_config_free(c);
    unsetenv("KUBECONFIG");
    /* a list in which no file exists */
    snprintf(list, sizeof(list), "%s/none1:%s/none2", tmpdir, tmpdir);
    assert_int_equal(kube_config_from_kubeconfig(list, NULL, &c, err, sizeof(err)), -ENOENT);
    /* an error in a later file still names that file */
    char bad[256];
    write_file("mbad.yaml", "users:\n- name: x\n  user: {token: 1.5}\n", bad, sizeof(bad));
    snprintf(list, sizeof(list), "%s:%s", p1, bad);
    assert_int_equal(kube_config_from_kubeconfig(list, NULL, &c, err, sizeof(err)), -EINVAL);
    assert_non_null(strstr(err, bad));
    assert_non_null(strstr(err, "users[0].user.token: expected string, got number"));
}

static void test_in_cluster(void **state)
{
    (void)state;
    char sa[256], err[512] = "";
    snprintf(sa, sizeof(sa), "%s/sa", tmpdir);
    assert_int_equal(mkdir(sa, 0700), 0);
    write_file("sa/token", "sa-token-1\n", NULL, 0);
    write_file("sa/ca.crt", "-----BEGIN CERTIFICATE-----\nX\n", NULL, 0);
    write_file("sa/namespace", "kube-tandem\n", NULL, 0);
    struct kube_config *c = NULL;
    assert_int_equal(kube_config_in_cluster(sa, &c, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "KUBERNETES_SERVICE_HOST"));
    setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    assert_int_equal(kube_config_in_cluster(sa, &c, err, sizeof(err)), 0);
    assert_string_equal(c->server, "https://10.96.0.1:443");
    assert_string_equal(c->token, "sa-token-1");
    assert_non_null(strstr(c->token_file, "/sa/token"));
    assert_string_equal(c->namespace, "kube-tandem");
    assert_string_equal(c->context, "");
    assert_int_equal(c->ca_pem_len, strlen("-----BEGIN CERTIFICATE-----\nX\n"));
    kube_config_free(c);

    setenv("KUBERNETES_SERVICE_HOST", "fd00:10:96::1", 1);
    char ns_path[300];
    snprintf(ns_path, sizeof(ns_path), "%s/namespace", sa);
    assert_int_equal(unlink(ns_path), 0);
    assert_int_equal(kube_config_in_cluster(sa, &c, err, sizeof(err)), 0);
    assert_string_equal(c->server, "https://[fd00:10:96::1]:443");
    assert_string_equal(c->namespace, "default");
    kube_config_free(c);

    /* kube_config_load picks in-cluster when no flag and no $KUBECONFIG ... */
    unsetenv("KUBECONFIG");
    char tok_path[300];
    snprintf(tok_path, sizeof(tok_path), "%s/token", sa);
    assert_int_equal(unlink(tok_path), 0);
    assert_int_equal(kube_config_in_cluster(sa, &c, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "/sa/token"));
    assert_int_equal(kube_config_load(NULL, NULL, &c, err, sizeof(err)), -ENOENT);
    assert_non_null(strstr(err, "/var/run/secrets/kubernetes.io/serviceaccount/token"));
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");

    /* ... and ~/.kube/config otherwise */
    char home[256], kube_dir[300];
    snprintf(home, sizeof(home), "%s/home", tmpdir);
    snprintf(kube_dir, sizeof(kube_dir), "%s/.kube", home);
    assert_int_equal(mkdir(home, 0700), 0);
    assert_int_equal(mkdir(kube_dir, 0700), 0);
    write_file("home/.kube/config",
               "current-context: h\nclusters:\n- name: c\n  cluster: {server: 'http://home:1'}\n"
               "contexts:\n- name: h\n  context: {cluster: c}\n",
               NULL, 0);
    const char *home_env = getenv("HOME");
    char *old_home = home_env ? strdup(home_env) : NULL;
    setenv("HOME", home, 1);
    assert_int_equal(kube_config_load(NULL, NULL, &c, err, sizeof(err)), 0);
    assert_string_equal(c->server, "http://home:1");
    kube_config_free(c);
    if (old_home) {
        setenv("HOME", old_home, 1);
        free(old_home);
    } else {
        unsetenv("HOME");
    }
}

static void test_base64(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        const char *out; /* NULL: invalid */
    } cases[] = {
        {"", ""},
        {"YQ==", "a"},
        {"YQ", "a"},
        {"YWI=", "ab"},
        {"YWI", "ab"},
        {"YWJj", "abc"},
        {"YW\nJj\r\n ZA==\n", "abcd"},
        {"Y", NULL},
        {"YQ=", NULL},
        {"YQ===", NULL},
        {"Y=Q=", NULL},
        {"YQ==YQ==", NULL},
        {"YW-j", NULL},
        {"YW_j", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *out = NULL;
        size_t len = 0;
        int rc = kube_base64_decode(cases[i].in, strlen(cases[i].in), &out, &len);
        if (!cases[i].out) {
            if (rc != -EINVAL) {
                fail_msg("case %zu (%s): rc %d, want -EINVAL", i, cases[i].in, rc);
            }
            assert_null(out);
            continue;
        }
        if (rc != 0 || len != strlen(cases[i].out) || memcmp(out, cases[i].out, len) != 0) {
            fail_msg("case %zu (%s): rc %d len %zu", i, cases[i].in, rc, len);
        }
        assert_int_equal(out[len], '\0');
        free(out);
    }
    /* binary output with NULs */
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(kube_base64_decode("AAEA/w==", 8, &out, &len), 0);
    assert_int_equal(len, 4);
    assert_memory_equal(out, "\x00\x01\x00\xff", 4);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),      cmocka_unit_test(test_server_without_scheme),
        cmocka_unit_test(test_malformed),  cmocka_unit_test(test_merge),
        cmocka_unit_test(test_in_cluster), cmocka_unit_test(test_base64),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
