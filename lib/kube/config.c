/*
 * kubeconfig and in-cluster configuration (see config.h). A kubeconfig is read with lib/yaml.h
 * into json-c; several files are merged the way kubectl does (the first file that defines a
 * cluster, user or context name wins; current-context from the first file that sets one). Every
 * entry remembers the file it came from, so relative paths resolve against that file's directory
 * and errors name that file and the field inside it.
 */
#include "lib/kube/config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "lib/common.h"
#include "lib/err.h"
#include "lib/json.h"
#include "lib/yaml.h"

#define DEFAULT_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define MAX_FILES      64 /* files in one $KUBECONFIG list */

/* ---- small helpers ---- */

static void free_secret(char *p, size_t len)
{
    if (p) {
        OPENSSL_cleanse(p, len);
        free(p);
    }
}

void kube_config_free(struct kube_config *c)
{
    if (!c) {
        return;
    }
    free(c->server);
    free_secret(c->ca_pem, c->ca_pem_len);
    free_secret(c->token, c->token ? strlen(c->token) : 0);
    free(c->token_file);
    free_secret(c->client_cert_pem, c->client_cert_pem_len);
    free_secret(c->client_key_pem, c->client_key_pem_len);
    free(c->namespace);
    free(c->context);
    free(c);
}

static int dup_bytes(const char *src, size_t len, char **dst)
{
    *dst = NULL;
    if (!src) {
        return 0;
    }
    *dst = malloc(len + 1);
    if (!*dst) {
        return -ENOMEM;
    }
    memcpy(*dst, src, len);
    (*dst)[len] = '\0';
    return 0;
}

struct kube_config *kube_config_dup(const struct kube_config *c)
{
    struct kube_config *d = calloc(1, sizeof(*d));
    if (!d) {
        return NULL;
    }
    d->insecure_skip_tls_verify = c->insecure_skip_tls_verify;
    d->ca_pem_len = c->ca_pem_len;
    d->client_cert_pem_len = c->client_cert_pem_len;
    d->client_key_pem_len = c->client_key_pem_len;
    if (dup_bytes(c->server, c->server ? strlen(c->server) : 0, &d->server) ||
        dup_bytes(c->ca_pem, c->ca_pem_len, &d->ca_pem) ||
        dup_bytes(c->token, c->token ? strlen(c->token) : 0, &d->token) ||
        dup_bytes(c->token_file, c->token_file ? strlen(c->token_file) : 0, &d->token_file) ||
        dup_bytes(c->client_cert_pem, c->client_cert_pem_len, &d->client_cert_pem) ||
        dup_bytes(c->client_key_pem, c->client_key_pem_len, &d->client_key_pem) ||
        dup_bytes(c->namespace, c->namespace ? strlen(c->namespace) : 0, &d->namespace) ||
        dup_bytes(c->context, c->context ? strlen(c->context) : 0, &d->context)) {
        kube_config_free(d);
        return NULL;
    }
    return d;
}

/* Reads a whole file (at most KUBE_CONFIG_MAX_FILE bytes) into a NUL-terminated buffer. */
static int read_file(const char *path, char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        return -errno;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = -errno;
        close(fd);
        return rc;
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return -EISDIR;
    }
    if (!S_ISREG(st.st_mode)) { /* a FIFO or device could block or never end */
        close(fd);
        return -EINVAL;
    }
    size_t cap = 0, len = 0;
    char *data = NULL;
    for (;;) {
        if (len + 1 >= cap) { /* room for at least one byte and the NUL */
            if (cap > KUBE_CONFIG_MAX_FILE) {
                free(data);
                close(fd);
                return -EFBIG;
            }
            char *bigger = tandem_grow(data, &cap, len + 2, 1, 4096);
            if (!bigger) {
                free(data);
                close(fd);
                return -ENOMEM;
            }
            data = bigger;
        }
        ssize_t n = read(fd, data + len, cap - len - 1);
        if (n < 0) {
            if (errno == EINTR) {
                continue;
            }
            int rc = -errno;
            free(data);
            close(fd);
            return rc;
        }
        if (n == 0) {
            break;
        }
        len += (size_t)n;
        if (len > KUBE_CONFIG_MAX_FILE) {
            free(data);
            close(fd);
            return -EFBIG;
        }
    }
    close(fd);
    data[len] = '\0';
    *out = data;
    *out_len = len;
    return 0;
}

