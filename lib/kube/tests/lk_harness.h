/*
 * Test harness shared by the lib/kube tests that talk to localkube's API server emulator
 * (e2e/localkube, `python3 -m lk.apiserver`): start one on a free loopback port in a temporary
 * directory, make a client for it, inject faults through POST /localkube/faults, stop it.
 * Header-only (static functions) so each test executable stays one .c file.
 */
#ifndef TANDEM_LIB_KUBE_TESTS_LK_HARNESS_H
#define TANDEM_LIB_KUBE_TESTS_LK_HARNESS_H

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>

#include "lib/buf.h"
#include "lib/clock.h"
#include "lib/kube/client.h"
#include "lib/kube/config.h"

struct lk {
    pid_t pid;
    char dir[64];
    int port;
    char server[64];
};

TANDEM_UNUSED static void lk_sleep_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

TANDEM_UNUSED static long long lk_now_ms(void)
{
    return (long long)tandem_now_ms();
}

/* e2e/localkube of this checkout, found from this file's path (absolute in CMake builds) or, for
 * relative builds, from the working directory (ctest runs tests in lib/kube/tests). */
TANDEM_UNUSED static int lk_source_dir(char *out, size_t outlen)
{
    char path[PATH_MAX];
    const char *here = __FILE__;
    const char *cut = strstr(here, "lib/kube/tests/");
    if (here[0] == '/' && cut) {
        snprintf(path, sizeof(path), "%.*se2e/localkube", (int)(cut - here), here);
    } else {
        snprintf(path, sizeof(path), "../../../e2e/localkube");
    }
    if (!realpath(path, out) || strlen(out) >= outlen) {
        return -ENOENT;
    }
    return 0;
}

/* Starts the emulator; 0 or -1 (with a message). extra: optional further argv (NULL-terminated
 * list of up to 4). */
TANDEM_UNUSED static int lk_start_args(struct lk *lk, const char *const *extra)
{
    char src[PATH_MAX];
    memset(lk, 0, sizeof(*lk));
    if (lk_source_dir(src, sizeof(src)) != 0) {
        fprintf(stderr, "lk: cannot find e2e/localkube\n");
        return -1;
    }
    snprintf(lk->dir, sizeof(lk->dir), "/tmp/lk-kube-test-XXXXXX");
    if (!mkdtemp(lk->dir)) {
        perror("mkdtemp");
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return -1;
    }
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        char log[128];
        snprintf(log, sizeof(log), "%s/apiserver.log", lk->dir);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        if (chdir(src) != 0) {
            _exit(127);
        }
        const char *argv[16] = {"python3", "-m", "lk.apiserver", "--dir",    lk->dir,
                                "--port",  "0",  "--host",       "127.0.0.1"};
        int argc = 9;
        for (int i = 0; extra && extra[i] && i < 4; i++) {
            argv[argc++] = extra[i];
        }
        argv[argc] = NULL;
        execvp("python3", (char *const *)argv);
        _exit(127);
    }
    lk->pid = pid;
    char portfile[128];
    snprintf(portfile, sizeof(portfile), "%s/apiserver.port", lk->dir);
    for (int i = 0; i < 300; i++) { /* up to 15 s */
        FILE *f = fopen(portfile, "r");
        if (f) {
            int port = 0;
            int ok = fscanf(f, "%d", &port) == 1 && port > 0;
            fclose(f);
            if (ok) {
                lk->port = port;
                snprintf(lk->server, sizeof(lk->server), "http://127.0.0.1:%d", port);
                return 0;
            }
        }
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            fprintf(stderr, "lk: apiserver exited (status %d); see %s/apiserver.log\n", status,
                    lk->dir);
            lk->pid = 0;
            return -1;
        }
        lk_sleep_ms(50);
    }
    fprintf(stderr, "lk: apiserver did not write its port in 15 s\n");
    return -1;
}

TANDEM_UNUSED static int lk_start(struct lk *lk)
{
    static const char *const extra[] = {"--bookmark-interval", "1", NULL};
    return lk_start_args(lk, extra);
}

/* SIGTERMs the emulator (SIGKILL after 5 s), reaps it and removes its directory (kept when
 * $LK_KEEP is set, for debugging). */
TANDEM_UNUSED static void lk_stop(struct lk *lk)
{
    if (lk->pid > 0) {
        kill(lk->pid, SIGTERM);
        int status;
        for (int i = 0; i < 100; i++) { /* up to 5 s */
            if (waitpid(lk->pid, &status, WNOHANG) == lk->pid) {
                lk->pid = 0;
                break;
            }
            lk_sleep_ms(50);
        }
        if (lk->pid > 0) {
            kill(lk->pid, SIGKILL);
            waitpid(lk->pid, &status, 0);
            lk->pid = 0;
        }
    }
    if (lk->dir[0] && getenv("LK_KEEP") == NULL) {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", lk->dir);
        if (system(cmd) != 0) {
            fprintf(stderr, "lk: could not remove %s\n", lk->dir);
        }
    }
}

/* A client for the emulator (NULL opts → defaults with few retries, short timeouts). */
TANDEM_UNUSED static struct kube_client *lk_client(const struct lk *lk,
                                                   const struct kube_client_options *opts)
{
    struct kube_config cfg = {0};
    cfg.server = (char *)lk->server;
    cfg.namespace = (char *)"default";
    cfg.context = (char *)"";
    struct kube_client_options def = {
        .user_agent = "tandem-kube-test",
        .timeout_ms = 10000,
        .max_retries = 2,
        .backoff_base_ms = 20,
        .backoff_max_ms = 200,
    };
    char err[256] = "";
    struct kube_client *c = kube_client_new(&cfg, opts ? opts : &def, err, sizeof(err));
    if (!c) {
        fprintf(stderr, "lk: kube_client_new: %s\n", err);
    }
    return c;
}

/* POST /localkube/faults with body (a JSON object); 0 on success. */
TANDEM_UNUSED static int lk_fault(struct kube_client *c, const char *body)
{
    struct kube_error err = {0};
    long status = 0;
    int rc = kube_request(c, "POST", "/localkube/faults", "application/json", body, strlen(body),
                          &status, NULL, &err);
    if (rc != 0) {
        fprintf(stderr, "lk: fault %s: %d %s\n", body, rc, err.message);
    }
    return rc;
}

TANDEM_UNUSED static int lk_clear_faults(struct kube_client *c)
{
    struct kube_error err = {0};
    return kube_request(c, "DELETE", "/localkube/faults", NULL, NULL, 0, NULL, NULL, &err);
}

#endif /* TANDEM_LIB_KUBE_TESTS_LK_HARNESS_H */
