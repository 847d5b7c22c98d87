/* libmicrohttpd glue (see http.h).
 *
 * Limits: a request's headers must arrive within header_timeout seconds
 * of the connection opening (or of the previous request on it ending), its
 * body within body_timeout seconds of the headers. A watchdog thread shuts
 * down connections past those deadlines (the slow client gets no answer,
 * as nginx does it); a body still trickling in after its deadline gets 408.
 * A body over max_body gets 413: at once when the client waits for "100
 * Continue" or announces more than DRAIN_MAX bytes, otherwise after the
 * body was read and dropped, so that a client that sends before it reads
 * still sees the answer instead of a reset connection. */
#define _GNU_SOURCE
#include "http.h"

#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "doppler.h"
#include "jsonw.h"
#include "metrics.h"

#define DRAIN_MAX ((size_t)64 << 20)
#define MAX_EXTRA_HEADERS 4
#define HEADER_BYTES (64 * 1024) /* request line and headers */
#define STACK_BYTES (1 << 20)    /* per connection thread */

typedef struct conn_info {
    int fd;
    double since;            /* when it went idle (opened, or its last request ended) */
    double body_deadline;
    int busy, in_body, killed;
    struct conn_info *prev, *next;
} conn_info;

struct http {
    struct MHD_Daemon *d;
    http_params p;
    const http_route *routes;
    int n_routes;
    void *user;
    struct metrics *met;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    conn_info *conns;
    pthread_t watchdog;
    int stopping, port;
    int listen_fd;           /* after http_quiesce, else -1 */
    char *auth;              /* "Bearer KEY" */
    char last_log[256];      /* libmicrohttpd's last message (start-up errors) */
};

struct http_req {
    http *h;
    struct MHD_Connection *conn;
    conn_info *ci;
    const http_route *route;
    const char *route_name;  /* for the metrics: a route's path or "other" */
    const char *method, *url;
    sbuf body;
    size_t body_seen;
    int drain;               /* over the limit: read and dropped */
    int answered;
    double t0, wait_t0;
    int n_hdr;
    char hdr[MAX_EXTRA_HEADERS][2][64];
};

/* ------------------------------------------------------------- answers */

static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 408: return "timeout_error";
    case 500: case 503: return "server_error";
    default: return "invalid_request_error";
    }
}

static void finish_response(http_req *c, struct MHD_Response *r, int status) {
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    for (int i = 0; i < c->n_hdr; i++) MHD_add_response_header(r, c->hdr[i][0], c->hdr[i][1]);
    MHD_queue_response(c->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    c->answered = 1;
    metrics_request(c->h->met, c->route_name, status);
    if (c->h->p.verbose)
        fprintf(stderr, "[Serve] %s %s -> %d (%.3f s)\n", c->method, c->url, status, dp_time_s() - c->t0);
}

void http_add_header(http_req *c, const char *name, const char *value) {
    if (c->n_hdr == MAX_EXTRA_HEADERS) return;
    snprintf(c->hdr[c->n_hdr][0], sizeof c->hdr[0][0], "%s", name);
    snprintf(c->hdr[c->n_hdr][1], sizeof c->hdr[0][1], "%s", value);
    c->n_hdr++;
}

void http_reply(http_req *c, int status, const char *content_type, const char *body, size_t len) {
    if (c->answered) return;
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return;
    MHD_add_response_header(r, "Content-Type", content_type);
    finish_response(c, r, status);
}

void http_reply_error(http_req *c, int status, const char *param, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sbuf b = {0};
    sb_puts(&b, "{\"error\":{\"message\":");
    sb_json_str(&b, msg, strlen(msg));
    sb_printf(&b, ",\"type\":\"%s\",\"param\":", error_type(status));
    if (param && *param) sb_json_str(&b, param, strlen(param));
    else sb_puts(&b, "null");
    sb_printf(&b, ",\"code\":%d}}\n", status);
    if (!b.oom) http_reply(c, status, "application/json", b.s, b.n);
    sb_free(&b);
}

typedef struct {
    http_read_fn read;
    void *state;
    void (*done)(void *);
    struct MHD_Connection *conn;
    unsigned timeout;        /* header_timeout */
    int raised;
} stream_cb;

/* The library counts the time the callback blocks (waiting for a token) as
 * idle time and would close the connection after a long wait (a queued
 * request, a long prompt) as soon as the data comes: the idle timeout is
 * raised by the wait before returning, and put back after short ones. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_cb *s = cls;
    double t0 = dp_time_s();
    ssize_t k = s->read(s->state, buf, max);
    unsigned waited = (unsigned)(dp_time_s() - t0);
    if (waited || s->raised) {
        MHD_set_connection_option(s->conn, MHD_CONNECTION_OPTION_TIMEOUT, waited + s->timeout + 1);
        s->raised = waited > 0;
    }
    if (k == -1) return MHD_CONTENT_READER_END_OF_STREAM;
    return k < 0 || k == 0 ? MHD_CONTENT_READER_END_WITH_ERROR : k; /* 0 would make it poll in a loop */
}

