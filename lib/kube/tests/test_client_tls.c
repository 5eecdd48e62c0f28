/*
 * lib/kube over TLS: a throwaway CA, server and client certificates made with the openssl CLI in
 * a temporary directory, and a Python (standard library) HTTPS server on 127.0.0.1 that reports
 * the client certificate's common name. Checks, through kubeconfig files: the CA from a file
 * (relative path) and from base64 data, client certificate + key from files and from data
 * (mutual TLS), a bearer token over TLS, insecure-skip-tls-verify, and that a wrong CA or no CA
 * fails verification (KUBE_ETRANSPORT, not retried). Skipped when python3 or openssl is missing.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>

#include "lib/clock.h"
#include "lib/json.h"
#include "lib/kube/client.h"
#include "lib/kube/config.h"

static char tmpdir[64];
static pid_t server_pid = -1;
static int port;
static int have_tools;

static const char server_py[] =
    "import http.server, json, os, ssl, sys\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    protocol_version = 'HTTP/1.1'\n"
    "    def do_GET(self):\n"
    "        cn = ''\n"
    "        cert = self.connection.getpeercert()\n"
    "        for rdn in (cert or {}).get('subject', ()):\n"
    "            for k, v in rdn:\n"
    "                if k == 'commonName':\n"
    "                    cn = v\n"
    "        body = json.dumps({'cn': cn, 'auth': self.headers.get('Authorization', ''),\n"
    "                           'path': self.path}).encode()\n"
    "        self.send_response(200)\n"
    "        self.send_header('Content-Type', 'application/json')\n"
    "        self.send_header('Content-Length', str(len(body)))\n"
    "        self.end_headers()\n"
    "        self.wfile.write(body)\n"
    "    def log_message(self, *args):\n"
    "        pass\n"
    "d = sys.argv[1]\n"
    "ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)\n"
    "ctx.load_cert_chain(d + '/srv.crt', d + '/srv.key')\n"
    "ctx.load_verify_locations(d + '/ca.crt')\n"
    "ctx.verify_mode = ssl.CERT_OPTIONAL\n"
    "srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), H)\n"
    "srv.socket = ctx.wrap_socket(srv.socket, server_side=True)\n"
    "with open(d + '/port.tmp', 'w') as f:\n"
    "    f.write(str(srv.server_address[1]))\n"
    "os.rename(d + '/port.tmp', d + '/port')\n"
    "srv.serve_forever()\n";

static uint64_t now_ms(void)
{
    return (uint64_t)tandem_now_ms();
}

static int on_path(const char *prog)
{
    const char *path = getenv("PATH");
    char *copy = strdup(path ? path : "/usr/bin:/bin");
    int found = 0;
    char *save = NULL;
    for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
        char p[512];
        snprintf(p, sizeof(p), "%s/%s", d, prog);
        found = access(p, X_OK) == 0;
    }
    free(copy);
    return found;
}

static void write_text(const char *name, const char *text)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int sh(const char *fmt, const char *arg)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd), fmt, arg); /* fmt has exactly one %s */
    return system(cmd);
}

static int make_certs(void)
{
    /* EC keys: fast to generate. A second CA signs nothing we trust. */
    static const char script[] =
        "cd '%s' && set -e && "
        "printf 'subjectAltName=IP:127.0.0.1\\n' > srv.ext && "
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
        "-keyout ca.key -out ca.crt -days 2 -subj /CN=k1-test-ca 2>/dev/null && "
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
        "-keyout other-ca.key -out other-ca.crt -days 2 -subj /CN=other-ca 2>/dev/null && "
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout srv.key "
        "-out srv.csr -subj /CN=127.0.0.1 2>/dev/null && "
        "openssl x509 -req -in srv.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out srv.crt "
        "-days 2 -extfile srv.ext 2>/dev/null && "
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout client.key "
        "-out client.csr -subj /CN=tandem-client 2>/dev/null && "
        "openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
        "-out client.crt -days 2 2>/dev/null";
    return sh(script, tmpdir);
}

static int start_server(void)
{
    write_text("server.py", server_py);
    server_pid = fork();
    if (server_pid < 0) {
        return -1;
    }
    if (server_pid == 0) {
        char script[128], log_path[128];
        snprintf(script, sizeof(script), "%s/server.py", tmpdir);
        snprintf(log_path, sizeof(log_path), "%s/server.log", tmpdir);
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execlp("python3", "python3", script, tmpdir, (char *)NULL);
        _exit(127);
    }
    char port_path[128];
    snprintf(port_path, sizeof(port_path), "%s/port", tmpdir);
    uint64_t deadline = now_ms() + 20000;
    while (now_ms() < deadline) {
        int status;
        if (waitpid(server_pid, &status, WNOHANG) == server_pid) {
            server_pid = -1;
            return -1;
        }
        FILE *f = fopen(port_path, "r");
        if (f) {
            char line[32] = "";
            long v = 0;
            if (fgets(line, sizeof(line), f)) {
                v = strtol(line, NULL, 10);
            }
            fclose(f);
            if (v > 0 && v < 65536) {
                return (int)v;
            }
        }
        usleep(50 * 1000);
    }
    return -1;
}

static int setup(void **state)
{
    (void)state;
    have_tools = on_path("python3") && on_path("openssl");
    if (!have_tools) {
        return 0;
    }
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/kube-tls-XXXXXX");
    if (!mkdtemp(tmpdir) || make_certs() != 0) {
        fprintf(stderr, "test_client_tls: making certificates failed\n");
        return -1;
    }
    port = start_server();
    return port > 0 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    if (server_pid > 0) {
        int status;
        kill(server_pid, SIGTERM);
        uint64_t deadline = now_ms() + 5000;
        while (waitpid(server_pid, &status, WNOHANG) == 0) {
            if (now_ms() > deadline) {
                kill(server_pid, SIGKILL);
                waitpid(server_pid, &status, 0);
                break;
            }
            usleep(20 * 1000);
        }
        server_pid = -1;
    }
    if (tmpdir[0]) {
        return sh("rm -rf '%s'", tmpdir) == 0 ? 0 : -1;
    }
    return 0;
}

