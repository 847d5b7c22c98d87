/* dp_outfile: atomic output files (see doppler.h). The bytes go to
 * "DIR/.NAME.XXXXXXXX.tmp" next to the destination so the final rename stays
 * within one file system; the destination is never opened for writing, so a
 * failure at any point leaves it exactly as it was. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

enum { BUF_BYTES = 1 << 16, MAX_LIVE = 64, NAME_KEEP = 200 };

struct dp_outfile {
    int fd;
    int err;                 /* errno of the first failed write, 0 while fine */
    atomic_int dead;         /* its temporary was removed by dp_outfile_abort_all */
    pid_t owner;             /* a forked child's exit must not remove its parent's files */
    size_t used;
    char *path;              /* as the caller named it, for messages */
    char *final;             /* where the file goes (symbolic links resolved) */
    char *dir;               /* final's directory, fsync'ed after the rename */
    unsigned char *buf;
    char tmp[];              /* the temporary's path */
};

/* Live handles for dp_outfile_abort_all: a slot is filled only once its
 * handle is complete and emptied before the handle is freed, so a signal
 * handler sees either nothing or a whole handle. */
static _Atomic(dp_outfile *) g_live[MAX_LIVE];
static pthread_once_t g_atexit_once = PTHREAD_ONCE_INIT;

static void abort_all_at_exit(void) { dp_outfile_abort_all(); }
static void register_atexit(void) { atexit(abort_all_at_exit); }

void dp_outfile_abort_all(void) {
    pid_t me = getpid();
    for (int i = 0; i < MAX_LIVE; i++) {
        dp_outfile *of = atomic_load(&g_live[i]);
        if (of && of->owner == me && !atomic_exchange(&of->dead, 1)) unlink(of->tmp);
    }
}

static void live_add(dp_outfile *of) {
    pthread_once(&g_atexit_once, register_atexit);
    for (int i = 0; i < MAX_LIVE; i++) {
        dp_outfile *none = NULL;
        if (atomic_compare_exchange_strong(&g_live[i], &none, of)) return;
    }
    /* more than MAX_LIVE files open at once: this one works, only without
     * the clean-up at exit */
}

static void live_remove(dp_outfile *of) {
    for (int i = 0; i < MAX_LIVE; i++) {
        dp_outfile *cur = of;
        if (atomic_compare_exchange_strong(&g_live[i], &cur, NULL)) return;
    }
}

static void release(dp_outfile *of) {
    live_remove(of);
    if (of->fd >= 0) close(of->fd);
    free(of->path);
    free(of->final);
    free(of->dir);
    free(of->buf);
    free(of);
}

/* The destination: path itself, or for a symbolic link to a regular file the
 * file it points to. Refuses what must not be replaced. */
