/* dp_outfile: a committed file holds exactly the bytes written; until the
 * commit, and after any failure, the destination is exactly as it was and
 * no temporary is left in its directory; unusable paths (missing directory,
 * a directory, a device, a FIFO, a dangling link, no permission) are refused
 * with the path and the reason; a full disk (a file-size limit gives the
 * same failed write without root) is an error naming the reason; temporaries
 * of unfinished files go away on dp_outfile_abort_all and at exit. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "doppler.h"
#include "testlib.h"

static char g_dir[512];

static const char *in_dir(const char *name) { return t_join(g_dir, name); }

/* Entries of the test directory other than the expected ones. */
static int stray_files(const char *const *expected, int n_expected) {
    DIR *d = opendir(g_dir);
    if (!d) return -1;
    int stray = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        int known = 0;
        for (int i = 0; i < n_expected; i++) known |= !strcmp(e->d_name, expected[i]);
        if (!known) {
            fprintf(stderr, "stray file: %s\n", e->d_name);
            stray++;
        }
    }
    closedir(d);
    return stray;
}

static unsigned char *random_bytes(size_t n) {
    unsigned char *p = malloc(n ? n : 1);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)t_rand_u64();
    return p;
}

static int file_equals(const char *path, const void *data, size_t n) {
    size_t len = 0;
    char *got = t_read_file(path, &len);
    int same = got && len == n && (n == 0 || memcmp(got, data, n) == 0);
    free(got);
    return same;
}

/* Writes data in random pieces, some larger than the internal buffer. */
static int write_pieces(dp_outfile *of, const unsigned char *data, size_t n) {
    int rc = 0;
    for (size_t i = 0; i < n;) {
        size_t k = (size_t)(t_rand_u64() % 4 == 0 ? t_rand_u64() % 300000 : t_rand_u64() % 5000);
        if (k > n - i) k = n - i;
        rc |= dp_outfile_write(of, data + i, k);
        i += k;
    }
    return rc;
}

static void round_trip(void) {
    const char *names[] = {"a.bin"};
    const char *path = in_dir("a.bin");
    size_t n = 100000 + (size_t)(t_rand_u64() % 900000);
    unsigned char *data = random_bytes(n);
    dp_outfile *of = dp_outfile_open(path);
    CHECKF(of != NULL, "%s", dp_last_error());
    if (!of) return;
    CHECK(write_pieces(of, data, n) == DP_OK);
    struct stat st;
    CHECKF(stat(path, &st) != 0, "the destination exists before the commit");
    CHECK(stray_files(names, 1) == 1); /* the temporary */
    CHECKF(dp_outfile_commit(of) == DP_OK, "%s", dp_last_error());
    CHECK(file_equals(path, data, n));
    CHECK(stray_files(names, 1) == 0);
    mode_t um = umask(0);
    umask(um);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == (0666 & ~um));

    /* replacing: the old contents stay until the commit, the mode is kept */
    CHECK(chmod(path, 0640) == 0);
    unsigned char *data2 = random_bytes(n / 3);
    of = dp_outfile_open(path);
    CHECKF(of != NULL, "%s", dp_last_error());
    CHECK(write_pieces(of, data2, n / 3) == DP_OK);
    CHECK(file_equals(path, data, n));
    CHECK(dp_outfile_commit(of) == DP_OK);
    CHECK(file_equals(path, data2, n / 3));
    CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == 0640);

    /* abort leaves the old contents and no temporary */
    of = dp_outfile_open(path);
    CHECK(write_pieces(of, data, n) == DP_OK);
    dp_outfile_abort(of);
    dp_outfile_abort(NULL);
    CHECK(file_equals(path, data2, n / 3));
    CHECK(stray_files(names, 1) == 0);

    /* an empty file is a file too */
    of = dp_outfile_open(path);
    CHECK(dp_outfile_commit(of) == DP_OK);
    CHECK(file_equals(path, "", 0));
    unlink(path);
    free(data);
    free(data2);
}

