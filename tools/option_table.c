/* Every option of every doppler command. llama.cpp's spelling comes first
 * where the meaning is the same (-c/--ctx-size, -n/--n-predict, -s/--seed,
 * ...); doppler's earlier spellings stay as aliases. Entries sharing an id
 * belong to different commands (the same option with another default or
 * range there). */
#include "cli.h"
#include "debug.h"
#include "options.h"

#define C_MODEL (C_RUN | C_CHAT | C_TOKENIZE | C_BENCH | C_BATCHED | C_PPL | C_DUMP | C_SERVE)
#define C_SAMPLE (C_RUN | C_CHAT | C_BENCH | C_DUMP)
#define C_SESSION (C_RUN | C_CHAT | C_BENCH | C_BATCHED | C_PPL | C_DUMP | C_SERVE)
#define C_DEBUG (C_RUN | C_BENCH)
/* llama.cpp options are accepted by the commands llama.cpp users run */
#define C_LLAMA (C_RUN | C_CHAT | C_TOKENIZE | C_BENCH | C_BATCHED | C_PPL | C_DUMP | C_SERVE)

#define BIG (1 << 24)

const opt_def opt_table[] = {
    /* every command */
    {O_HELP, C_ALL, "-h|--help", T_FLAG, .help = "print this help and exit"},
    {O_MODEL, C_MODEL & ~C_CHAT, "-m|--model", T_IN, .arg = "FILE", .def_text = "@model", .help = "GGUF model"},
    {O_MODEL, C_CHAT, "-m|--model", T_IN, .arg = "FILE",
     .def_text = "the default model, or SmolLM2-135M-Instruct when that has no chat template",
     .help = "GGUF model"},
    {O_MODEL, C_VERIFY, "-m|--model", T_IN, .arg = "FILE", .help = "also compare the whole forward pass on this model"},

    /* the text in */
    {O_PROMPT, C_RUN, "-p|--prompt", T_TEXT, .arg = "TEXT", .flags = O_MULTI, .example = "a b c",
     .help = "prompt text; several -p: several prompts, decoded together with --parallel"},
    {O_PROMPT, C_DUMP, "-p|--prompt", T_TEXT, .arg = "TEXT", .help = "prompt text", .example = "a b c"},
    {O_PROMPT, C_TOKENIZE, "-p|--prompt", T_TEXT, .arg = "TEXT", .help = "the text to tokenize (or give it as TEXT)",
     .example = "Hello world"},
    {O_FILE, C_RUN, "-f|--file", T_IN, .arg = "FILE", .flags = O_STDIN,
     .help = "read the prompt from FILE ('-' = standard input); with --parallel one prompt per line"},
    {O_FILE, C_DUMP, "-f|--file", T_IN, .arg = "FILE", .flags = O_STDIN,
     .help = "read the prompt from FILE ('-' = standard input)"},
    {O_PARALLEL, C_RUN, "-np|--parallel", T_INT, 1, 4096, "N", "1",
     .help = "prompts decoded at once, in one batch per step (several -p, or -f FILE with one per line)"},
    {O_FILE, C_TOKENIZE, "-f|--file", T_IN, .arg = "FILE", .flags = O_STDIN,
     .help = "tokenize each line of FILE separately ('-' = standard input)"},
    {O_FILE, C_PPL, "-f|--file", T_IN, .arg = "FILE", .flags = O_STDIN,
     .help = "the text to score (UTF-8; '-' = standard input)"},
    {O_TOKENS, C_PPL, "--tokens", T_IN, .arg = "FILE", .flags = O_STDIN,
     .help = "score these whitespace-separated token ids instead (BOS included when the model uses one)"},
    {O_TOKENS, C_DUMP, "--tokens", T_LIST, .arg = "ID,ID,...", .help = "token ids instead of text",
     .check = trace_check_ids, .example = "1,2,3"},
    {O_NO_BOS, C_RUN | C_TOKENIZE | C_DUMP, "--no-bos", T_FLAG, .help = "do not add BOS (even when the model adds one)"},
    {O_PARSE_SPECIAL, C_RUN, "--parse-special", T_FLAG,
     .help = "match special-token strings in the prompt (e.g. <start_of_turn>) as single tokens"},
    {O_PARSE_SPECIAL, C_TOKENIZE | C_DUMP, "--parse-special|--special", T_FLAG,
     .help = "match special-token strings in the text (e.g. <start_of_turn>) as single tokens"},

    /* generation */
    {O_N_PREDICT, C_RUN, "-n|--n-predict", T_INT, -1, BIG, "N", "64",
     .help = "tokens to generate; -1 = until the end of the text or of the context"},
    {O_N_PREDICT, C_CHAT, "-n|--n-predict", T_INT, -1, BIG, "N", "512",
     .help = "most tokens per reply; -1 = until the end of the turn or of the context"},
    {O_N_PREDICT, C_DUMP, "-n|--n-predict", T_INT, 0, 1 << 20, "N", "0",
     .help = "decode steps after the prompt (greedy unless --temp)"},
    {O_STOP, C_RUN | C_CHAT, "-r|--reverse-prompt|--stop", T_TEXT, .arg = "TEXT", .flags = O_MULTI,
     .help = "stop when the output contains TEXT (which is not printed)", .check = cli_check_nonempty,
     .example = "The end"},
    {O_IGNORE_EOS, C_RUN, "--ignore-eos", T_FLAG, .help = "keep generating after end-of-generation tokens"},
    {O_NO_DISPLAY_PROMPT, C_RUN, "--no-display-prompt|--no-echo", T_FLAG,
     .help = "do not print the prompt before the continuation"},
    {O_SPECIAL, C_RUN | C_CHAT, "-sp|--special", T_FLAG,
     .help = "print special tokens (e.g. <end_of_turn>) in the output"},
    {O_PROFILE, C_RUN, "--profile", T_FLAG, .help = "time every op; print tables by op kind and layer on stderr"},

    /* tokenize */
    {O_IDS, C_TOKENIZE, "--ids", T_FLAG, .help = "print only the ids, separated by spaces, one line per input"},
    {O_PIECES, C_TOKENIZE, "--pieces", T_FLAG, .help = "print only the vocabulary pieces, one line per input"},
    {O_WHOLE, C_TOKENIZE, "--whole", T_FLAG, .help = "with -f: tokenize the whole file as one text"},
    {O_STATS, C_TOKENIZE, "--stats", T_FLAG, .help = "print the token count and the time taken on stderr"},

    /* bench */
    {O_BENCH_PROMPTS, C_BENCH, "-p|--n-prompt|--prompt", T_LIST, .arg = "LIST", .def = "xs",
     .help = "prompt sizes: xs (8 tokens), s (64), m (512), l (2048) or a count; comma-separated",
     .check = bench_check_prompts, .example = "xs,4"},
    {O_GEN, C_BENCH, "-n|--n-gen|--gen", T_INT, 1, 1 << 20, "N", "16", .help = "tokens to decode per repetition"},
    {O_DEPTH, C_BENCH, "-d|--n-depth|--depth", T_LIST, .arg = "LIST", .def = "0",
     .help = "also decode after D tokens of context (comma-separated; 0 = off)", .check = bench_check_depths,
     .example = "0,8"},
    {O_REPS, C_BENCH, "-r|--repetitions|--reps", T_INT, 1, 4000, "R", "3",
     .help = "measured repetitions after one warm-up"},
    {O_PEAK_GBPS, C_BENCH, "--peak-gbps", T_FLOAT, 1e-3, 1e6, "G",
     .help = "memory bandwidth of the machine, to report decode's share of it"},
    {O_PROFILE, C_BENCH, "--profile", T_FLAG, .help = "time every op (per op kind and per layer), print the tables"},
    {O_JSON, C_BENCH, "--json", T_FLAG, .help = "one JSON object per test on stdout instead of the table"},

    /* bench batched (llama-batched-bench's names first) */
    {O_SEQS, C_BATCHED, "-npl|--seqs", T_LIST, .arg = "LIST", .def = "1,4,16,64",
     .help = "sequence counts decoded together, comma-separated", .check = bench_check_seqs, .example = "1,4"},
    {O_BENCH_PROMPTS, C_BATCHED, "-npp|--prompt", T_INT, 1, 1 << 20, "N", "128",
     .help = "prompt tokens per sequence (random)"},
    {O_GEN, C_BATCHED, "-ntg|--gen", T_INT, 1, 1 << 20, "N", "128", .help = "tokens decoded per sequence"},
    {O_SHARED_PREFIX, C_BATCHED, "--shared-prefix", T_INT, 0, 1 << 20, "N", "0",
     .help = "the first N prompt tokens are the same for every sequence (the prefix cache shares them)"},
    {O_REPS, C_BATCHED, "-r|--repetitions|--reps", T_INT, 1, 1000, "R", "1",
     .help = "measured rounds after one warm-up (the fastest decode is reported)"},
    {O_PROFILE, C_BATCHED, "--profile", T_FLAG,
     .help = "one more round with the decode steps timed op by op; print the tables"},
    {O_JSON, C_BATCHED, "--json", T_FLAG, .help = "one JSON object per sequence count on stdout instead of the table"},

    /* perplexity */
    {O_CHUNKS, C_PPL, "--chunks", T_INT, 1, BIG, "N", .def_text = "all", .help = "score only the first N windows"},

    /* synth */
    {O_ARCH, C_SYNTH, "--arch", T_CHOICE, .arg = "gemma3|qwen2|llama|qwen3|gemma2|phi3|smollm3",
     .help = "architecture (required)"},
    {O_PRESET, C_SYNTH, "--preset", T_TEXT, .arg = "NAME",
     .help = "shape (required): gemma3: tiny 270m 1b; qwen2: tiny 0.5b 1.5b 3b 7b; llama: tiny 1b 3b 8b; qwen3: tiny "
             "0.6b 1.7b 4b 8b; gemma2: tiny 2b; phi3: tiny mini 4-mini; smollm3: tiny 3b",
     .example = "tiny"},
    {O_TYPE, C_SYNTH, "--type", T_TEXT, .arg = "T", .help = "weight type (required; q4_k_m etc. as llama.cpp mixes them)",
     .check = synth_check_type, .example = "q8_0"},
    {O_VOCAB_FROM, C_SYNTH, "--vocab-from", T_IN, .arg = "FILE", .help = "copy the tokenizer.* keys of another GGUF"},
    {O_SEED, C_SYNTH, "-s|--seed", T_U64, .arg = "S", .def = "1", .help = "random seed of the weights"},
    {O_LAYERS, C_SYNTH, "--layers", T_INT, 1, 1024, "N", .help = "override the number of layers (widths unchanged)"},
    {O_OUTPUT, C_SYNTH | C_DUMP, "-o|--output", T_OUT, .arg = "FILE", .help = "where to write (required)"},

    /* verify */
    {O_SEED, C_VERIFY, "-s|--seed", T_U64, .arg = "S", .def_text = "drawn at random and printed",
     .help = "seed of the random inputs"},
    {O_SPEED, C_VERIFY, "--speed", T_FLAG,
     .help = "also measure copy bandwidth and each format's matvec bandwidth beside a read of its bytes"},
    {O_NO_OPS, C_VERIFY, "--no-ops", T_FLAG, .help = "skip the per-op checks (with --speed: only the measurements)"},
    {O_PROMPT_TOKENS, C_VERIFY, "--prompt-tokens", T_LIST, .arg = "LIST", .def = "8,40",
     .help = "random prompt lengths of the trace compares, comma-separated (a few tokens and more take different "
             "CUDA products); the greedy comparison takes the first",
     .check = verify_check_lengths, .example = "24"},
    {O_DECODE_STEPS, C_VERIFY, "--decode-steps", T_INT, 0, 63, "N", "2",
     .help = "traced decode steps after the prompt"},
    {O_GREEDY_STEPS, C_VERIFY, "--greedy-steps", T_INT, 0, 100000, "N", "64",
     .help = "teacher-forced greedy steps, 0 = skip"},
    {O_SAVE_REF, C_VERIFY, "--save-ref", T_OUT, .arg = "FILE",
     .help = "only run the CPU greedy reference and save it (--backend cpu)"},
    {O_REF, C_VERIFY, "--ref", T_IN, .arg = "FILE", .help = "use a saved CPU greedy reference instead of the CPU"},

    /* serve */
    {-1, C_SERVE, "", T_SECTION, .help = "server:"},
    {O_HOST, C_SERVE, "--host", T_TEXT, .arg = "ADDR", .def = "127.0.0.1",
     .help = "address to listen on (127.0.0.1: this machine only)", .check = cli_check_nonempty,
     .example = "127.0.0.1"},
    {O_PORT, C_SERVE, "--port", T_INT, 0, 65535, "N", "8080", .help = "TCP port, 0 = any free one"},
    {O_PARALLEL, C_SERVE, "-np|--parallel", T_INT, 1, 4096, "N", "4", .help = "requests evaluated at once"},
    {O_API_KEY, C_SERVE, "--api-key", T_TEXT, .arg = "KEY", .check = cli_check_nonempty, .example = "secret",
     .help = "require 'Authorization: Bearer KEY' (every endpoint but /health and /)"},
    {O_API_KEY_FILE, C_SERVE, "--api-key-file", T_IN, .arg = "FILE",
     .help = "the same, the key read from the first line of FILE"},
    {O_ALIAS, C_SERVE, "-a|--alias", T_TEXT, .arg = "NAME", .def_text = "the file name",
     .help = "model name in /v1/models and in responses", .check = cli_check_nonempty, .example = "mine"},
    {O_MAX_QUEUE, C_SERVE, "--max-queue", T_INT, 0, 1 << 20, "N", "64",
     .help = "requests waiting beyond the running ones before 503"},
    {O_MAX_BODY, C_SERVE, "--max-body", T_INT, 1024, 1 << 30, "BYTES", "4194304",
     .help = "largest request body, else 413"},
    {O_HEADER_TIMEOUT, C_SERVE, "--header-timeout", T_INT, 1, 3600, "S", "10",
     .help = "seconds for a request's headers, and idle keep-alive"},
    {O_BODY_TIMEOUT, C_SERVE, "--body-timeout", T_INT, 1, 3600, "S", "30", .help = "seconds for a request's body"},
    {O_MAX_CONNS, C_SERVE, "--max-connections", T_INT, 1, 65536, "N", "256", .help = "open connections at most"},
    {O_HOST_THREADS, C_SERVE, "--host-threads", T_INT, -1, 64, "N", "-1",
     .help = "helper threads for the host's part of a step: rows sampled on the host (penalties, logit_bias) "
             "and, on GPU backends, constrained answers' token masks (response_format, tool_choice) while the "
             "step runs; -1: up to 4"},
    {O_SHUTDOWN_TIMEOUT, C_SERVE, "--shutdown-timeout", T_FLOAT, 0, 86400, "S", "10",
     .help = "seconds running requests get to finish on SIGINT/SIGTERM"},
    {O_POOLING, C_SERVE, "--pooling", T_CHOICE, .arg = "mean|cls|last",
     .def_text = "the file's pooling_type, else last",
     .help = "how /v1/embeddings pools an input's last hidden states: their mean, the first position's, the last's"},
    {O_WARMUP, C_SERVE, "--warmup", T_FLAG,
     .help = "run a pass of every step shape before listening, on the CPU too (default: GPU backends only)"},
    {O_NO_WARMUP, C_SERVE, "--no-warmup", T_FLAG, .help = "no warm-up passes, on any backend"},
    {O_PROFILE, C_SERVE, "--profile", T_FLAG,
     .help = "time every op of every step: a line per step on stderr; at exit the tables of decode steps and of "
             "steps with prompt rows"},

    /* trace compare */
    {O_TOL, C_COMPARE, "--tol", T_FLOAT, 0, 1e30, "T", "1e-3", .help = "rel-L2 above which a position diverges"},
    {O_QUIET, C_COMPARE, "--quiet", T_FLAG, .help = "print only the verdict line"},

    /* chat */
    {-1, C_RUN | C_CHAT | C_SERVE, "", T_SECTION, .help = "chat template:"},
    {O_CHAT, C_RUN, "--chat", T_FLAG,
     .help = "wrap the prompt as one user message in the chat template (special tokens parsed)"},
    {O_SYSTEM, C_RUN | C_CHAT, "-sys|--system-prompt|--system", T_TEXT, .arg = "TEXT",
     .help = "system message (run: with --chat)", .example = "You are terse."},
    {O_CHAT_TEMPLATE, C_RUN | C_CHAT | C_SERVE, "--chat-template", T_TEXT, .arg = "NAME|FILE",
     .def_text = "the model's", .help = "gemma, chatml, llama3, or a file holding a Jinja chat template",
     .example = "chatml"},
    {O_CHAT_TEMPLATE_KWARGS, C_RUN | C_CHAT | C_SERVE, "--chat-template-kwargs", T_TEXT, .arg = "JSON",
     .help = "template variables as a JSON object (serve: a request's chat_template_kwargs win)",
     .check = cli_check_json_object, .example = "{\"enable_thinking\": false}"},
    {O_REASONING_FORMAT, C_SERVE, "--reasoning-format", T_CHOICE, .arg = "auto|deepseek|none", .def = "auto",
     .help = "a chat answer's <think> block: auto and deepseek return it as reasoning_content apart from the "
             "content, none leaves it in the content (a request's reasoning_format wins)"},
    {O_REASONING_FORMAT, C_RUN | C_CHAT, "--reasoning-format", T_CHOICE, .arg = "auto|deepseek|none", .def = "auto",
     .help = "a chat answer's <think> block on a terminal: auto and deepseek show it dim without its tags, none as "
             "generated (a pipe or a file always gets the text as generated)"},
    {O_PRINT_PROMPT, C_RUN | C_CHAT, "--print-prompt", T_FLAG,
     .help = "print the prompt the chat template renders on stderr"},

    /* sampling */
    {-1, C_SAMPLE, "", T_SECTION, .help = "sampling:"},
    {-1, C_SERVE, "", T_SECTION, .help = "sampling defaults (a request's own fields win):"},
    {O_TEMP, C_RUN | C_CHAT | C_SERVE, "--temp", T_FLOAT, 0, 100, "T", "0.8", .help = "temperature, 0 = greedy"},
    {O_TEMP, C_BENCH | C_DUMP, "--temp", T_FLOAT, 0, 100, "T", "0", .help = "temperature, 0 = greedy"},
    {O_TOP_K, C_SAMPLE | C_SERVE, "--top-k", T_INT, 0, BIG, "K", "40", .help = "keep the K most likely tokens, 0 = off"},
    {O_TOP_P, C_SAMPLE | C_SERVE, "--top-p", T_FLOAT, 1e-6, 1, "P", "0.95",
     .help = "keep the most likely tokens up to probability P, 1 = off"},
    {O_MIN_P, C_SAMPLE | C_SERVE, "--min-p", T_FLOAT, 0, 1, "P", "0.05",
     .help = "drop tokens below P times the best token's probability, 0 = off"},
    {O_REPEAT_PENALTY, C_SAMPLE | C_SERVE, "--repeat-penalty", T_FLOAT, 1e-3, 100, "R", "1",
     .help = "penalise the tokens of the last --repeat-last-n, 1 = off"},
    {O_REPEAT_LAST_N, C_SAMPLE | C_SERVE, "--repeat-last-n", T_INT, 0, 1 << 20, "N", "64",
     .help = "how many recent tokens the penalty looks at"},
    {O_SEED, C_SAMPLE, "-s|--seed", T_U64, .arg = "S", .def_text = "drawn at random and printed",
     .help = "sampling seed"},
    {O_JSON_SCHEMA, C_RUN | C_CHAT, "-j|--json-schema", T_TEXT, .arg = "SCHEMA",
     .help = "write one JSON value the JSON Schema accepts ('{}': any value); run: the prompt is not echoed; chat: "
             "every answer, after a <think> block where the template has one", .check = cli_check_json_schema,
     .example = "{\"type\": \"object\"}"},
    {O_JSON_SCHEMA_FILE, C_RUN | C_CHAT, "-jf|--json-schema-file", T_IN, .arg = "FILE",
     .help = "the same, the schema read from FILE"},
    {O_GRAMMAR, C_RUN | C_CHAT, "--grammar", T_TEXT, .arg = "GBNF",
     .help = "write text the GBNF grammar (llama.cpp's format) accepts as its rule root; run: the prompt is not "
             "echoed; chat: every answer", .check = cli_check_grammar, .example = "root ::= \"yes\" | \"no\""},
    {O_GRAMMAR_FILE, C_RUN | C_CHAT, "--grammar-file", T_IN, .arg = "FILE",
     .help = "the same, the grammar read from FILE"},

    /* the session */
    {-1, C_SESSION | C_VERIFY, "", T_SECTION, .help = "compute:"},
    {O_CTX, C_RUN | C_CHAT | C_DUMP, "-c|--ctx-size|--ctx", T_INT, 0, BIG, "N",
     .def_text = "4096 or the model's when smaller", .help = "context size in tokens, 0 = the model's"},
    {O_CTX, C_SERVE, "-c|--ctx-size|--ctx", T_INT, 0, BIG, "N", .def_text = "4096 or the model's when smaller",
     .help = "context of each request in tokens, 0 = the model's"},
    {O_CTX, C_PPL, "-c|--ctx-size|--ctx", T_INT, 4, 1 << 20, "N", "512", .help = "window size in tokens"},
    {O_BATCH, C_RUN | C_CHAT | C_BENCH | C_BATCHED | C_DUMP, "-b|--batch-size|--batch", T_INT, 1, 1 << 20, "N", "512",
     .help = "positions per forward pass"},
    {O_BATCH, C_SERVE, "-b|--batch-size|--batch", T_INT, 1, 1 << 20, "N", "512",
     .help = "positions per engine step, prompt chunks included (at least --parallel + 16)"},
    {O_BATCH, C_PPL, "-b|--batch-size|--batch", T_INT, 1, 1 << 20, "N", .def_text = "the window size, at most 512",
     .help = "positions per forward pass"},
    {O_THREADS, C_SESSION, "-t|--threads", T_INT, 1, 1024, "N", .def_text = "all cores", .help = "CPU threads"},
    {O_BACKEND, C_SESSION | C_VERIFY, "--backend", T_CHOICE, .arg = "cpu|cuda|auto", .def = "auto",
     .help = "compute backend; auto = cuda when a GPU is present"},
    {O_CACHE_TYPE_K, C_SESSION, "-ctk|--cache-type-k", T_CHOICE, .arg = "auto|f32|f16", .def = "auto",
     .help = "type of the cached keys and values: auto = the backend's (CPU f32 as transformers computes, CUDA "
             "f16); f16 on the CPU halves the cache's memory"},
    {O_CACHE_TYPE_V, C_SESSION, "-ctv|--cache-type-v", T_CHOICE, .arg = "auto|f32|f16", .def = "auto",
     .help = "the same for the values: K and V share one type here (one of the two sets both)"},

    /* debugging */
    {-1, C_DEBUG | C_DUMP, "", T_SECTION, .help = "debugging:"},
    {O_DEBUG, C_DEBUG, "--debug", T_FLAG, .help = "full-vector statistics ([Layer] lines) of the chosen points"},
    {O_DEBUG_LAYERS, C_DEBUG | C_DUMP, "--debug-layers", T_LIST, .arg = "LIST", .def_text = "all",
     .help = "layers, e.g. 0,12,25", .check = debug_check_layers, .example = "0,1"},
    {O_DEBUG_POS, C_DEBUG, "--debug-pos", T_LIST, .arg = "SEL", .def = "last",
     .help = "positions: last, all, or a list N,M", .check = debug_check_pos, .example = "0,1"},
    {O_DEBUG_POS, C_DUMP, "--debug-pos", T_LIST, .arg = "SEL", .def = "all",
     .help = "positions: all, last, or a list N,M", .check = debug_check_pos, .example = "last"},
    {O_DEBUG_POINTS, C_DEBUG, "--debug-points", T_LIST, .arg = "LIST",
     .def = "embed_scaled,resid_attn,resid_ffn,final_norm", .help = "trace points, e.g. q_rope,attn_out",
     .check = debug_check_points, .example = "q_rope,attn_out"},
    {O_DEBUG_POINTS, C_DUMP, "--debug-points", T_LIST, .arg = "LIST", .def_text = "all except attn_scores",
     .help = "trace points, e.g. q_rope,attn_out", .check = debug_check_points, .example = "embed,logits"},
    {O_TRACK_TOKEN, C_DEBUG, "--track-token", T_TEXT, .arg = "TEXT|ID", .flags = O_MULTI,
     .help = "logit, probability and rank of a token at every step", .example = " blue"},
    {O_TOP_K_PRINT, C_DEBUG, "--top-k-print", T_INT, 1, 1000, "K",
     .help = "the K most likely tokens and logit min/max/mean at every step"},
    {O_CHECK_FINITE, C_DEBUG, "--check-finite", T_FLAG,
     .help = "stop at the first NaN/Inf and name the layer, point and position"},

    /* logs */
    {-1, C_ALL, "", T_SECTION, .help = "logs:"},
    {O_VERBOSE, C_ALL, "-v|--verbose", T_FLAG, .help = "every log tag on stderr"},
    {O_LOG_TAGS, C_ALL, "--log-tags", T_LIST, .arg = "LIST",
     .help = "only these log tags: Loader,Pipeline,Layer,ATTN,FFN,KV,Sampler,Kernel,Bench,Stats",
     .check = cli_check_log_tags, .example = "KV,Stats"},
    {O_SHOW_OPTIONS, C_ALL, "--show-options", T_FLAG,
     .help = "print the value of every option (defaults included) and exit"},

    /* llama.cpp's, with no meaning here */
    {O_IGNORED, C_LLAMA, "-ngl|--gpu-layers|--n-gpu-layers", T_IGNORED, .arg = "N",
     .help = "the whole model runs on --backend"},
    {O_IGNORED, C_LLAMA, "-fa|--flash-attn", T_IGNORED, .arg = "[on|off|auto]",
     .help = "attention is always fused here"},
    {O_IGNORED, C_LLAMA, "-mg|--main-gpu", T_IGNORED, .arg = "N", .help = "one GPU is used"},
    {O_IGNORED, C_LLAMA, "-sm|--split-mode", T_IGNORED, .arg = "MODE", .help = "one GPU is used"},
    {O_IGNORED, C_LLAMA, "-ts|--tensor-split", T_IGNORED, .arg = "LIST", .help = "one GPU is used"},
    {O_IGNORED, C_LLAMA & ~C_SESSION, "-ctk|--cache-type-k", T_IGNORED, .arg = "TYPE", .help = "no KV cache here"},
    {O_IGNORED, C_LLAMA & ~C_SESSION, "-ctv|--cache-type-v", T_IGNORED, .arg = "TYPE", .help = "no KV cache here"},
    {O_IGNORED, C_LLAMA, "--mlock", T_IGNORED, .help = "the model is memory-mapped, never locked"},
    {O_IGNORED, C_LLAMA, "--no-mmap", T_IGNORED, .help = "the model is always memory-mapped"},
    {O_IGNORED, C_LLAMA, "--numa", T_IGNORED, .arg = "TYPE", .help = "no NUMA placement here"},
    {O_IGNORED, C_LLAMA & ~C_SERVE, "--no-warmup", T_IGNORED, .help = "there is no warm-up run"},
    {O_IGNORED, C_LLAMA, "--jinja", T_IGNORED, .help = "the model's own chat template is used by default"},
    {O_IGNORED, C_LLAMA, "--color", T_IGNORED, .help = "the output is plain text"},
};

const int opt_table_len = (int)(sizeof opt_table / sizeof opt_table[0]);