/* Trims ASCII whitespace at both ends in place; returns the new length. */
static size_t trim(char *s, size_t len)
{
    if (!s) {
        return 0;
    }
    size_t start = 0;
    while (start < len && (s[start] == ' ' || s[start] == '\t' || s[start] == '\n' ||
                           s[start] == '\r' || s[start] == '\f' || s[start] == '\v')) {
        start++;
    }
    while (len > start && (s[len - 1] == ' ' || s[len - 1] == '\t' || s[len - 1] == '\n' ||
                           s[len - 1] == '\r' || s[len - 1] == '\f' || s[len - 1] == '\v')) {
        len--;
    }
    if (start > 0) {
        memmove(s, s + start, len - start);
    }
    s[len - start] = '\0';
    return len - start;
}

int kube_base64_decode(const char *in, size_t in_len, char **out, size_t *out_len)
{
    *out = NULL;
    *out_len = 0;
    /* copy without whitespace, checking the alphabet; '=' only as trailing padding */
    char *clean = malloc(in_len + 4);
    if (!clean) {
        return -ENOMEM;
    }
    size_t n = 0, pad = 0;
    for (size_t i = 0; i < in_len; i++) {
        unsigned char ch = (unsigned char)in[i];
        if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
            continue;
        }
        if (ch == '=') {
            pad++;
            if (pad > 2) {
                free(clean);
                return -EINVAL;
            }
        } else if ((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') ||
                   (ch >= '0' && ch <= '9') || ch == '+' || ch == '/') {
            if (pad > 0) {
                free(clean);
                return -EINVAL; /* data after padding */
            }
        } else {
            free(clean);
            return -EINVAL;
        }
        clean[n++] = (char)ch;
    }
    if (pad > 0 && n % 4 != 0) {
        free(clean);
        return -EINVAL;
    }
    if (pad == 0) { /* unpadded input: add the padding EVP_DecodeBlock needs */
        switch (n % 4) {
        case 0:
            break;
        case 2:
            clean[n++] = '=';
            clean[n++] = '=';
            pad = 2;
            break;
        case 3:
            clean[n++] = '=';
            pad = 1;
            break;
        default:
            free(clean);
            return -EINVAL;
        }
    }
    if (n > INT32_MAX) {
        free(clean);
        return -EINVAL;
    }
    unsigned char *dec = malloc(n / 4 * 3 + 1);
    if (!dec) {
        free(clean);
        return -ENOMEM;
    }
    int got = n ? EVP_DecodeBlock(dec, (const unsigned char *)clean, (int)n) : 0;
    free(clean);
    if (got < 0 || (size_t)got < pad) {
        free(dec);
        return -EINVAL;
    }
    *out_len = (size_t)got - pad;
    dec[*out_len] = '\0';
    *out = (char *)dec;
    return 0;
}

/* dir of path + "/" + rel, unless rel is absolute. */
static char *resolve_path(const char *file, const char *rel)
{
    if (rel[0] == '/' || !strchr(file, '/')) {
        return strdup(rel);
    }
    const char *slash = strrchr(file, '/');
    size_t dir_len = (size_t)(slash - file);
    size_t n = dir_len + 1 + strlen(rel) + 1;
    char *p = malloc(n);
    if (p) {
        snprintf(p, n, "%.*s/%s", (int)dir_len, file, rel);
    }
    return p;
}

/* ---- the merged kubeconfig ---- */

/* One named entry of clusters/users/contexts and where it came from. */
struct entry {
    const char *name;
    struct json_object *body; /* the "cluster"/"user"/"context" object (borrowed from its doc) */
    const char *file;         /* the file that defined it */
    char field[96];           /* "clusters[3].cluster" */
};

struct merged {
    struct json_object *docs[MAX_FILES]; /* parsed files (owned) */
    char *files[MAX_FILES];              /* their paths (owned) */
    size_t ndocs;
    struct entry *clusters, *users, *contexts;
    size_t nclusters, nusers, ncontexts;
    const char *current_context; /* borrowed from a doc */
    const char *current_file;
};

static void merged_free(struct merged *m)
{
    for (size_t i = 0; i < m->ndocs; i++) {
        json_object_put(m->docs[i]);
        free(m->files[i]);
    }
    free(m->clusters);
    free(m->users);
    free(m->contexts);
}

static const struct entry *find_entry(const struct entry *v, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(v[i].name, name) == 0) {
            return &v[i];
        }
    }
    return NULL;
}