static char *destination(const char *path, mode_t *mode, int *exists) {
    struct stat lst, st;
    *exists = 0;
    if (lstat(path, &lst) != 0) {
        if (errno == ENOENT) return dp_strndup(path, strlen(path));
        dp_set_error(DP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        return NULL;
    }
    if (stat(path, &st) != 0) {
        dp_set_error(DP_ERR_IO, "%s: cannot write: a symbolic link to nothing (%s)", path, strerror(errno));
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) {
        dp_set_error(DP_ERR_IO, "%s: cannot write: %s", path, strerror(EISDIR));
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        dp_set_error(DP_ERR_IO, "%s: cannot write: not a regular file (a device, FIFO or socket)", path);
        return NULL;
    }
    if (access(path, W_OK) != 0) {
        dp_set_error(DP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        return NULL;
    }
    *exists = 1;
    *mode = st.st_mode & 07777;
    if (!S_ISLNK(lst.st_mode)) return dp_strndup(path, strlen(path));
    char *real = realpath(path, NULL);
    if (!real) dp_set_error(DP_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return real;
}

dp_outfile *dp_outfile_open(const char *path) {
    if (!path || !*path) {
        dp_set_error(DP_ERR_ARG, "no output path");
        return NULL;
    }
    mode_t mode = 0;
    int exists;
    char *final = destination(path, &mode, &exists);
    if (!final) return NULL;
    const char *slash = strrchr(final, '/');
    const char *base = slash ? slash + 1 : final;
    size_t dir_len = slash ? (size_t)(slash - final) : 0;
    size_t base_len = strlen(base);
    if (base_len > NAME_KEEP) base_len = NAME_KEEP; /* the temporary's name must fit NAME_MAX too */
    size_t tmp_cap = dir_len + base_len + 32;
    dp_outfile *of = dp_calloc(1, sizeof *of + tmp_cap);
    if (!of) {
        free(final);
        return NULL;
    }
    of->fd = -1;
    of->owner = getpid();
    of->final = final;
    of->path = dp_strndup(path, strlen(path));
    of->dir = slash ? dp_strndup(final, dir_len ? dir_len : 1) : dp_strndup(".", 1);
    of->buf = dp_malloc(BUF_BYTES);
    if (!of->path || !of->dir || !of->buf) {
        release(of);
        return NULL;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)of->owner << 32 ^ (uint64_t)(uintptr_t)of;
    int err = EEXIST;
    for (int attempt = 0; attempt < 100 && err == EEXIST; attempt++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        snprintf(of->tmp, tmp_cap, "%.*s%s.%.*s.%08x.tmp", (int)dir_len, final, slash ? "/" : "", (int)base_len,
                 base, (unsigned)(x >> 32));
        /* 0666 so the umask applies as for any new file */
        of->fd = open(of->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        err = of->fd < 0 ? errno : 0;
    }
    if (of->fd < 0) {
        dp_set_error(DP_ERR_IO, "%s: cannot create: %s", path, strerror(err));
        release(of);
        return NULL;
    }
    if (exists) (void)fchmod(of->fd, mode); /* best effort, as cp does for a new file */
    live_add(of);
    return of;
}

static int write_fd(dp_outfile *of, const unsigned char *p, size_t n) {
    while (n) {
        ssize_t k = write(of->fd, p, n);
        if (k < 0) {
            if (errno == EINTR) continue;
            of->err = errno;
            return DP_ERR_WRITE;
        }
        if (k == 0) {
            of->err = EIO;
            return DP_ERR_WRITE;
        }
        p += k;
        n -= (size_t)k;
    }
    return DP_OK;
}

static int flush(dp_outfile *of) {
    int rc = of->used ? write_fd(of, of->buf, of->used) : DP_OK;
    of->used = 0;
    return rc;
}

int dp_outfile_write(dp_outfile *of, const void *data, size_t n) {
    if (of->err) return DP_ERR_WRITE;
    if (!n) return DP_OK;
    if (of->used + n <= BUF_BYTES) {
        memcpy(of->buf + of->used, data, n);
        of->used += n;
        return DP_OK;
    }
    if (flush(of)) return DP_ERR_WRITE;
    if (n >= BUF_BYTES) return write_fd(of, data, n);
    memcpy(of->buf, data, n);
    of->used = n;
    return DP_OK;
}

int dp_outfile_commit(dp_outfile *of) {
    if (!of) return dp_set_error(DP_ERR_ARG, "dp_outfile_commit: no file");
    int err = of->err;
    if (!err && flush(of)) err = of->err;
    if (!err && fsync(of->fd) != 0) err = errno;
    if (close(of->fd) != 0 && !err) err = errno;
    of->fd = -1;
    /* from here on dp_outfile_abort_all leaves the temporary to us */
    int removed = atomic_exchange(&of->dead, 1);
    if (!err && removed) err = EINTR;
    if (!err && rename(of->tmp, of->final) != 0) err = errno;
    if (err) {
        if (!removed) unlink(of->tmp);
        dp_set_error(DP_ERR_WRITE, "%s: cannot write: %s", of->path, strerror(err));
        release(of);
        return DP_ERR_WRITE;
    }
    /* the rename itself is durable only once the directory is on disk */
    int dfd = open(of->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    release(of);
    return DP_OK;
}

void dp_outfile_abort(dp_outfile *of) {
    if (!of) return;
    live_remove(of);
    if (!atomic_exchange(&of->dead, 1)) unlink(of->tmp);
    release(of);
}
