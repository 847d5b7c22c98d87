/* The HTTP side of doppler serve, on libmicrohttpd (a thread per
 * connection, so a handler may wait for its answer): routing, the API key,
 * body and time limits, OpenAI-style error bodies, CORS, and responses
 * whole or streamed. */
#ifndef SERVE_HTTP_H
#define SERVE_HTTP_H

#include <stddef.h>
#include <sys/types.h>

struct metrics;

typedef struct http http;
typedef struct http_req http_req;

typedef struct {
    const char *host;        /* address to bind (numeric or a name) */
    int port;                /* 0: any free port (see http_port) */
    const char *api_key;     /* NULL: no key needed */
    size_t max_body;         /* bytes; larger bodies get 413 */
    int header_timeout;      /* seconds to receive a request's headers (and idle keep-alive) */
    int body_timeout;        /* seconds to receive its body */
    int max_conns;
    int verbose;             /* a line per request on stderr */
} http_params;

typedef void (*http_handler)(http_req *c, void *user);

typedef struct {
    const char *method;      /* "GET", "POST" */
    const char *path;
    http_handler fn;
    int open;                /* answered without the API key */
} http_route;

/* Binds and starts serving routes (the table must outlive the server).
 * NULL with the reason in err on failure. */
http *http_start(const http_params *p, const http_route *routes, int n_routes, void *user, struct metrics *met,
                 char *err, size_t errlen);
int http_port(const http *h);
/* Stops accepting connections; open ones carry on. */
void http_quiesce(http *h);
/* Requests whose response is not yet wholly sent (or given up). */
int http_busy(http *h);
/* Closes every connection and frees the server. */
void http_stop(http *h);

/* For handlers: the request body (complete; NUL-terminated), the client's
 * socket (to watch for a hang-up), a request header. */
const char *http_body(const http_req *c, size_t *len);
int http_client_fd(const http_req *c);
const char *http_header(const http_req *c, const char *name);

/* Answers (once per request). Bodies are copied. */
void http_reply(http_req *c, int status, const char *content_type, const char *body, size_t len);
/* {"error": {"message", "type", "param", "code"}}; type follows the status. */
void http_reply_error(http_req *c, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Adds a header to the answer that follows (e.g. Retry-After). */
void http_add_header(http_req *c, const char *name, const char *value);
/* A 200 streamed from read (chunked): it fills buf with up to max bytes
 * and returns the count, blocking until it has some; -1 ends the stream,
 * -2 aborts it. done(state) runs when the response is gone. */
typedef ssize_t (*http_read_fn)(void *state, char *buf, size_t max);
void http_reply_stream(http_req *c, const char *content_type, http_read_fn read, void *state, void (*done)(void *));
/* Lets a handler wait longer than the idle timeout before answering. */
void http_long_wait(http_req *c, int on);

#endif
