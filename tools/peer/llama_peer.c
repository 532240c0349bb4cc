// llama_peer: llama.cpp on a GGUF through its C API (the libllama that the npm package
// node-llama-cpp ships prebuilt), for the peer rows of docs/benchmarks.md.
//
//   llama_peer MODEL.gguf ppl IDS.json CTX THREADS     perplexity, scored as expertd-perplexity
//   llama_peer MODEL.gguf greedy 1,2,3 N THREADS        N greedy tokens after the prompt
//   llama_peer MODEL.gguf decode PROMPT N THREADS       decode ms/token after a 512-token warm-up and a PROMPT-token
//                                                       prefill, N tokens (median and mean)
//   llama_peer MODEL.gguf prefill PROMPT REPS THREADS   prefill tokens/s of a PROMPT-token prompt in one
//                                                       batch (logits of the last position), REPS
//                                                       times after one untimed (best and median)
//   llama_peer IN.gguf quantize OUT.gguf TYPE THREADS   llama.cpp's own quantizer (what
//                                                       llama-quantize does), TYPE q8_0 | q4_0:
//                                                       its standard mix for that type
// One JSON line on stdout; llama.cpp's log goes to stderr only with LLAMA_PEER_LOG=1.
//
// No llama.h ships with the package, so the few declarations used are written here from the
// C API. The two parameter structs are only ever obtained from llama's own *_default_params()
// and handed back, so they are declared as opaque blobs larger than the real structs (returned
// and passed in memory under the x86-64 SysV ABI either way); the fields set are the context's
// first three 32-bit fields (n_ctx, n_batch, n_ubatch), read back through llama_n_ctx /
// llama_n_batch / llama_n_ubatch to check the layout; threads go through llama_set_n_threads.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int32_t llama_token;
typedef int32_t llama_pos;
typedef int32_t llama_seq_id;
struct llama_model;
struct llama_context;
struct llama_vocab;
struct llama_memory;

typedef struct {
  int32_t n_tokens;
  llama_token* token;
  float* embd;
  llama_pos* pos;
  int32_t* n_seq_id;
  llama_seq_id** seq_id;
  int8_t* logits;
} llama_batch;

typedef struct {
  uint64_t words[256];
} params_blob;

void ggml_backend_load_all_from_path(const char* dir);
void llama_backend_init(void);
void llama_log_set(void (*cb)(int level, const char* text, void* user), void* user);
params_blob llama_model_default_params(void);
params_blob llama_context_default_params(void);
struct llama_model* llama_model_load_from_file(const char* path, params_blob params);
struct llama_context* llama_init_from_model(struct llama_model* model, params_blob params);
const struct llama_vocab* llama_model_get_vocab(const struct llama_model* model);
int32_t llama_vocab_n_tokens(const struct llama_vocab* vocab);
uint32_t llama_n_ctx(const struct llama_context* ctx);
uint32_t llama_n_batch(const struct llama_context* ctx);
uint32_t llama_n_ubatch(const struct llama_context* ctx);
void llama_set_n_threads(struct llama_context* ctx, int32_t n_threads, int32_t n_threads_batch);
int32_t llama_n_threads(struct llama_context* ctx);
int32_t llama_n_threads_batch(struct llama_context* ctx);
llama_batch llama_batch_init(int32_t n_tokens, int32_t embd, int32_t n_seq_max);
void llama_batch_free(llama_batch batch);
int32_t llama_decode(struct llama_context* ctx, llama_batch batch);
float* llama_get_logits_ith(struct llama_context* ctx, int32_t i);
struct llama_memory* llama_get_memory(const struct llama_context* ctx);
void llama_memory_clear(struct llama_memory* mem, _Bool data);
void llama_free(struct llama_context* ctx);
void llama_model_free(struct llama_model* model);
params_blob llama_model_quantize_default_params(void);
uint32_t llama_model_quantize(const char* in, const char* out, const params_blob* params);
int32_t llama_model_desc(const struct llama_model* model, char* buf, size_t size);
uint64_t llama_model_size(const struct llama_model* model);

static void quiet_log(int level, const char* text, void* user) {
  (void)level;
  (void)user;
  if (getenv("LLAMA_PEER_LOG") != NULL) fputs(text, stderr);
}

static void die(const char* msg) {
  fprintf(stderr, "llama_peer: %s\n", msg);
  exit(1);
}

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// Every integer in the text, in order (a JSON array or a comma-separated list).
static int32_t* parse_ids(const char* text, int* n) {
  int cap = 1024;
  int32_t* ids = malloc(cap * sizeof(int32_t));
  *n = 0;
  for (const char* p = text; *p;) {
    if (*p >= '0' && *p <= '9') {
      char* end;
      long v = strtol(p, &end, 10);
      if (*n == cap) ids = realloc(ids, (cap *= 2) * sizeof(int32_t));
      ids[(*n)++] = (int32_t)v;
      p = end;
    } else {
      ++p;
    }
  }
  return ids;
}

