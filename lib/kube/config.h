/*
 * Where the Kubernetes API server is and how to authenticate to it: kubeconfig files (several in
 * $KUBECONFIG merged like kubectl) or the in-cluster service account. The result is a plain,
 * self-contained struct (all bytes copied in memory) that kube_client_new copies again, so a
 * config may be freed as soon as the client is made.
 *
 * Supported auth: bearer token (inline or tokenFile), client certificate + key (files or -data),
 * CA bundle (file or -data) or insecure-skip-tls-verify. exec plugins, auth-provider and
 * username/password are refused with an error naming the field. Every error names the file and
 * the field: "kubeconfig /x: users[0].user.client-key-data: invalid base64".
 */
#ifndef TANDEM_LIB_KUBE_CONFIG_H
#define TANDEM_LIB_KUBE_CONFIG_H

#include <stddef.h>

struct kube_config {
    char *server;                 /* "https://h:p" or "http://h:p", never with a trailing '/' */
    char *ca_pem;                 /* CA bundle bytes (from file or -data), or NULL */
    size_t ca_pem_len;            /* bytes in ca_pem */
    int insecure_skip_tls_verify; /* non-zero: do not verify the server certificate */
    char *token;                  /* static bearer token, or NULL */
    char *token_file;             /* re-read at most every 60 s and after a 401, or NULL */
    char *client_cert_pem;        /* client certificate PEM bytes, or NULL */
    size_t client_cert_pem_len;
    char *client_key_pem; /* client private key PEM bytes, or NULL */
    size_t client_key_pem_len;
    char *namespace; /* context namespace / in-cluster namespace, default "default" */
    char *context;   /* context name used ("" in-cluster) */
};

/* Hard caps on what config loading reads. */
#define KUBE_CONFIG_MAX_FILE (16u << 20) /* a kubeconfig or a file it references */

/* Loads a kubeconfig. paths: one file or a ':'-separated list merged like kubectl (the first file
 * to set a map entry -- cluster, user or context name -- wins; current-context from the first file
 * that has one); NULL → $KUBECONFIG, else ~/.kube/config. Missing files in a list are skipped
 * (kubectl does the same) but at least one must exist. context: NULL → current-context.
 * Relative certificate-authority / client-certificate / client-key / tokenFile paths are resolved
 * against the directory of the file that defined the entry. On success *out is a new config
 * (kube_config_free). Errors: -EINVAL (malformed, unknown context, unsupported auth), -ENOENT (no
 * file), -ENOMEM, -EFBIG (a file over KUBE_CONFIG_MAX_FILE); err (may be NULL) gets a message. */
int kube_config_from_kubeconfig(const char *paths, const char *context, struct kube_config **out,
                                char *err, size_t errlen);

/* In-cluster config from KUBERNETES_SERVICE_HOST / KUBERNETES_SERVICE_PORT (an IPv6 host is
 * bracketed) and the service-account directory (sa_dir NULL →
 * /var/run/secrets/kubernetes.io/serviceaccount): token (kept as token_file so it is re-read as
 * it rotates; the current contents are also loaded into token), ca.crt, namespace (default
 * "default"). context is "". -ENOENT when the environment variables or the token are missing. */
int kube_config_in_cluster(const char *sa_dir, struct kube_config **out, char *err, size_t errlen);

/* The usual resolution: kubeconfig_flag (non-NULL, non-empty) → that file; else $KUBECONFIG when
 * set and non-empty; else in-cluster when KUBERNETES_SERVICE_HOST is set; else ~/.kube/config. */
int kube_config_load(const char *kubeconfig_flag, const char *context, struct kube_config **out,
                     char *err, size_t errlen);

/* Frees c and every string it owns (NULL is fine). Secret material is cleared before free. */
void kube_config_free(struct kube_config *c);

/* A deep copy of c, or NULL on OOM. */
struct kube_config *kube_config_dup(const struct kube_config *c);

/* Decodes standard base64 (padding optional, whitespace/newlines ignored) into a new malloc'd
 * buffer with a NUL after the data. Returns 0, or -EINVAL for invalid input, -ENOMEM. */
int kube_base64_decode(const char *in, size_t in_len, char **out, size_t *out_len);

#endif /* TANDEM_LIB_KUBE_CONFIG_H */