/* Checks that the optional string fields of obj are strings. prefix names obj for messages. */
static int check_strings(struct json_object *obj, const char *const *keys, size_t nkeys,
                         const char *file, const char *prefix, char *err, size_t errlen)
{
    for (size_t i = 0; i < nkeys; i++) {
        struct json_object *v;
        if (json_object_object_get_ex(obj, keys[i], &v) && v &&
            !json_object_is_type(v, json_type_string)) {
            return tandem_fail(err, errlen, -EINVAL,
                               "kubeconfig %s: %s%s%s: expected string, got %s", file, prefix,
                               *prefix ? "." : "", keys[i], json_type_label(v));
        }
    }
    return 0;
}

static int check_base64(struct json_object *obj, const char *key, const char *file,
                        const char *prefix, char *err, size_t errlen)
{
    struct json_object *v;
    if (!json_object_object_get_ex(obj, key, &v) || !v) {
        return 0;
    }
    char *dec;
    size_t len;
    const char *s = json_object_get_string(v);
    int rc = kube_base64_decode(s, strlen(s), &dec, &len);
    if (rc == -EINVAL) {
        return tandem_fail(err, errlen, rc, "kubeconfig %s: %s.%s: invalid base64", file, prefix,
                           key);
    }
    if (rc == 0 && len == 0) {
        rc = -EINVAL;
        tandem_set_err(err, errlen, "kubeconfig %s: %s.%s: empty after base64 decoding", file,
                       prefix, key);
    }
    free_secret(dec, len);
    return rc;
}

static int check_cluster(struct json_object *c, const char *file, const char *prefix, char *err,
                         size_t errlen)
{
    static const char *const strs[] = {"server", "certificate-authority",
                                       "certificate-authority-data", "tls-server-name",
                                       "proxy-url"};
    int rc = check_strings(c, strs, ARRAY_SIZE(strs), file, prefix, err, errlen);
    if (rc) {
        return rc;
    }
    struct json_object *v;
    if (json_object_object_get_ex(c, "insecure-skip-tls-verify", &v) && v &&
        !json_object_is_type(v, json_type_boolean)) {
        return tandem_fail(err, errlen, -EINVAL,
                           "kubeconfig %s: %s.insecure-skip-tls-verify: expected boolean, got %s",
                           file, prefix, json_type_label(v));
    }
    return check_base64(c, "certificate-authority-data", file, prefix, err, errlen);
}

static int check_user(struct json_object *u, const char *file, const char *prefix, char *err,
                      size_t errlen)
{
    static const char *const strs[] = {
        "token",      "tokenFile",       "client-certificate", "client-certificate-data",
        "client-key", "client-key-data", "username",           "password"};
    int rc = check_strings(u, strs, ARRAY_SIZE(strs), file, prefix, err, errlen);
    if (!rc) {
        rc = check_base64(u, "client-certificate-data", file, prefix, err, errlen);
    }
    if (!rc) {
        rc = check_base64(u, "client-key-data", file, prefix, err, errlen);
    }
    return rc;
}

static int check_context(struct json_object *c, const char *file, const char *prefix, char *err,
                         size_t errlen)
{
    static const char *const strs[] = {"cluster", "user", "namespace"};
    return check_strings(c, strs, ARRAY_SIZE(strs), file, prefix, err, errlen);
}

typedef int (*check_fn)(struct json_object *, const char *, const char *, char *, size_t);

