// redis-fixture.h — a throwaway redis-server for C tests: a free loopback port, a temporary
// directory, persistence off, optionally a password; killed by li_redis_fixture_stop, and by the
// kernel if the test dies first (PR_SET_PDEATHSIG). Header-only, like test.h.
// Used by tests/test-kv-tiers.c, and by tests/test-blob-store.c for its own servers
// (li_redis_server_spawn). Without redis-server installed, start fails naming setup.sh.
#ifndef LI_REDIS_FIXTURE_H
#define LI_REDIS_FIXTURE_H

#include <arpa/inet.h>
#include <hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    pid_t pid;
    int port;
    char dir[128];
    char error[256];  // why start failed
} li_redis_fixture;

static inline int li_redis_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

// Kills the redis-server *pid (if any) and reaps it; *pid becomes 0.
static inline void li_redis_server_kill(pid_t *pid) {
    if (*pid > 0) {
        kill(*pid, SIGKILL);
        waitpid(*pid, NULL, 0);
        *pid = 0;
    }
}

// Runs redis-server on *port (0: a free loopback port, three tried) with persistence off and its
// log in dir, with a password (--requirepass; NULL: none), and waits until it accepts
// connections (up to 5 s per attempt). true with *pid and *port set; false otherwise.
static inline bool li_redis_server_spawn(const char *dir, const char *password, pid_t *pid,
                                         int *port) {
    for (int attempt = 0; attempt < 3; attempt++) {
        int try_port = *port ? *port : li_redis_free_port();
        char ports[16], log[300];
        snprintf(ports, sizeof ports, "%d", try_port);
        snprintf(log, sizeof log, "%s/redis.log", dir);
        pid_t child = fork();
        if (child == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test, even on a crash
            const char *argv[] = {"redis-server", "--port", ports, "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no", "--dir", dir,
                                  "--logfile", log, "--daemonize", "no",
                                  password ? "--requirepass" : NULL, password, NULL};
            execvp("redis-server", (char **)argv);
            _exit(127);
        }
        if (child < 0) return false;
        for (int i = 0; i < 100; i++) {
            struct timespec ts = {0, 50 * 1000000};
            nanosleep(&ts, NULL);
            if (waitpid(child, NULL, WNOHANG) == child) break;  // exited: port taken, try another
            redisContext *c = redisConnect("127.0.0.1", try_port);
            bool up = c && !c->err;
            if (c) redisFree(c);
            if (up) {
                *pid = child;
                *port = try_port;
                return true;
            }
        }
        li_redis_server_kill(&child);
        if (*port) break;  // a fixed port: no other to try
    }
    return false;
}

static inline void li_redis_fixture_stop(li_redis_fixture *r) {
    li_redis_server_kill(&r->pid);
    if (r->dir[0]) {
        char cmd[200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", r->dir);
        if (system(cmd) != 0) fprintf(stderr, "redis fixture: could not remove %s\n", r->dir);
        r->dir[0] = 0;
    }
}

static inline bool li_redis_installed(void) {
    return system("command -v redis-server >/dev/null 2>&1") == 0;
}

// Starts redis-server (password: --requirepass, NULL none) in a fresh temporary directory
// (li_redis_server_spawn). false with r->error set otherwise.
static inline bool li_redis_fixture_start(li_redis_fixture *r, const char *password) {
    memset(r, 0, sizeof *r);
    if (!li_redis_installed()) {
        snprintf(r->error, sizeof r->error, "redis-server is not installed (scripts/setup.sh "
                 "installs it)");
        return false;
    }
    snprintf(r->dir, sizeof r->dir, "/tmp/lazyinfer-redis-XXXXXX");
    if (!mkdtemp(r->dir)) {
        snprintf(r->error, sizeof r->error, "mkdtemp failed");
        r->dir[0] = 0;
        return false;
    }
    if (li_redis_server_spawn(r->dir, password, &r->pid, &r->port)) return true;
    snprintf(r->error, sizeof r->error, "redis-server did not start (log in %s)", r->dir);
    return false;
}

#endif