static void stream_free(void *cls) {
    stream_cb *s = cls;
    s->done(s->state);
    free(s);
}

void http_reply_stream(http_req *c, const char *content_type, http_read_fn read, void *state, void (*done)(void *)) {
    stream_cb *s = c->answered ? NULL : malloc(sizeof *s);
    struct MHD_Response *r = NULL;
    if (s) {
        *s = (stream_cb){read, state, done, c->conn, (unsigned)c->h->p.header_timeout, 0};
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, s, stream_free);
    }
    if (!r) {
        free(s);
        done(state);
        return;
    }
    MHD_add_response_header(r, "Content-Type", content_type);
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    finish_response(c, r, 200);
}

void http_long_wait(http_req *c, int on) {
    if (on) {
        c->wait_t0 = dp_time_s();
        MHD_set_connection_option(c->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    } else { /* idle since the wait began, as far as the library knows: allow for it */
        unsigned waited = (unsigned)(dp_time_s() - c->wait_t0);
        MHD_set_connection_option(c->conn, MHD_CONNECTION_OPTION_TIMEOUT, waited + (unsigned)c->h->p.header_timeout + 1);
    }
}

const char *http_body(const http_req *c, size_t *len) {
    *len = c->body.n;
    return c->body.s ? c->body.s : "";
}

int http_client_fd(const http_req *c) { return c->ci ? c->ci->fd : -1; }

const char *http_header(const http_req *c, const char *name) {
    return MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, name);
}

/* ------------------------------------------------------------ requests */

static int key_ok(const http *h, const char *v) {
    if (!v) return 0;
    size_t n = strlen(h->auth);
    if (strlen(v) != n) return 0;
    unsigned char d = 0; /* compares every byte: no timing hint */
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(v[i] ^ h->auth[i]);
    return d == 0;
}