#define SKIP_WITHOUT_TOOLS()                                                                       \
    do {                                                                                           \
        if (!have_tools) {                                                                         \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* base64 of a file's contents (malloc'd) */
static char *b64_file(const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    unsigned char data[8192];
    size_t n = fread(data, 1, sizeof(data), f);
    fclose(f);
    char *out = malloc(4 * ((n + 2) / 3) + 1);
    assert_non_null(out);
    EVP_EncodeBlock((unsigned char *)out, data, (int)n);
    return out;
}

/* Writes a kubeconfig with the given cluster and user bodies and makes a client from it. */
static struct kube_client *client_from(const char *cluster_body, const char *user_body)
{
    char text[16384];
    snprintf(text, sizeof(text),
             "current-context: t\nclusters:\n- name: c\n  cluster:\n    server: "
             "https://127.0.0.1:%d\n%s\nusers:\n- name: u\n  user:\n%s\ncontexts:\n- name: t\n"
             "  context: {cluster: c, user: u}\n",
             port, cluster_body, user_body);
    write_text("kubeconfig", text);
    char path[128], err[512] = "";
    snprintf(path, sizeof(path), "%s/kubeconfig", tmpdir);
    struct kube_config *cfg = NULL;
    if (kube_config_from_kubeconfig(path, NULL, &cfg, err, sizeof(err)) != 0) {
        fail_msg("kubeconfig: %s", err);
    }
    struct kube_client_options o;
    memset(&o, 0, sizeof(o));
    o.timeout_ms = 5000;
    o.max_retries = 2;
    o.backoff_base_ms = 10;
    struct kube_client *c = kube_client_new(cfg, &o, err, sizeof(err));
    kube_config_free(cfg);
    if (!c) {
        fail_msg("client: %s", err);
    }
    return c;
}

static void expect_ok(struct kube_client *c, const char *cn, const char *auth)
{
    struct json_object *out = NULL;
    struct kube_error e;
    int rc = kube_get(c, &KUBE_PODS, "ns", "p", &out, &e);
    if (rc != 0) {
        fail_msg("get: %s: %s", tandem_strerror(rc), e.message);
    }
    const char *s = NULL;
    assert_int_equal(json_get_string(out, "cn", &s, NULL, 0), 0);
    assert_string_equal(s, cn);
    assert_int_equal(json_get_string(out, "auth", &s, NULL, 0), 0);
    assert_string_equal(s, auth);
    assert_int_equal(json_get_string(out, "path", &s, NULL, 0), 0);
    assert_string_equal(s, "/api/v1/namespaces/ns/pods/p");
    json_object_put(out);
}

static void test_ca_and_client_cert_files(void **state)
{
    (void)state;
    SKIP_WITHOUT_TOOLS();
    struct kube_client *c =
        client_from("    certificate-authority: ca.crt", "    client-certificate: client.crt\n"
                                                         "    client-key: client.key");
    expect_ok(c, "tandem-client", "");
    expect_ok(c, "tandem-client", ""); /* again: a reused connection or a resumed session */
    kube_client_free(c);
}

static void test_ca_and_client_cert_data(void **state)
{
    (void)state;
    SKIP_WITHOUT_TOOLS();
    char *ca = b64_file("ca.crt");
    char *cert = b64_file("client.crt");
    char *key = b64_file("client.key");
    char cluster[4096], user[8192];
    snprintf(cluster, sizeof(cluster), "    certificate-authority-data: %s", ca);
    snprintf(user, sizeof(user),
             "    client-certificate-data: %s\n    client-key-data: %s\n    token: tls-token", cert,
             key);
    struct kube_client *c = client_from(cluster, user);
    expect_ok(c, "tandem-client", "Bearer tls-token");
    kube_client_free(c);
    /* CA only, token auth: no client certificate is sent */
    snprintf(user, sizeof(user), "    token: only-token");
    c = client_from(cluster, user);
    expect_ok(c, "", "Bearer only-token");
    kube_client_free(c);
    free(ca);
    free(cert);
    free(key);
}

static void test_insecure(void **state)
{
    (void)state;
    SKIP_WITHOUT_TOOLS();
    struct kube_client *c = client_from("    insecure-skip-tls-verify: true", "    token: t");
    expect_ok(c, "", "Bearer t");
    kube_client_free(c);
}

static void test_verification_failures(void **state)
{
    (void)state;
    SKIP_WITHOUT_TOOLS();
    struct kube_error e;
    /* a CA that did not sign the server certificate */
    struct kube_client *c = client_from("    certificate-authority: other-ca.crt", "    {}");
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", NULL, &e), KUBE_ETRANSPORT);
    assert_int_equal(e.http_status, 0);
    assert_true(strlen(e.message) > 0);
    struct kube_client_stats st;
    kube_client_stats(c, &st);
    assert_int_equal(st.requests, 1); /* verification failures are not retried */
    kube_client_free(c);
    /* no CA at all: the system store does not know our throwaway CA */
    c = client_from("    server-name-unused: x", "    {}");
    assert_int_equal(kube_get(c, &KUBE_PODS, "ns", "p", NULL, &e), KUBE_ETRANSPORT);
    kube_client_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ca_and_client_cert_files),
        cmocka_unit_test(test_ca_and_client_cert_data),
        cmocka_unit_test(test_insecure),
        cmocka_unit_test(test_verification_failures),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