/* Adds the entries of doc[list] ("clusters", with body key "cluster") to *v, first one wins. */
static int merge_list(struct json_object *doc, const char *file, const char *list,
                      const char *body_key, check_fn check, struct entry **v, size_t *n, char *err,
                      size_t errlen)
{
    struct json_object *arr;
    if (!json_object_object_get_ex(doc, list, &arr) || !arr) {
        return 0;
    }
    if (!json_object_is_type(arr, json_type_array)) {
        return tandem_fail(err, errlen, -EINVAL, "kubeconfig %s: %s: expected array, got %s", file,
                           list, json_type_label(arr));
    }
    size_t len = json_object_array_length(arr);
    if (len > 0) {
        struct entry *bigger = realloc(*v, (*n + len) * sizeof(**v));
        if (!bigger) {
            return -ENOMEM;
        }
        *v = bigger;
    }
    for (size_t i = 0; i < len; i++) {
        struct json_object *item = json_object_array_get_idx(arr, i);
        char field[64], prefix[96];
        snprintf(field, sizeof(field), "%s[%zu]", list, i);
        if (!json_object_is_type(item, json_type_object)) {
            return tandem_fail(err, errlen, -EINVAL, "kubeconfig %s: %s: expected object, got %s",
                               file, field, json_type_label(item));
        }
        struct json_object *name, *body;
        if (!json_object_object_get_ex(item, "name", &name) || !name) {
            return tandem_fail(err, errlen, -EINVAL,
                               "kubeconfig %s: %s.name: required field is missing", file, field);
        }
        if (!json_object_is_type(name, json_type_string) || json_object_get_string_len(name) == 0) {
            return tandem_fail(err, errlen, -EINVAL,
                               "kubeconfig %s: %s.name: expected non-empty string, got %s", file,
                               field, json_type_label(name));
        }
        snprintf(prefix, sizeof(prefix), "%s.%s", field, body_key);
        if (!json_object_object_get_ex(item, body_key, &body) || !body) {
            return tandem_fail(err, errlen, -EINVAL, "kubeconfig %s: %s: required field is missing",
                               file, prefix);
        }
        if (!json_object_is_type(body, json_type_object)) {
            return tandem_fail(err, errlen, -EINVAL, "kubeconfig %s: %s: expected object, got %s",
                               file, prefix, json_type_label(body));
        }
        int rc = check(body, file, prefix, err, errlen);
        if (rc) {
            return rc;
        }
        const char *nm = json_object_get_string(name);
        if (find_entry(*v, *n, nm)) {
            continue; /* an earlier definition wins */
        }
        struct entry *e = &(*v)[(*n)++];
        e->name = nm;
        e->body = body;
        e->file = file;
        snprintf(e->field, sizeof(e->field), "%s", prefix);
    }
    return 0;
}

static int merge_file(struct merged *m, const char *path, int skip_missing, char *err,
                      size_t errlen)
{
    char *data;
    size_t len;
    int rc = read_file(path, &data, &len);
    if (rc == -ENOENT && skip_missing) {
        return 1;
    }
    if (rc) {
        return tandem_fail(err, errlen, rc, "kubeconfig %s: %s", path,
                           rc == -EFBIG ? "file too large" : strerror(-rc));
    }
    if (m->ndocs == MAX_FILES) {
        free(data);
        return tandem_fail(err, errlen, -EINVAL, "kubeconfig %s: more than %d files", path,
                           MAX_FILES);
    }
    char perr[256];
    struct json_object *doc = NULL;
    rc = yaml_parse_one(data, len, &doc, perr, sizeof(perr));
    free_secret(data, len);
    if (rc) {
        return tandem_fail(err, errlen, rc, "kubeconfig %s: not valid YAML: %s", path, perr);
    }
    char *file = strdup(path);
    if (!file) {
        json_object_put(doc);
        return -ENOMEM;
    }
    m->docs[m->ndocs] = doc;
    m->files[m->ndocs] = file;
    m->ndocs++;
    if (!doc) {
        return 0; /* an empty file is an empty config (kubectl agrees) */
    }
    if (!json_object_is_type(doc, json_type_object)) {
        return tandem_fail(err, errlen, -EINVAL,
                           "kubeconfig %s: top level: expected a mapping, got %s", path,
                           json_type_label(doc));
    }
    static const char *const top_strs[] = {"current-context", "apiVersion", "kind"};
    rc = check_strings(doc, top_strs, ARRAY_SIZE(top_strs), file, "", err, errlen);
    if (rc) {
        return rc;
    }
    rc = merge_list(doc, file, "clusters", "cluster", check_cluster, &m->clusters, &m->nclusters,
                    err, errlen);
    if (!rc) {
        rc = merge_list(doc, file, "users", "user", check_user, &m->users, &m->nusers, err, errlen);
    }
    if (!rc) {
        rc = merge_list(doc, file, "contexts", "context", check_context, &m->contexts,
                        &m->ncontexts, err, errlen);
    }
    if (rc) {
        return rc;
    }
    struct json_object *cc;
    if (!m->current_context && json_object_object_get_ex(doc, "current-context", &cc) && cc &&
        json_object_get_string_len(cc) > 0) {
        m->current_context = json_object_get_string(cc);
        m->current_file = file;
    }
    return 0;
}