/* The first call, headers complete: route, method, key and body size. */
static void first_call(http *h, http_req *c) {
    const http_route *same_path = NULL;
    for (int i = 0; i < h->n_routes; i++) {
        if (strcmp(h->routes[i].path, c->url)) continue;
        same_path = &h->routes[i];
        if (!strcmp(h->routes[i].method, c->method)) c->route = &h->routes[i];
    }
    c->route_name = same_path ? same_path->path : "other";
    if (same_path && !strcmp(c->method, "OPTIONS")) { /* CORS preflight */
        http_add_header(c, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        http_add_header(c, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        http_add_header(c, "Access-Control-Max-Age", "86400");
        http_reply(c, 204, "text/plain", "", 0);
        return;
    }
    if (!same_path) {
        http_reply_error(c, 404, NULL, "no such endpoint: %s %.200s", c->method, c->url);
        return;
    }
    if (!c->route) {
        char allow[64] = "";
        for (int i = 0; i < h->n_routes; i++)
            if (!strcmp(h->routes[i].path, c->url))
                snprintf(allow + strlen(allow), sizeof allow - strlen(allow), "%s%s", *allow ? ", " : "",
                         h->routes[i].method);
        http_add_header(c, "Allow", allow);
        http_reply_error(c, 405, NULL, "%s does not take %s (use %s)", c->url, c->method, allow);
        return;
    }
    if (h->auth && !c->route->open && !key_ok(h, http_header(c, "Authorization"))) {
        http_add_header(c, "WWW-Authenticate", "Bearer");
        http_reply_error(c, 401, NULL, "a valid API key is needed (header 'Authorization: Bearer KEY')");
        return;
    }
    const char *cl = http_header(c, "Content-Length");
    if (cl) {
        char *end;
        unsigned long long n = strtoull(cl, &end, 10);
        if (n > h->p.max_body) {
            const char *expect = http_header(c, "Expect");
            if ((expect && strcasestr(expect, "100-continue")) || n > DRAIN_MAX)
                http_reply_error(c, 413, NULL, "the request body (%llu bytes) is larger than the limit of %zu bytes",
                                 n, h->p.max_body);
            else
                c->drain = 1;
        }
    }
}

static void upload(http *h, http_req *c, const char *data, size_t n) {
    if (c->answered) return;
    if (dp_time_s() - c->t0 > h->p.body_timeout) {
        http_reply_error(c, 408, NULL, "the request body did not arrive within %d s", h->p.body_timeout);
        return;
    }
    c->body_seen += n;
    if (!c->drain && c->body.n + n > h->p.max_body) {
        c->drain = 1;
        sb_free(&c->body);
    }
    if (c->drain) {
        if (c->body_seen > DRAIN_MAX)
            http_reply_error(c, 413, NULL, "the request body is larger than the limit of %zu bytes", h->p.max_body);
        return;
    }
    sb_add(&c->body, data, n);
    if (c->body.oom) http_reply_error(c, 500, NULL, "out of memory for the request body");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *data, size_t *data_size, void **con_cls) {
    (void)version;
    http *h = cls;
    http_req *c = *con_cls;
    if (!c) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        conn_info *ci = info ? info->socket_context : NULL;
        if (!(c = calloc(1, sizeof *c))) return MHD_NO;
        *c = (http_req){.h = h, .conn = conn, .ci = ci, .method = method, .url = url, .t0 = dp_time_s()};
        *con_cls = c;
        int killed = 0;
        pthread_mutex_lock(&h->lock);
        if (ci) {
            killed = ci->killed;
            ci->busy = ci->in_body = 1;
            ci->body_deadline = c->t0 + h->p.body_timeout;
        }
        pthread_mutex_unlock(&h->lock);
        if (killed) return MHD_NO;
        first_call(h, c);
        return MHD_YES;
    }
    if (*data_size) {
        upload(h, c, data, *data_size);
        *data_size = 0;
        return MHD_YES;
    }
    if (c->answered) return MHD_YES;
    if (c->ci) {
        pthread_mutex_lock(&h->lock);
        c->ci->in_body = 0;
        pthread_mutex_unlock(&h->lock);
    }
    if (c->drain) {
        http_reply_error(c, 413, NULL, "the request body (%zu bytes) is larger than the limit of %zu bytes",
                         c->body_seen, h->p.max_body);
        return MHD_YES;
    }
    c->route->fn(c, h->user);
    if (!c->answered) http_reply_error(c, 500, NULL, "the handler gave no answer");
    return c->answered ? MHD_YES : MHD_NO;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)conn, (void)toe;
    http *h = cls;
    http_req *c = *con_cls;
    if (!c) return;
    if (c->ci) {
        pthread_mutex_lock(&h->lock);
        c->ci->busy = c->ci->in_body = 0;
        c->ci->since = dp_time_s();
        pthread_mutex_unlock(&h->lock);
    }
    sb_free(&c->body);
    free(c);
    *con_cls = NULL;
}

