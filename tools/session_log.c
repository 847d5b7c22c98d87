/* [Kernel] and [KV] log lines of a session, from what its backend reports
 * (dp_session_describe): nothing here is guessed by the CLI. */
#include <inttypes.h>
#include <string.h>

#include "cli.h"

const char *cli_fmt_bytes(char *buf, size_t cap, uint64_t bytes) {
    if (bytes >= (1ull << 30)) snprintf(buf, cap, "%.2f GiB", bytes / 1073741824.0);
    else if (bytes >= (1ull << 20)) snprintf(buf, cap, "%.1f MiB", bytes / 1048576.0);
    else if (bytes >= 1024) snprintf(buf, cap, "%.1f KiB", bytes / 1024.0);
    else snprintf(buf, cap, "%" PRIu64 " B", bytes);
    return buf;
}

void cli_log_session(const dp_session *s) {
    if (!cli_log_on(LOG_KERNEL) && !cli_log_on(LOG_KV)) return;
    dp_backend_info bi;
    if (dp_session_describe(s, &bi)) {
        cli_log(LOG_KERNEL, "backend %s: no description (%s)", dp_session_backend(s), dp_last_error());
        return;
    }
    char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32];
    if (!strcmp(bi.backend, "cpu")) {
        cli_log(LOG_KERNEL, "backend=cpu level=%s (this CPU supports up to %s) threads=%d", bi.kernels, bi.cpu_isa_max,
                bi.n_threads);
    } else {
        cli_log(LOG_KERNEL, "backend=%s device=\"%s\" sm=%d cc=%d.%d", bi.backend, bi.device, bi.sm_count, bi.cc_major,
                bi.cc_minor);
        cli_log(LOG_KERNEL, "decode kernels: %s", bi.kernels);
        if (bi.dev_total_bytes) {
            cli_log(LOG_KERNEL, "device memory of this session: weights %s, KV %s, scratch %s, total %s (GPU: %s free of %s)",
                    cli_fmt_bytes(b1, sizeof b1, bi.dev_weight_bytes), cli_fmt_bytes(b2, sizeof b2, bi.dev_kv_bytes),
                    cli_fmt_bytes(b3, sizeof b3, bi.dev_scratch_bytes), cli_fmt_bytes(b4, sizeof b4, bi.dev_total_bytes),
                    cli_fmt_bytes(b5, sizeof b5, bi.dev_free_bytes), cli_fmt_bytes(b6, sizeof b6, bi.dev_capacity_bytes));
            if (bi.dev_f16_copy_bytes) /* the weights include them: say what they are and how to go without */
                cli_log(LOG_KERNEL, "the weights include %s of f16 copies of the quantised matrices for the prompts' "
                                    "GEMMs (DOPPLER_CUDA_F16_WEIGHTS=0: none, slower prefill)",
                        cli_fmt_bytes(b1, sizeof b1, bi.dev_f16_copy_bytes));
        } else {
            cli_log(LOG_KERNEL, "device memory of this session: unknown (GPU: %s free of %s)",
                    cli_fmt_bytes(b5, sizeof b5, bi.dev_free_bytes), cli_fmt_bytes(b6, sizeof b6, bi.dev_capacity_bytes));
        }
    }
    cli_log(LOG_KERNEL, "ffn act=%s: %s", bi.ffn_act, bi.act_path);
    cli_log(LOG_KERNEL, "settings: %s", bi.settings);
    dp_kv_stats ks;
    dp_session_kv_stats(s, &ks);
    cli_log(LOG_KV, "cache n_ctx=%d type=%s bytes_per_token=%" PRIu64 " bytes=%" PRIu64 " (%s allocated) pages=%d "
            "page_size=%d n_seq_max=%d", bi.n_ctx, bi.kv_type, bi.kv_bytes_per_token, bi.kv_bytes,
            cli_fmt_bytes(b1, sizeof b1, bi.kv_bytes), ks.n_pages, ks.page_size, bi.n_seq_max);
}

void cli_log_kv_fill(const dp_session *s, const char *when) {
    if (!cli_log_on(LOG_KV)) return;
    dp_backend_info bi;
    if (dp_session_describe(s, &bi)) return;
    int pos = dp_session_pos(s), n_ctx = dp_session_ctx(s);
    char b1[32];
    dp_kv_stats ks;
    dp_session_kv_stats(s, &ks);
    cli_log(LOG_KV, "%s: %d/%d positions used (%.1f%%), %s of the cache; pages used=%d shared=%d cached=%d free=%d",
            when, pos, n_ctx, n_ctx ? 100.0 * pos / n_ctx : 0.0,
            cli_fmt_bytes(b1, sizeof b1, (uint64_t)pos * bi.kv_bytes_per_token), ks.used, ks.shared, ks.cached,
            ks.free);
}