/* A string field of obj or NULL (types were checked when merging). */
static const char *str_field(struct json_object *obj, const char *key)
{
    struct json_object *v;
    if (json_object_object_get_ex(obj, key, &v) && v && json_object_is_type(v, json_type_string)) {
        return json_object_get_string(v);
    }
    return NULL;
}

/* Loads bytes for a "<key>-data" (base64) or "<key>" (file path) pair of e->body. */
static int load_material(const struct entry *e, const char *key, char **out, size_t *out_len,
                         char *err, size_t errlen)
{
    char data_key[64];
    snprintf(data_key, sizeof(data_key), "%s-data", key);
    const char *b64 = str_field(e->body, data_key);
    const char *path = str_field(e->body, key);
    *out = NULL;
    *out_len = 0;
    if (b64 && *b64) {
        int rc = kube_base64_decode(b64, strlen(b64), out, out_len);
        if (rc) {
            tandem_set_err(err, errlen, "kubeconfig %s: %s.%s: %s", e->file, e->field, data_key,
                           rc == -EINVAL ? "invalid base64" : strerror(-rc));
        }
        return rc;
    }
    if (path && *path) {
        char *full = resolve_path(e->file, path);
        if (!full) {
            return -ENOMEM;
        }
        int rc = read_file(full, out, out_len);
        if (rc) {
            tandem_set_err(err, errlen, "kubeconfig %s: %s.%s: %s: %s", e->file, e->field, key,
                           full, rc == -EFBIG ? "file too large" : strerror(-rc));
            rc = rc == -ENOMEM ? rc : -EINVAL; /* the kubeconfig is unusable, not absent */
        } else if (*out_len == 0) {
            tandem_set_err(err, errlen, "kubeconfig %s: %s.%s: %s: file is empty", e->file,
                           e->field, key, full);
            free(*out);
            *out = NULL;
            rc = -EINVAL;
        }
        free(full);
        return rc;
    }
    return 0;
}

static int set_server(struct kube_config *cfg, const char *server)
{
    size_t len = strlen(server);
    while (len > 0 && server[len - 1] == '/') {
        len--;
    }
    int has_scheme = strncmp(server, "http://", 7) == 0 || strncmp(server, "https://", 8) == 0;
    size_t n = len + (has_scheme ? 0 : 8) + 1;
    cfg->server = malloc(n);
    if (!cfg->server) {
        return -ENOMEM;
    }
    snprintf(cfg->server, n, "%s%.*s", has_scheme ? "" : "https://", (int)len, server);
    return 0;
}

static int build_config(const struct merged *m, const char *paths, const char *context,
                        struct kube_config **out, char *err, size_t errlen)
{
    const char *ctx_name = context;
    const char *where = paths;
    if (!ctx_name || !*ctx_name) {
        ctx_name = m->current_context;
        where = m->current_file ? m->current_file : paths;
        if (!ctx_name) {
            return tandem_fail(err, errlen, -EINVAL,
                               "kubeconfig %s: current-context: not set and no context given",
                               paths);
        }
    }
    const struct entry *ctx = find_entry(m->contexts, m->ncontexts, ctx_name);
    if (!ctx) {
        return tandem_fail(err, errlen, -EINVAL, "kubeconfig %s: context \"%s\" not found", where,
                           ctx_name);
    }
    const char *cluster_name = str_field(ctx->body, "cluster");
    if (!cluster_name || !*cluster_name) {
        return tandem_fail(err, errlen, -EINVAL,
                           "kubeconfig %s: %s.cluster: required field is missing", ctx->file,
                           ctx->field);
    }
    const struct entry *cl = find_entry(m->clusters, m->nclusters, cluster_name);
    if (!cl) {
        return tandem_fail(err, errlen, -EINVAL,
                           "kubeconfig %s: %s.cluster: cluster \"%s\" not found", ctx->file,
                           ctx->field, cluster_name);
    }
    const char *user_name = str_field(ctx->body, "user");
    const struct entry *us = NULL;
    if (user_name && *user_name) {
        us = find_entry(m->users, m->nusers, user_name);
        if (!us) {
            return tandem_fail(err, errlen, -EINVAL,
                               "kubeconfig %s: %s.user: user \"%s\" not found", ctx->file,
                               ctx->field, user_name);
        }
    }
    const char *server = str_field(cl->body, "server");
    if (!server || !*server) {
        return tandem_fail(err, errlen, -EINVAL,
                           "kubeconfig %s: %s.server: required field is missing", cl->file,
                           cl->field);
    }
    if (us) {
        static const char *const unsupported[] = {"exec", "auth-provider", "username", "password"};
        for (size_t i = 0; i < ARRAY_SIZE(unsupported); i++) {
            struct json_object *v;
            if (json_object_object_get_ex(us->body, unsupported[i], &v) && v) {
                tandem_set_err(err, errlen,
                               "kubeconfig %s: %s.%s: unsupported authentication (use a token or a "
                               "client certificate)",
                               us->file, us->field, unsupported[i]);
                return -EINVAL;
            }
        }
    }

