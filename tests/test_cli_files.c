/* The CLI's files: `synth -o` and `trace dump -o` never delete or truncate
 * what they did not create (an existing file, a directory, a FIFO), refuse
 * unusable output paths with exit 2 before any work, and on a full disk (a
 * file-size limit gives the same failed write without root) exit 1 naming
 * the path and the reason, leaving no partial file and no temporary; a FIFO,
 * device or directory given as the model or trace is refused at once (it
 * used to block in open() forever), and a trace whose sizes do not fit the
 * file is refused. Every run has a time limit so a hang fails. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testlib.h"
#include "testmodel.h"

static char g_dir[512];
static const char *g_model;

static const char *in_dir(const char *name) { return t_join(g_dir, name); }

static int n_entries(void) {
    DIR *d = opendir(g_dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d) closedir(d);
    return n;
}

/* Runs doppler with a time limit; returns its exit code (124: timed out),
 * its stderr in *err. fsize_kb > 0: under that file-size limit, SIGXFSZ
 * ignored, so writes fail with EFBIG as they fail with ENOSPC on a full disk. */
static int run(const char *args, long fsize_kb, char **err) {
    const char *bin = getenv("DOPPLER_BIN");
    char cmd[4096], errpath[600];
    snprintf(errpath, sizeof errpath, "%s.stderr", t_tmp_path(NULL));
    snprintf(cmd, sizeof cmd, "exec timeout -k 5 60 '%s' %s >/dev/null 2>'%s'", bin ? bin : "doppler", args, errpath);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        if (fsize_kb > 0) {
            signal(SIGXFSZ, SIG_IGN);
            struct rlimit rl = {(rlim_t)fsize_kb << 10, (rlim_t)fsize_kb << 10};
            if (setrlimit(RLIMIT_FSIZE, &rl) != 0) _exit(99);
        }
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(98);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    char *e = t_read_file(errpath, NULL);
    unlink(errpath);
    *err = e ? e : strdup("");
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void expect(const char *args, long fsize_kb, int code, const char *needle1, const char *needle2) {
    char *err;
    int rc = run(args, fsize_kb, &err);
    CHECKF(rc == code, "'%s': exit %d, want %d (124 = hung); stderr: %s", args, rc, code, err);
    CHECKF(strstr(err, needle1) && (!needle2 || strstr(err, needle2)), "'%s': stderr lacks '%s' / '%s': %s", args,
           needle1, needle2 ? needle2 : "", err);
    int lines = 0;
    for (const char *p = err; *p; p++) lines += *p == '\n';
    CHECKF(lines == 1, "'%s': %d lines of stderr: %s", args, lines, err);
    free(err);
}

static int file_is(const char *path, const char *want) {
    size_t len = 0;
    char *got = t_read_file(path, &len);
    int same = got && len == strlen(want) && !memcmp(got, want, len);
    free(got);
    return same;
}

static const char *SYNTH = "synth --arch llama --preset tiny --type f32";

static void synth_outputs(void) {
    char a[2048];
    struct stat st;
    /* an existing file survives a failed write untouched */
    char keep[768];
    snprintf(keep, sizeof keep, "%s", in_dir("keep.gguf"));
    CHECK(t_write_file(keep, "precious", 8) == 0);
    snprintf(a, sizeof a, "%s -o '%s'", SYNTH, keep);
    expect(a, 256, 1, keep, strerror(EFBIG));
    CHECKF(file_is(keep, "precious"), "synth removed or changed the existing file");
    CHECK(n_entries() == 1);
    /* a new file is not left half-written */
    snprintf(a, sizeof a, "%s -o '%s'", SYNTH, in_dir("new.gguf"));
    expect(a, 256, 1, in_dir("new.gguf"), strerror(EFBIG));
    CHECK(stat(in_dir("new.gguf"), &st) != 0 && n_entries() == 1);
    /* a directory is refused, not removed */
    CHECK(mkdir(in_dir("empty"), 0755) == 0);
    snprintf(a, sizeof a, "%s -o '%s'", SYNTH, in_dir("empty"));
    expect(a, 0, 2, in_dir("empty"), strerror(EISDIR));
    CHECKF(stat(in_dir("empty"), &st) == 0 && S_ISDIR(st.st_mode), "synth removed the directory");
    rmdir(in_dir("empty"));
    /* a FIFO is refused, not opened (which waits for a reader) or removed */
    CHECK(mkfifo(in_dir("fifo"), 0600) == 0);
    snprintf(a, sizeof a, "%s -o '%s'", SYNTH, in_dir("fifo"));
    expect(a, 0, 2, in_dir("fifo"), "not a regular file");
    CHECKF(stat(in_dir("fifo"), &st) == 0 && S_ISFIFO(st.st_mode), "synth removed the FIFO");
    snprintf(a, sizeof a, "%s -o '%s'", SYNTH, in_dir("missing/x.gguf"));
    expect(a, 0, 2, in_dir("missing/x.gguf"), strerror(ENOENT));
    /* a good run replaces the file whole */
    snprintf(a, sizeof a, "%s -o '%s'", SYNTH, keep);
    char *err;
    CHECKF(run(a, 0, &err) == 0, "synth failed: %s", err);
    free(err);
    CHECK(stat(keep, &st) == 0 && st.st_size > 1000000 && n_entries() == 2);
    unlink(keep);
    unlink(in_dir("fifo"));
}

static void trace_outputs(void) {
    char a[2048];
    struct stat st;
    char out[768];
    snprintf(out, sizeof out, "%s", in_dir("t.trace"));
    snprintf(a, sizeof a, "trace dump -m '%s' --tokens 5,6,7 -n 2 -o '%s'", g_model, out);
    char *err;
    CHECKF(run(a, 0, &err) == 0, "trace dump failed: %s", err);
    free(err);
    CHECK(stat(out, &st) == 0 && st.st_size > 20000);
    long size = (long)st.st_size;
    /* a full disk: exit 1 naming the file and the reason, the old file kept */
    CHECK(t_write_file(out, "old trace", 9) == 0);
    expect(a, size / 2048, 1, out, strerror(EFBIG));
    CHECKF(file_is(out, "old trace"), "trace dump truncated the existing file");
    CHECK(n_entries() == 1);
    unlink(out);
    expect(a, size / 2048, 1, out, strerror(EFBIG));
    CHECKF(stat(out, &st) != 0 && n_entries() == 0, "trace dump left a partial file");
    /* an unusable path fails at once with exit 2 */
    snprintf(a, sizeof a, "trace dump -m '%s' --tokens 5,6,7 -o '%s'", g_model, in_dir("missing/t.trace"));
    expect(a, 0, 2, in_dir("missing/t.trace"), strerror(ENOENT));
    snprintf(a, sizeof a, "trace dump -m '%s' --tokens 5,6,7 -o '%s'", g_model, g_dir);
    expect(a, 0, 2, g_dir, strerror(EISDIR));
    /* a run that fails after the output was opened leaves no temporary */
    CHECK(t_write_file(out, "old trace", 9) == 0);
    snprintf(a, sizeof a, "trace dump -m '%s' --tokens 5,6,7 -o '%s'", in_dir("missing.gguf"), out);
    expect(a, 0, 2, in_dir("missing.gguf"), strerror(ENOENT));
    CHECK(file_is(out, "old trace") && n_entries() == 1);
    unlink(out);
}

/* Models that are not regular files fail at once with a one-line error. */
static void model_inputs(void) {
    char a[2048];
    char fifo[768];
    snprintf(fifo, sizeof fifo, "%s", in_dir("model.fifo"));
    CHECK(mkfifo(fifo, 0600) == 0);
    const char *cmds[] = {"inspect '%s'", "run -m '%s' -p hi -n 1", "tokenize -m '%s' hi",
                          "synth --arch llama --preset tiny --type f32 --vocab-from '%s' -o '%s'"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        snprintf(a, sizeof a, cmds[i], fifo, in_dir("x.gguf"));
        expect(a, 0, 2, fifo, "not a regular file");
    }
    snprintf(a, sizeof a, "inspect '%s'", g_dir);
    expect(a, 0, 2, g_dir, strerror(EISDIR));
    snprintf(a, sizeof a, "run -m /dev/null -p hi");
    expect(a, 0, 2, "/dev/null", "not a regular file");
    unlink(fifo);
    CHECK(n_entries() == 0);
}

/* A trace file whose sizes would wrap around a 64-bit sum, or whose
 * data_offset is no size at all, is refused (it used to be read far
 * outside the file); a FIFO is refused at once (it used to block). */
static void trace_inputs(void) {
    char a[2048], bad[768];
    snprintf(bad, sizeof bad, "%s", in_dir("bad.trace"));
    static const char *headers[] = {
        "{\"format\":\"doppler-trace\",\"version\":1,\"data_offset\":256,\"entries\":[{\"point\":\"embed\","
        "\"layer\":-1,\"pos0\":0,\"n_pos\":2147483647,\"dim\":2147483647,\"offset\":17179869184}]}",
        "{\"format\":\"doppler-trace\",\"version\":1,\"data_offset\":-1e300,\"entries\":[{\"point\":\"embed\","
        "\"layer\":-1,\"pos0\":0,\"n_pos\":1,\"dim\":4}]}",
        "{\"format\":\"doppler-trace\",\"version\":1,\"data_offset\":256,\"entries\":[{\"point\":\"embed\","
        "\"layer\":-1,\"pos0\":0,\"n_pos\":1,\"dim\":4,\"offset\":1e300}]}",
    };
    static const char *why[] = {"lies outside the file", "bad data_offset", "lies outside the file"};
    for (int i = 0; i < 3; i++) {
        char file[384];
        memset(file, ' ', sizeof file);
        memcpy(file, headers[i], strlen(headers[i]));
        file[255] = '\n';
        for (int k = 256; k < 384; k++) file[k] = (char)t_rand_u64();
        CHECK(t_write_file(bad, file, sizeof file) == 0);
        snprintf(a, sizeof a, "trace compare '%s' '%s'", bad, bad);
        expect(a, 0, 2, bad, why[i]);
    }
    unlink(bad);
    CHECK(mkfifo(bad, 0600) == 0);
    snprintf(a, sizeof a, "trace compare '%s' '%s'", bad, bad);
    expect(a, 0, 2, bad, "not a regular file");
    unlink(bad);
}

int main(void) {
    t_seed();
    snprintf(g_dir, sizeof g_dir, "%s", t_tmp_path(".d"));
    if (mkdir(g_dir, 0755) != 0) t_skip("cannot create %s", g_dir);
    g_model = t_tmp_path(".gguf");
    CHECK(tm_write(g_model, &(tm_opts){.seed = (unsigned)t_rand_u64()}) == 0);
    synth_outputs();
    trace_outputs();
    model_inputs();
    trace_inputs();
    unlink(g_model);
    rmdir(g_dir);
    return t_done("test_cli_files");
}