/* --------------------------------------------------- connections, limits */

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    http *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn_info *ci = calloc(1, sizeof *ci);
        if (!ci || !info) {
            free(ci);
            return;
        }
        ci->fd = info->connect_fd;
        ci->since = dp_time_s();
        pthread_mutex_lock(&h->lock);
        ci->next = h->conns;
        if (h->conns) h->conns->prev = ci;
        h->conns = ci;
        pthread_mutex_unlock(&h->lock);
        *socket_context = ci;
        return;
    }
    conn_info *ci = *socket_context; /* closed: the library closes the socket after this returns */
    if (!ci) return;
    pthread_mutex_lock(&h->lock);
    if (ci->prev) ci->prev->next = ci->next;
    else h->conns = ci->next;
    if (ci->next) ci->next->prev = ci->prev;
    pthread_mutex_unlock(&h->lock);
    free(ci);
    *socket_context = NULL;
}

static void *watchdog_main(void *arg) {
    http *h = arg;
    pthread_mutex_lock(&h->lock);
    while (!h->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 250 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&h->cv, &h->lock, &ts);
        double now = dp_time_s();
        for (conn_info *ci = h->conns; ci; ci = ci->next) {
            int late = ci->busy ? ci->in_body && now > ci->body_deadline : now - ci->since > h->p.header_timeout;
            if (late && !ci->killed) {
                shutdown(ci->fd, SHUT_RDWR);
                ci->killed = 1;
            }
        }
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

static void on_log(void *cls, const char *fmt, va_list ap) {
    http *h = cls;
    vsnprintf(h->last_log, sizeof h->last_log, fmt, ap);
    size_t n = strlen(h->last_log);
    while (n && (h->last_log[n - 1] == '\n' || h->last_log[n - 1] == '\r')) h->last_log[--n] = 0;
    if (h->p.verbose) fprintf(stderr, "[Serve] libmicrohttpd: %s\n", h->last_log);
}

http *http_start(const http_params *p, const http_route *routes, int n_routes, void *user, struct metrics *met,
                 char *err, size_t errlen) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", p->port);
    int gai = getaddrinfo(p->host, port, &hints, &ai);
    if (gai) {
        snprintf(err, errlen, "cannot use host '%s': %s", p->host, gai_strerror(gai));
        return NULL;
    }
    http *h = calloc(1, sizeof *h);
    if (!h) {
        freeaddrinfo(ai);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    h->p = *p;
    h->routes = routes;
    h->n_routes = n_routes;
    h->user = user;
    h->met = met;
    h->listen_fd = -1;
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (p->api_key) {
        size_t n = strlen(p->api_key) + 8;
        if ((h->auth = malloc(n))) snprintf(h->auth, n, "Bearer %s", p->api_key);
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    h->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, h,
                            MHD_OPTION_EXTERNAL_LOGGER, on_log, h, /* first, so it gets every message */
                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)p->header_timeout,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)p->max_conns,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HEADER_BYTES,
                            MHD_OPTION_THREAD_STACK_SIZE, (size_t)STACK_BYTES,
                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!h->d || (h->auth == NULL && p->api_key)) {
        snprintf(err, errlen, "cannot listen on %s:%d%s%s", p->host, p->port, *h->last_log ? ": " : "", h->last_log);
        if (h->d) MHD_stop_daemon(h->d);
        free(h->auth);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : p->port;
    if (pthread_create(&h->watchdog, NULL, watchdog_main, h)) {
        snprintf(err, errlen, "cannot start the connection watchdog");
        MHD_stop_daemon(h->d);
        free(h->auth);
        free(h);
        return NULL;
    }
    return h;
}

int http_port(const http *h) { return h->port; }

void http_quiesce(http *h) {
    if (h->listen_fd < 0) h->listen_fd = MHD_quiesce_daemon(h->d);
}

int http_busy(http *h) {
    int n = 0;
    pthread_mutex_lock(&h->lock);
    for (const conn_info *ci = h->conns; ci; ci = ci->next) n += ci->busy;
    pthread_mutex_unlock(&h->lock);
    return n;
}

void http_stop(http *h) {
    if (!h) return;
    MHD_stop_daemon(h->d);
    if (h->listen_fd >= 0) close(h->listen_fd); /* a quiesced socket is ours to close, after the stop */
    pthread_mutex_lock(&h->lock);
    h->stopping = 1;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->watchdog, NULL);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cv);
    free(h->auth);
    free(h);
}