    struct kube_config *cfg = calloc(1, sizeof(*cfg));
    if (!cfg) {
        return -ENOMEM;
    }
    int rc = set_server(cfg, server);
    if (rc) {
        goto err_free_cfg;
    }
    struct json_object *insecure;
    if (json_object_object_get_ex(cl->body, "insecure-skip-tls-verify", &insecure) && insecure) {
        cfg->insecure_skip_tls_verify = json_object_get_boolean(insecure);
    }
    rc = load_material(cl, "certificate-authority", &cfg->ca_pem, &cfg->ca_pem_len, err, errlen);
    if (rc) {
        goto err_free_cfg;
    }
    if (us) {
        const char *token = str_field(us->body, "token");
        const char *token_file = str_field(us->body, "tokenFile");
        if (token && *token && !(cfg->token = strdup(token))) {
            rc = -ENOMEM;
            goto err_free_cfg;
        }
        if (token_file && *token_file) {
            cfg->token_file = resolve_path(us->file, token_file);
            if (!cfg->token_file) {
                rc = -ENOMEM;
                goto err_free_cfg;
            }
            char *t;
            size_t tlen;
            rc = read_file(cfg->token_file, &t, &tlen);
            if (rc) {
                tandem_set_err(err, errlen, "kubeconfig %s: %s.tokenFile: %s: %s", us->file,
                               us->field, cfg->token_file,
                               rc == -EFBIG ? "file too large" : strerror(-rc));
                rc = rc == -ENOMEM ? rc : -EINVAL;
                goto err_free_cfg;
            }
            trim(t, tlen);
            free_secret(cfg->token, cfg->token ? strlen(cfg->token) : 0);
            cfg->token = t; /* the file wins over an inline token, as in client-go */
        }
        rc = load_material(us, "client-certificate", &cfg->client_cert_pem,
                           &cfg->client_cert_pem_len, err, errlen);
        if (!rc) {
            rc = load_material(us, "client-key", &cfg->client_key_pem, &cfg->client_key_pem_len,
                               err, errlen);
        }
        if (rc) {
            goto err_free_cfg;
        }
        if (!cfg->client_cert_pem != !cfg->client_key_pem) {
            tandem_set_err(err, errlen, "kubeconfig %s: %s.%s: required together with %s", us->file,
                           us->field, cfg->client_cert_pem ? "client-key" : "client-certificate",
                           cfg->client_cert_pem ? "client-certificate" : "client-key");
            rc = -EINVAL;
            goto err_free_cfg;
        }
    }
    const char *ns = str_field(ctx->body, "namespace");
    cfg->namespace = strdup(ns && *ns ? ns : "default");
    cfg->context = strdup(ctx_name);
    if (!cfg->namespace || !cfg->context) {
        rc = -ENOMEM;
        goto err_free_cfg;
    }
    *out = cfg;
    return 0;

err_free_cfg:
    kube_config_free(cfg);
    return rc;
}

static char *default_kubeconfig_path(void)
{
    const char *home = getenv("HOME");
    if (!home || !*home) {
        return NULL;
    }
    size_t n = strlen(home) + sizeof("/.kube/config");
    char *p = malloc(n);
    if (p) {
        snprintf(p, n, "%s/.kube/config", home);
    }
    return p;
}