/* A symbolic link stays a link; the file it points to gets the new bytes. */
static void through_symlink(void) {
    const char *names[] = {"target.bin", "link.bin"};
    const char *target = in_dir("target.bin"), *link = in_dir("link.bin");
    CHECK(t_write_file(target, "old", 3) == 0);
    CHECK(symlink("target.bin", link) == 0);
    unsigned char *data = random_bytes(5000);
    dp_outfile *of = dp_outfile_open(link);
    CHECKF(of != NULL, "%s", dp_last_error());
    if (of) {
        dp_outfile_write(of, data, 5000);
        CHECK(dp_outfile_commit(of) == DP_OK);
    }
    struct stat st;
    CHECK(lstat(link, &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(file_equals(target, data, 5000));
    CHECK(stray_files(names, 2) == 0);
    unlink(link);
    unlink(target);
    free(data);
}

static void refused(const char *path, const char *reason, const char *what) {
    dp_outfile *of = dp_outfile_open(path);
    CHECKF(of == NULL, "%s: accepted", what);
    if (of) {
        dp_outfile_abort(of);
        return;
    }
    const char *e = dp_last_error();
    CHECKF(strstr(e, path) && strstr(e, reason), "%s: error '%s' lacks the path or '%s'", what, e, reason);
}

static void unusable_paths(void) {
    refused(in_dir("no-such-dir/x.bin"), strerror(ENOENT), "missing directory");
    CHECK(mkdir(in_dir("sub"), 0755) == 0);
    refused(in_dir("sub"), strerror(EISDIR), "a directory");
    struct stat st;
    CHECK(stat(in_dir("sub"), &st) == 0 && S_ISDIR(st.st_mode));
    CHECK(t_write_file(in_dir("plain"), "x", 1) == 0);
    refused(in_dir("plain/x.bin"), strerror(ENOTDIR), "under a regular file");
    CHECK(mkfifo(in_dir("fifo"), 0600) == 0);
    alarm(20); /* a FIFO must be refused, not opened (which would wait) */
    refused(in_dir("fifo"), "not a regular file", "a FIFO");
    alarm(0);
    CHECK(stat(in_dir("fifo"), &st) == 0 && S_ISFIFO(st.st_mode));
    refused("/dev/null", "not a regular file", "a device");
    CHECK(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode));
    CHECK(symlink("nothing-here", in_dir("dangling")) == 0);
    refused(in_dir("dangling"), "symbolic link", "a dangling link");
    CHECK(lstat(in_dir("dangling"), &st) == 0 && S_ISLNK(st.st_mode));
    CHECK(dp_outfile_open("") == NULL && dp_outfile_open(NULL) == NULL);
    if (geteuid() != 0) { /* root writes anywhere */
        CHECK(chmod(in_dir("sub"), 0555) == 0);
        refused(in_dir("sub/x.bin"), strerror(EACCES), "a read-only directory");
        CHECK(chmod(in_dir("sub"), 0755) == 0);
        CHECK(chmod(in_dir("plain"), 0444) == 0);
        refused(in_dir("plain"), strerror(EACCES), "a read-only file");
        CHECK(chmod(in_dir("plain"), 0644) == 0);
    } else {
        printf("note: running as root, read-only paths not checked\n");
    }
    const char *names[] = {"sub", "plain", "fifo", "dangling"};
    CHECK(stray_files(names, 4) == 0);
    rmdir(in_dir("sub"));
    unlink(in_dir("plain"));
    unlink(in_dir("fifo"));
    unlink(in_dir("dangling"));
}

/* In a child under a file-size limit (SIGXFSZ ignored: write fails with
 * EFBIG, as with ENOSPC on a full disk): the commit fails naming the path
 * and the reason; the old file is intact; no temporary is left. */
static void full_disk(void) {
    const char *path = in_dir("full.bin");
    const char *names[] = {"full.bin"};
    unsigned char *old = random_bytes(1000);
    CHECK(t_write_file(path, old, 1000) == 0);
    size_t n = 3 << 20;
    unsigned char *data = random_bytes(n);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {1 << 20, 1 << 20};
        if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(3);
        dp_outfile *of = dp_outfile_open(path);
        if (!of) _exit(4);
        write_pieces(of, data, n);
        int rc = dp_outfile_commit(of);
        const char *e = dp_last_error();
        if (rc != DP_ERR_WRITE) _exit(5);
        if (!strstr(e, path) || !strstr(e, strerror(EFBIG))) {
            fprintf(stderr, "message: %s\n", e);
            _exit(6);
        }
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    CHECK(file_equals(path, old, 1000));
    CHECK(stray_files(names, 1) == 0);
    unlink(path);
    free(old);
    free(data);
}

/* Unfinished files lose their temporaries on dp_outfile_abort_all and at
 * exit, in the process that made them only; committed files stay. */
static void abort_all_and_exit(void) {
    const char *names[] = {"kept.bin"};
    dp_outfile *a = dp_outfile_open(in_dir("a.bin")), *b = dp_outfile_open(in_dir("b.bin"));
    dp_outfile *k = dp_outfile_open(in_dir("kept.bin"));
    CHECK(a && b && k);
    dp_outfile_write(a, "aaaa", 4);
    dp_outfile_write(k, "kk", 2);
    CHECK(dp_outfile_commit(k) == DP_OK);
    CHECK(stray_files(names, 1) == 2);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) exit(0); /* a child's exit leaves its parent's files alone */
    waitpid(pid, NULL, 0);
    CHECK(stray_files(names, 1) == 2);
    dp_outfile_abort_all();
    CHECK(stray_files(names, 1) == 0);
    CHECK(file_equals(in_dir("kept.bin"), "kk", 2));
    CHECK(dp_outfile_commit(a) == DP_ERR_WRITE); /* its temporary is gone */
    dp_outfile_abort(b);
    struct stat st;
    CHECK(stat(in_dir("a.bin"), &st) != 0 && stat(in_dir("b.bin"), &st) != 0);

    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        dp_outfile *c = dp_outfile_open(in_dir("c.bin"));
        dp_outfile_write(c, "cc", 2);
        exit(c ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(stray_files(names, 1) == 0);
    unlink(in_dir("kept.bin"));
}

int main(void) {
    t_seed();
    snprintf(g_dir, sizeof g_dir, "%s", t_tmp_path(".d"));
    if (mkdir(g_dir, 0755) != 0) t_skip("cannot create %s", g_dir);
    round_trip();
    through_symlink();
    unusable_paths();
    full_disk();
    abort_all_and_exit();
    rmdir(g_dir);
    return t_done("test_outfile");
}