static char* read_file(const char* path) {
  FILE* f = fopen(path, "rb");
  if (f == NULL) die("cannot read the ids file");
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* text = malloc(size + 1);
  if (fread(text, 1, size, f) != (size_t)size) die("short read of the ids file");
  text[size] = 0;
  fclose(f);
  return text;
}

// Decodes tokens [0, n) of `ids` at positions start.. in sequence 0; logits for all when
// all_logits, else for the last one only.
static void decode(struct llama_context* ctx, llama_batch* b, const int32_t* ids, int n,
                   int start, int all_logits) {
  b->n_tokens = n;
  for (int i = 0; i < n; ++i) {
    b->token[i] = ids[i];
    b->pos[i] = start + i;
    b->n_seq_id[i] = 1;
    b->seq_id[i][0] = 0;
    b->logits[i] = (int8_t)(all_logits || i == n - 1);
  }
  if (llama_decode(ctx, *b) != 0) die("llama_decode failed");
}

static int argmax(const float* v, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

static struct llama_context* make_context(struct llama_model* model, int n_ctx, int threads) {
  params_blob cp = llama_context_default_params();
  uint32_t* f = (uint32_t*)&cp;
  f[0] = (uint32_t)n_ctx;                        // n_ctx
  f[1] = f[2] = (uint32_t)n_ctx;                 // n_batch, n_ubatch: a window in one batch
  struct llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == NULL) die("llama_init_from_model failed");
  llama_set_n_threads(ctx, threads, threads);
  if (llama_n_ctx(ctx) < (uint32_t)n_ctx || llama_n_batch(ctx) != (uint32_t)n_ctx ||
      llama_n_ubatch(ctx) != (uint32_t)n_ctx || llama_n_threads(ctx) != threads ||
      llama_n_threads_batch(ctx) != threads)
    die("context parameters did not take (struct layout of this libllama differs)");
  return ctx;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// llama_model_quantize_params starts {int32_t nthread; enum llama_ftype ftype; ...}; the
// result is checked by loading it and reading its description (which names the ftype).
static int quantize(const char* in, const char* out, const char* type, int threads) {
  int32_t ftype;
  if (strcmp(type, "q8_0") == 0) {
    ftype = 7;  // LLAMA_FTYPE_MOSTLY_Q8_0
  } else if (strcmp(type, "q4_0") == 0) {
    ftype = 2;  // LLAMA_FTYPE_MOSTLY_Q4_0
  } else {
    die("quantize TYPE must be q8_0 or q4_0");
  }
  params_blob qp = llama_model_quantize_default_params();
  int32_t* f = (int32_t*)&qp;
  f[0] = threads;
  f[1] = ftype;
  if (llama_model_quantize(in, out, &qp) != 0) die("llama_model_quantize failed");
  struct llama_model* model = llama_model_load_from_file(out, llama_model_default_params());
  if (model == NULL) die("cannot load the quantized model");
  char desc[256];
  llama_model_desc(model, desc, sizeof(desc));
  printf("{\"out\":\"%s\",\"desc\":\"%s\",\"tensor_bytes\":%llu}\n", out, desc,
         (unsigned long long)llama_model_size(model));
  llama_model_free(model);
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr,
            "usage: llama_peer MODEL.gguf ppl IDS.json CTX THREADS\n"
            "       llama_peer MODEL.gguf greedy 1,2,3 N THREADS\n"
            "       llama_peer MODEL.gguf decode PROMPT_TOKENS N THREADS\n"
            "       llama_peer MODEL.gguf prefill PROMPT_TOKENS REPS THREADS\n");
    return 2;
  }
  const char* mode = argv[2];
  const int arg4 = atoi(argv[4]), threads = atoi(argv[5]);
  llama_log_set(quiet_log, NULL);
  const char* libdir = getenv("LLAMA_PEER_LIBDIR");
  if (libdir == NULL) die("set LLAMA_PEER_LIBDIR to the directory holding libllama");
  ggml_backend_load_all_from_path(libdir);
  llama_backend_init();
  if (strcmp(mode, "quantize") == 0) return quantize(argv[1], argv[3], argv[4], threads);
  struct llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == NULL) die("cannot load the model (LLAMA_PEER_LOG=1 shows why)");
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));

  if (strcmp(mode, "ppl") == 0) {
    int n;
    int32_t* ids = parse_ids(read_file(argv[3]), &n);
    const int w = arg4;
    struct llama_context* ctx = make_context(model, w, threads);
    llama_batch b = llama_batch_init(w, 0, 1);
    double nll = 0;
    long scored = 0, windows = 0;
    const double t0 = now_ms();
    for (int begin = 0; begin + 1 < n; begin += w) {
      const int len = n - begin < w ? n - begin : w;
      if (len < 2) break;
      llama_memory_clear(llama_get_memory(ctx), 1);
      decode(ctx, &b, ids + begin, len, 0, 1);
      for (int i = 0; i + 1 < len; ++i) {
        const float* row = llama_get_logits_ith(ctx, i);
        double peak = row[0], sum = 0;
        for (int v = 1; v < vocab; ++v) peak = row[v] > peak ? row[v] : peak;
        for (int v = 0; v < vocab; ++v) sum += exp((double)row[v] - peak);
        nll += peak + log(sum) - row[ids[begin + i + 1]];
      }
      scored += len - 1;
      ++windows;
    }
    const double mean = nll / scored;
    printf("{\"tokens\":%d,\"windows\":%ld,\"scored\":%ld,\"mean_nll\":%.9g,\"perplexity\":%.9g,"
           "\"seconds\":%.3f}\n",
           n, windows, scored, mean, exp(mean), (now_ms() - t0) / 1e3);
    llama_batch_free(b);
    llama_free(ctx);
  } else if (strcmp(mode, "greedy") == 0) {
    int n;
    int32_t* prompt = parse_ids(argv[3], &n);
    const int gen = arg4;
    struct llama_context* ctx = make_context(model, n + gen + 1, threads);
    llama_batch b = llama_batch_init(n + gen + 1, 0, 1);
    decode(ctx, &b, prompt, n, 0, 0);
    printf("{\"generated\":[");
    for (int i = 0; i < gen; ++i) {
      int32_t next = argmax(llama_get_logits_ith(ctx, -1), vocab);
      printf(i ? ",%d" : "%d", next);
      decode(ctx, &b, &next, 1, n + i, 0);
    }
    printf("]}\n");
    llama_batch_free(b);
    llama_free(ctx);
  } else if (strcmp(mode, "decode") == 0) {
    const int prompt_len = atoi(argv[3]), gen = arg4;
    int32_t* prompt = malloc(prompt_len * sizeof(int32_t));
    for (int i = 0; i < prompt_len; ++i) prompt[i] = 3 + (i * 7919) % (vocab - 3);
    {
      // Warm-up, as quant_decode_benchmark does: a throwaway 512-token prompt in its own
      // context routes to every expert, so the timed steps find all weights paged in (the
      // GGUF is mmapped: a first touch is a page fault).
      enum { kWarm = 512 };
      int32_t* warm = malloc(kWarm * sizeof(int32_t));
      for (int i = 0; i < kWarm; ++i) warm[i] = 3 + (int32_t)(((int64_t)i * 104729 + 7) % (vocab - 3));
      struct llama_context* wctx = make_context(model, kWarm + 1, threads);
      llama_batch wb = llama_batch_init(kWarm + 1, 0, 1);
      decode(wctx, &wb, warm, kWarm, 0, 0);
      llama_batch_free(wb);
      llama_free(wctx);
      free(warm);
    }
    struct llama_context* ctx = make_context(model, prompt_len + gen + 1, threads);
    llama_batch b = llama_batch_init(prompt_len + gen + 1, 0, 1);
    decode(ctx, &b, prompt, prompt_len, 0, 0);
    double* ms = malloc(gen * sizeof(double));
    for (int i = 0; i < gen; ++i) {
      int32_t next = argmax(llama_get_logits_ith(ctx, -1), vocab);
      const double t = now_ms();
      decode(ctx, &b, &next, 1, prompt_len + i, 0);
      ms[i] = now_ms() - t;
    }
    double total = 0;
    for (int i = 0; i < gen; ++i) total += ms[i];
    qsort(ms, gen, sizeof(double), cmp_double);
    printf("{\"prompt\":%d,\"tokens\":%d,\"threads\":%d,\"ms_per_token_median\":%.4f,"
           "\"ms_per_token_mean\":%.4f}\n",
           prompt_len, gen, threads, ms[gen / 2], total / gen);
    llama_batch_free(b);
    llama_free(ctx);
  } else if (strcmp(mode, "prefill") == 0) {
    const int prompt_len = atoi(argv[3]), reps = arg4;
    if (prompt_len < 1 || reps < 1) die("prefill: PROMPT_TOKENS and REPS must be positive");
    int32_t* prompt = malloc(prompt_len * sizeof(int32_t));
    for (int i = 0; i < prompt_len; ++i) prompt[i] = 3 + (int32_t)(((int64_t)i * 104729 + 7) % (vocab - 3));
    struct llama_context* ctx = make_context(model, prompt_len + 1, threads);
    llama_batch b = llama_batch_init(prompt_len + 1, 0, 1);
    double* ms = malloc(reps * sizeof(double));
    for (int i = -1; i < reps; ++i) {  // i = -1: untimed (pages the mmapped weights in)
      llama_memory_clear(llama_get_memory(ctx), 1);
      const double t = now_ms();
      decode(ctx, &b, prompt, prompt_len, 0, 0);
      if (i >= 0) ms[i] = now_ms() - t;
    }
    qsort(ms, reps, sizeof(double), cmp_double);
    printf("{\"prompt\":%d,\"reps\":%d,\"threads\":%d,\"tokens_per_s_best\":%.1f,"
           "\"tokens_per_s_median\":%.1f}\n",
           prompt_len, reps, threads, prompt_len * 1e3 / ms[0], prompt_len * 1e3 / ms[reps / 2]);
    llama_batch_free(b);
    llama_free(ctx);
  } else {
    die("mode must be ppl, greedy, decode or prefill");
  }
  llama_model_free(model);
  return 0;
}