int kube_config_from_kubeconfig(const char *paths, const char *context, struct kube_config **out,
                                char *err, size_t errlen)
{
    *out = NULL;
    tandem_set_err(err, errlen, "%s", "");
    char *owned = NULL;
    if (!paths || !*paths) {
        paths = getenv("KUBECONFIG");
        if (!paths || !*paths) {
            owned = default_kubeconfig_path();
            if (!owned) {
                return tandem_fail(err, errlen, -ENOENT,
                                   "kubeconfig: neither KUBECONFIG nor HOME is set");
            }
            paths = owned;
        }
    }
    char *list = strdup(paths);
    if (!list) {
        free(owned);
        return -ENOMEM;
    }
    struct merged m;
    memset(&m, 0, sizeof(m));
    int is_list = strchr(list, ':') != NULL;
    int rc = 0, found = 0;
    char *save = NULL;
    for (char *p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
        rc = merge_file(&m, p, is_list, err, errlen);
        if (rc < 0) {
            goto done;
        }
        if (rc == 0) {
            found++;
        }
    }
    if (!found) {
        tandem_set_err(err, errlen, "kubeconfig %s: %s", paths, strerror(ENOENT));
        rc = -ENOENT;
        goto done;
    }
    rc = build_config(&m, paths, context, out, err, errlen);
done:
    merged_free(&m);
    free(list);
    free(owned);
    return rc;
}

int kube_config_in_cluster(const char *sa_dir, struct kube_config **out, char *err, size_t errlen)
{
    *out = NULL;
    tandem_set_err(err, errlen, "%s", "");
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !*host || !port || !*port) {
        return tandem_fail(
            err, errlen, -ENOENT, "%s",
            "in-cluster config: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be "
            "set");
    }
    if (!sa_dir) {
        sa_dir = DEFAULT_SA_DIR;
    }
    struct kube_config *cfg = calloc(1, sizeof(*cfg));
    if (!cfg) {
        return -ENOMEM;
    }
    int rc = -ENOMEM;
    size_t n = strlen(host) + strlen(port) + 16;
    cfg->server = malloc(n);
    if (!cfg->server) {
        goto err_free_cfg;
    }
    int v6 = strchr(host, ':') != NULL && host[0] != '[';
    snprintf(cfg->server, n, "https://%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "", port);

    n = strlen(sa_dir) + 16;
    char *path = malloc(n);
    if (!path) {
        goto err_free_cfg;
    }
    snprintf(path, n, "%s/token", sa_dir);
    char *data;
    size_t len;
    rc = read_file(path, &data, &len);
    if (rc) {
        tandem_set_err(err, errlen, "in-cluster config: %s: %s", path, strerror(-rc));
        free(path);
        goto err_free_cfg;
    }
    trim(data, len);
    cfg->token = data;
    cfg->token_file = path;

    n = strlen(sa_dir) + 16;
    path = malloc(n);
    if (!path) {
        rc = -ENOMEM;
        goto err_free_cfg;
    }
    snprintf(path, n, "%s/ca.crt", sa_dir);
    rc = read_file(path, &cfg->ca_pem, &cfg->ca_pem_len);
    if (rc == -ENOENT) {
        /* no CA file: the system trust store (client-go logs and continues too) */
    } else if (rc == 0 && cfg->ca_pem_len == 0) {
        free(cfg->ca_pem);
        cfg->ca_pem = NULL;
    } else if (rc) {
        tandem_set_err(err, errlen, "in-cluster config: %s: %s", path, strerror(-rc));
        free(path);
        goto err_free_cfg;
    }
    snprintf(path, n, "%s/namespace", sa_dir);
    rc = read_file(path, &data, &len);
    free(path);
    if (rc == 0) {
        len = trim(data, len);
        if (len == 0) {
            free(data);
            data = NULL;
        }
        cfg->namespace = data;
    }
    if (!cfg->namespace && !(cfg->namespace = strdup("default"))) {
        rc = -ENOMEM;
        goto err_free_cfg;
    }
    if (!(cfg->context = strdup(""))) {
        rc = -ENOMEM;
        goto err_free_cfg;
    }
    *out = cfg;
    return 0;

err_free_cfg:
    kube_config_free(cfg);
    return rc;
}

int kube_config_load(const char *kubeconfig_flag, const char *context, struct kube_config **out,
                     char *err, size_t errlen)
{
    if (kubeconfig_flag && *kubeconfig_flag) {
        return kube_config_from_kubeconfig(kubeconfig_flag, context, out, err, errlen);
    }
    const char *env = getenv("KUBECONFIG");
    if (env && *env) {
        return kube_config_from_kubeconfig(env, context, out, err, errlen);
    }
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    if (host && *host) {
        return kube_config_in_cluster(NULL, out, err, errlen);
    }
    return kube_config_from_kubeconfig(NULL, context, out, err, errlen);
}
