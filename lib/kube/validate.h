/*
 * The syntax of Kubernetes names, labels and quantities, as the API server checks it
 * (k8s.io/apimachinery/pkg/util/validation and pkg/api/resource): for validating objects before
 * they are sent, so a mistake is reported with its field instead of as a 422 from the server.
 * Pure functions on NUL-terminated strings; thread-safe.
 */
#ifndef TANDEM_LIB_KUBE_VALIDATE_H
#define TANDEM_LIB_KUBE_VALIDATE_H

/* A DNS-1123 label (namespace, Service and most object names): 1-63 of [a-z0-9-], starting and
 * ending with an alphanumeric. 1 valid, 0 not. */
int kube_valid_dns_label(const char *name);

/* A DNS-1035 label (Service names where a leading digit is not allowed): a DNS-1123 label that
 * starts with a letter. 1 valid, 0 not. */
int kube_valid_dns1035_label(const char *name);

/* A DNS-1123 subdomain (ConfigMap, Deployment, PVC names): DNS-1123 labels joined by '.', at
 * most 253 characters. 1 valid, 0 not. */
int kube_valid_dns_subdomain(const char *name);

/* A label (or annotation) key: an optional DNS-1123 subdomain prefix and '/', then a name of 1-63
 * alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric. 1 valid, 0 not. */
int kube_valid_label_key(const char *key);

/* A label value: empty, or 1-63 alphanumerics, '-', '_' or '.', starting and ending with an
 * alphanumeric. 1 valid, 0 not. */
int kube_valid_label_value(const char *value);

/* Parses a quantity ("500m", "1Gi", "2", "1e3", "+.5"): an optional sign, a decimal number, and
 * either a binary (Ki..Ei) or decimal (n, u, m, k, M..E) suffix or a decimal exponent. 0 with
 * *value set, or -EINVAL. */
int kube_parse_quantity(const char *s, long double *value);

#endif /* TANDEM_LIB_KUBE_VALIDATE_H */
