/* The C API (llmc/c_api.h) from C: engine metadata, a session's logits against the generator's
 * greedy token, generation equal to `llmc generate`'s ids, streaming text equal to the result's
 * text, cancellation from the callback and from another thread, the tokenizer, and errors
 * (codes and messages) for bad paths, bytes, inputs and options.
 *
 *   c_api_test ENGINE TOKENIZER_JSON PROMPT_IDS EXPECTED_IDS
 *
 * ENGINE: a decoder compiled with --tokenizer TOKENIZER_JSON; PROMPT_IDS and EXPECTED_IDS
 * (comma-separated): a prompt and the ids `llmc generate --max-new-tokens 12 --print-ids` gave
 * after it. Prints one line per check; exits 1 when any fails. */
#include "llmc/c_api.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int failures = 0;

static void check(int ok, const char* what) {
  printf("%s %s\n", ok ? "PASS" : "FAIL", what);
  if (!ok) ++failures;
}

/* Checks that `status` is an error with `code` and a non-empty message containing `part`. */
static void checkError(llmc_status* status, llmc_code code, const char* part, const char* what) {
  const char* message = llmc_status_message(status);
  int ok = status != NULL && llmc_status_code(status) == code && message[0] != '\0' &&
           strstr(message, part) != NULL;
  if (!ok) printf("  got %s: %s\n", llmc_code_name(llmc_status_code(status)), message);
  check(ok, what);
  llmc_status_free(status);
}

/* Stops the test when `status` is an error (nothing after it could run). */
static void require(llmc_status* status, const char* what) {
  if (status) {
    printf("FAIL %s: %s: %s\n", what, llmc_code_name(llmc_status_code(status)),
           llmc_status_message(status));
    llmc_status_free(status);
    exit(1);
  }
}

static size_t parseIds(const char* text, int32_t* ids, size_t capacity) {
  size_t n = 0;
  char* end = NULL;
  while (*text && n < capacity) {
    ids[n++] = (int32_t)strtol(text, &end, 10);
    text = *end == ',' ? end + 1 : end;
    if (end == text && *text) break;
  }
  return n;
}

/* Streaming: the text pieces and the ids the callback saw; cancels after `stop_after` tokens
 * (0: never). */
/* This process's resident memory in bytes (/proc/self/statm), -1 when unreadable. */
static long residentBytes(void) {
  FILE* f = fopen("/proc/self/statm", "r");
  long pages = -1, resident = -1;
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

/* Whether a result holds exactly these ids. */
static int hasIds(const llmc_generation_result* result, const int32_t* ids, size_t count) {
  return llmc_generation_result_token_count(result) == count &&
         memcmp(llmc_generation_result_tokens(result), ids, count * sizeof(int32_t)) == 0;
}

typedef struct {
  char text[4096];
  size_t length;
  int32_t ids[256];
  size_t count;
  size_t stop_after;
} Stream;

static int onToken(int32_t token, const char* text, size_t length, void* user) {
  Stream* s = (Stream*)user;
  if (s->count < 256) s->ids[s->count] = token;
  ++s->count;
  if (text && s->length + length < sizeof(s->text)) {
    memcpy(s->text + s->length, text, length);
    s->length += length;
    s->text[s->length] = '\0';
  }
  return s->stop_after == 0 || s->count < s->stop_after;
}

/* Cancellation from another thread: the worker's callback holds the first token until the main
 * thread has called llmc_generator_cancel, so the generation ends on the next token. */
typedef struct {
  llmc_generator* generator;
  const int32_t* prompt;
  size_t prompt_length;
  atomic_int started;
  atomic_int cancel_sent;
  llmc_status* status;
  llmc_generation_result* result;
} Worker;

static int holdFirstToken(int32_t token, const char* text, size_t length, void* user) {
  Worker* w = (Worker*)user;
  (void)token, (void)text, (void)length;
  if (!atomic_exchange(&w->started, 1)) {
    struct timespec pause = {0, 1000000};
    while (!atomic_load(&w->cancel_sent)) nanosleep(&pause, NULL);
  }
  return 1;
}

static void* runWorker(void* arg) {
  Worker* w = (Worker*)arg;
  llmc_generation_options options = llmc_generation_options_default();
  options.max_new_tokens = 64;
  w->status = llmc_generator_generate(w->generator, w->prompt, w->prompt_length, &options,
                                      holdFirstToken, w, &w->result);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s ENGINE TOKENIZER_JSON PROMPT_IDS EXPECTED_IDS\n", argv[0]);
    return 2;
  }
  int32_t prompt[64], expected[256];
  size_t prompt_length = parseIds(argv[3], prompt, 64);
  size_t expected_length = parseIds(argv[4], expected, 256);
  check(prompt_length > 0 && expected_length > 0, "the prompt and expected ids parse");
  check(llmc_api_version() == LLMC_C_API_VERSION && strlen(llmc_version()) > 0,
        "library and header agree on the C API version");

  /* Errors on loading: a missing file, bytes that are not an engine, NULL arguments. */
  llmc_engine* engine = NULL;
  checkError(llmc_engine_load("/nonexistent/model.engine", &engine), LLMC_NOT_FOUND,
             "/nonexistent/model.engine", "a missing engine file: NOT_FOUND naming the path");
  check(engine == NULL, "a failed load writes no engine");
  const char garbage[] = "this is not an engine file, not at all";
  checkError(llmc_engine_load_from_memory(garbage, sizeof(garbage), &engine), LLMC_DATA_LOSS, "",
             "bytes that are not an engine: DATA_LOSS");
  checkError(llmc_engine_load(NULL, &engine), LLMC_INVALID_ARGUMENT, "path is NULL",
             "a NULL path: INVALID_ARGUMENT");

  require(llmc_engine_load(argv[1], &engine), "load the engine");
  size_t inputs = llmc_engine_input_count(engine), outputs = llmc_engine_output_count(engine);
  llmc_tensor_info info;
  int has_ids = 0;
  for (size_t i = 0; i < inputs; ++i) {
    require(llmc_engine_input(engine, i, &info), "input info");
    if (strcmp(info.name, "input_ids") == 0)
      has_ids = info.dtype == LLMC_DTYPE_INT64 && info.rank == 2 && info.dims[1] == -1 &&
                info.dim_symbols[1][0] != '\0';
  }
  check(has_ids, "input_ids: int64 [batch, seq], seq symbolic and named");
  require(llmc_engine_output(engine, 0, &info), "output info");
  check(outputs >= 1 && strcmp(info.name, "logits") == 0 && info.dtype == LLMC_DTYPE_FLOAT32 &&
            info.rank == 3,
        "the first output: float32 logits [batch, seq, vocab]");
  checkError(llmc_engine_input(engine, inputs, &info), LLMC_OUT_OF_RANGE, "inputs",
             "an input index past the count: OUT_OF_RANGE");
  check(strcmp(llmc_engine_metadata(engine, "target"), "cpu") == 0 &&
            strlen(llmc_engine_metadata(engine, "tokenizer_json")) > 0 &&
            llmc_engine_metadata(engine, "no such key") == NULL,
        "metadata: the target, the tokenizer, NULL for an unknown key");
  llmc_language_model lm;
  check(llmc_engine_language_model(engine, &lm) == 1 && lm.num_layers > 0 && lm.max_context > 0,
        "a decoder language model over the KV cache");

  /* A session run: its last position's argmax is the generator's first greedy token. */
  llmc_session* session = NULL;
  llmc_session_options session_options = llmc_session_options_default();
  session_options.threads = 2;
  require(llmc_session_create(engine, &session_options, &session), "create a session");
  int64_t ids64[64], mask[64], positions[64];
  int64_t shape[2] = {1, (int64_t)prompt_length};
  llmc_tensor feeds[3];
  size_t feed_count = 0;
  for (size_t i = 0; i < prompt_length; ++i)
    ids64[i] = prompt[i], mask[i] = 1, positions[i] = (int64_t)i;
  for (size_t i = 0; i < inputs; ++i) {
    require(llmc_engine_input(engine, i, &info), "input info");
    const void* data = strcmp(info.name, "input_ids") == 0        ? (const void*)ids64
                       : strcmp(info.name, "attention_mask") == 0 ? (const void*)mask
                       : strcmp(info.name, "position_ids") == 0   ? (const void*)positions
                                                                  : NULL;
    if (!data || feed_count == 3) {
      printf("FAIL an input the test does not know: %s\n", info.name);
      return 1;
    }
    feeds[feed_count++] = (llmc_tensor){info.name, LLMC_DTYPE_INT64, 2, shape, data};
  }
  llmc_outputs* results = NULL;
  require(llmc_session_run(session, feeds, feed_count, &results), "run the session");
  llmc_tensor logits;
  require(llmc_outputs_get(results, 0, &logits), "the logits");
  int64_t vocab = logits.shape[2];
  const float* last = (const float*)logits.data + (prompt_length - 1) * vocab;
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; ++v)
    if (last[v] > last[best]) best = v;
  check(llmc_outputs_count(results) == outputs && logits.rank == 3 &&
            logits.shape[1] == (int64_t)prompt_length,
        "the outputs: one per engine output, logits [1, prompt, vocab]");
  check(best == expected[0], "the session's last argmax is the first token llmc generate chose");
  llmc_outputs_free(results);
  checkError(llmc_session_run(session, feeds, feed_count - 1, &results), LLMC_INVALID_ARGUMENT,
             feeds[feed_count - 1].name, "a run missing an input: INVALID_ARGUMENT naming it");
  llmc_tensor bad = feeds[0];
  bad.dtype = (llmc_dtype)99;
  checkError(llmc_session_run(session, &bad, 1, &results), LLMC_INVALID_ARGUMENT, "unknown dtype",
             "an input of an unknown dtype: INVALID_ARGUMENT");
  llmc_session_options wrong = session_options;
  wrong.struct_size = 1;
  llmc_session* never = NULL;
  checkError(llmc_session_create(engine, &wrong, &never), LLMC_INVALID_ARGUMENT, "struct_size",
             "options with a wrong struct_size: INVALID_ARGUMENT");
  wrong = session_options;
  wrong.backend = (llmc_backend)7;
  checkError(llmc_session_create(engine, &wrong, &never), LLMC_INVALID_ARGUMENT, "unknown backend 7",
             "an unknown backend: INVALID_ARGUMENT");
  check(llmc_dtype_size(LLMC_DTYPE_INT64) == 8 && llmc_dtype_size((llmc_dtype)99) == 0,
        "dtype sizes; 0 for an unknown dtype");
  llmc_session_free(session);

  /* The tokenizer: the engine's and the file's encode alike; decode inverts encode. */
  llmc_tokenizer *own = NULL, *file = NULL;
  require(llmc_tokenizer_from_engine(engine, &own), "the engine's tokenizer");
  require(llmc_tokenizer_load(argv[2], &file), "the tokenizer file");
  const char* sentence = "In the beginning God created the heaven and the earth.";
  int32_t *a = NULL, *b = NULL;
  size_t na = 0, nb = 0;
  require(llmc_tokenizer_encode(own, sentence, strlen(sentence), 0, &a, &na), "encode");
  require(llmc_tokenizer_encode(file, sentence, strlen(sentence), 0, &b, &nb), "encode");
  check(na > 0 && na == nb && memcmp(a, b, na * sizeof(int32_t)) == 0,
        "the engine's tokenizer encodes as the tokenizer file does");
  char* decoded = NULL;
  require(llmc_tokenizer_decode(own, a, na, 1, &decoded), "decode");
  check(strcmp(decoded, sentence) == 0, "decode(encode(text)) is the text");
  llmc_free(decoded);
  llmc_free(a);
  llmc_free(b);
  check(llmc_tokenizer_vocab_size(own) > 0 &&
            llmc_tokenizer_token_to_id(own, "no-such-token-here") == -1,
        "vocabulary size; -1 for an unknown token");
  int32_t out_of_vocab = llmc_tokenizer_vocab_size(own) + 1000;
  checkError(llmc_tokenizer_decode(own, &out_of_vocab, 1, 0, &decoded), LLMC_OUT_OF_RANGE,
             "not in the vocabulary",
             "decoding an id outside the vocabulary: OUT_OF_RANGE naming it");
  llmc_tokenizer_free(file);

  /* Generation: the ids `llmc generate` printed, streamed text equal to the result's. */
  llmc_generator* generator = NULL;
  require(llmc_generator_create(engine, NULL, &generator), "create a generator");
  check(llmc_generator_uses_kv_cache(generator) == 1, "the generator runs over the KV cache");
  llmc_generation_options options = llmc_generation_options_default();
  options.max_new_tokens = 12;
  Stream stream = {{0}, 0, {0}, 0, 0};
  llmc_generation_result* result = NULL;
  require(llmc_generator_generate(generator, prompt, prompt_length, &options, onToken, &stream,
                                  &result),
          "generate");
  size_t count = llmc_generation_result_token_count(result);
  const int32_t* tokens = llmc_generation_result_tokens(result);
  int same = count == expected_length && memcmp(tokens, expected, count * sizeof(int32_t)) == 0;
  if (!same) {
    printf("  got");
    for (size_t i = 0; i < count; ++i) printf(" %d", tokens[i]);
    printf("\n");
  }
  check(same, "greedy generation gives the ids llmc generate printed");
  check(stream.count == count && memcmp(stream.ids, tokens, count * sizeof(int32_t)) == 0,
        "the callback saw every token in order");
  check(strcmp(stream.text, llmc_generation_result_text(result)) == 0 && stream.length > 0,
        "the streamed text is the result's text");
  check(llmc_generation_result_finish_reason(result) ==
            (count < 12 ? LLMC_FINISH_STOP_TOKEN : LLMC_FINISH_LENGTH),
        "finish reason: length, or a stop token before it");
  llmc_generation_result_free(result);

  /* Cancellation by the callback: CANCELLED, and the tokens so far. */
  Stream three = {{0}, 0, {0}, 0, 3};
  result = NULL;
  llmc_status* status =
      llmc_generator_generate(generator, prompt, prompt_length, &options, onToken, &three, &result);
  check(llmc_status_code(status) == LLMC_CANCELLED && result != NULL &&
            llmc_generation_result_token_count(result) == 3 &&
            llmc_generation_result_finish_reason(result) == LLMC_FINISH_CANCELLED &&
            memcmp(llmc_generation_result_tokens(result), expected, 3 * sizeof(int32_t)) == 0,
        "a callback returning 0 cancels: CANCELLED with the first 3 tokens");
  llmc_status_free(status);
  llmc_generation_result_free(result);

  /* Cancellation from another thread. */
  Worker worker = {generator, prompt, prompt_length, 0, 0, NULL, NULL};
  pthread_t thread;
  pthread_create(&thread, NULL, runWorker, &worker);
  struct timespec pause = {0, 1000000};
  while (!atomic_load(&worker.started)) nanosleep(&pause, NULL);
  llmc_generator_cancel(generator);
  atomic_store(&worker.cancel_sent, 1);
  pthread_join(thread, NULL);
  check(llmc_status_code(worker.status) == LLMC_CANCELLED && worker.result != NULL &&
            llmc_generation_result_token_count(worker.result) == 2,
        "llmc_generator_cancel from another thread ends the generation on its next token");
  llmc_status_free(worker.status);
  llmc_generation_result_free(worker.result);

  /* The same generator after all that, from text. */
  Stream text_stream = {{0}, 0, {0}, 0, 0};
  result = NULL;
  require(llmc_generator_generate_text(generator, "And God said", &options, onToken, &text_stream,
                                       &result),
          "generate from text");
  decoded = NULL;
  require(llmc_tokenizer_decode(own, llmc_generation_result_tokens(result),
                                llmc_generation_result_token_count(result), 1, &decoded),
          "decode the result");
  check(llmc_generation_result_token_count(result) > 0 &&
            strcmp(decoded, llmc_generation_result_text(result)) == 0,
        "generation from text: the result's text decodes its tokens");
  llmc_free(decoded);
  llmc_generation_result_free(result);

  /* Generation errors: the generator stays usable after each. */
  result = NULL;
  checkError(llmc_generator_generate(generator, prompt, 0, &options, NULL, NULL, &result),
             LLMC_INVALID_ARGUMENT, "", "an empty prompt: INVALID_ARGUMENT");
  int32_t outside = (int32_t)vocab + 5;
  checkError(llmc_generator_generate(generator, &outside, 1, &options, NULL, NULL, &result),
             LLMC_INVALID_ARGUMENT, "", "a prompt id outside the vocabulary: INVALID_ARGUMENT");
  llmc_generation_options too_small = options;
  too_small.struct_size = 8;
  checkError(
      llmc_generator_generate(generator, prompt, prompt_length, &too_small, NULL, NULL, &result),
      LLMC_INVALID_ARGUMENT, "struct_size", "generation options with a wrong struct_size");
  llmc_generation_options hot = options;
  hot.temperature = -1;
  checkError(llmc_generator_generate(generator, prompt, prompt_length, &hot, NULL, NULL, &result),
             LLMC_INVALID_ARGUMENT, "", "a negative temperature: INVALID_ARGUMENT");
  check(result == NULL, "failed generations write no result");
  require(llmc_generator_generate(generator, prompt, prompt_length, &options, NULL, NULL, &result),
          "generate after the errors");
  check(llmc_generation_result_token_count(result) == expected_length &&
            memcmp(llmc_generation_result_tokens(result), expected,
                   expected_length * sizeof(int32_t)) == 0,
        "after the errors the generator gives the same ids");
  llmc_generation_result_free(result);

  llmc_generator_free(generator);

  /* Generator options added after the first release (kv_cache_dtype, kv_cache_prefault): taken
   * when set, refused with a message when wrong, and their defaults for a caller whose
   * struct_size ends before them. A prefaulted cache of 8,192 tokens is resident at creation; a
   * lazy one is not. */
  llmc_generator_options cache_options = llmc_generator_options_default();
  cache_options.kv_cache_tokens = 8192;
  long before = residentBytes();
  llmc_generator* lazy = NULL;
  require(llmc_generator_create(engine, &cache_options, &lazy), "create a lazy generator");
  const long lazy_growth = residentBytes() - before;
  cache_options.kv_cache_prefault = 1;
  before = residentBytes();
  llmc_generator* eager = NULL;
  require(llmc_generator_create(engine, &cache_options, &eager), "create a prefaulted generator");
  const long eager_growth = residentBytes() - before;
  printf("  resident growth at creation: lazy %ld KiB, prefaulted %ld KiB\n", lazy_growth / 1024,
         eager_growth / 1024);
  check(eager_growth >= 12L << 20 && lazy_growth < eager_growth / 4,
        "kv_cache_prefault = 1 writes the cache's pages at creation; 0 does not");
  result = NULL;
  require(llmc_generator_generate(eager, prompt, prompt_length, &options, NULL, NULL, &result),
          "generate over the prefaulted cache");
  check(hasIds(result, expected, expected_length), "a prefaulted cache gives the same ids");
  llmc_generation_result_free(result);
  llmc_generator_free(eager);
  llmc_generator_free(lazy);
  cache_options = llmc_generator_options_default();
  cache_options.kv_cache_dtype = "f16";
  llmc_generator* half = NULL;
  require(llmc_generator_create(engine, &cache_options, &half), "create a float16-cache generator");
  result = NULL;
  require(llmc_generator_generate(half, prompt, prompt_length, &options, NULL, NULL, &result),
          "generate over a float16 cache");
  check(llmc_generation_result_token_count(result) > 0, "a float16 cache generates");
  llmc_generation_result_free(result);
  llmc_generator_free(half);
  cache_options.kv_cache_dtype = "f64";
  llmc_generator* none = NULL;
  checkError(llmc_generator_create(engine, &cache_options, &none), LLMC_INVALID_ARGUMENT,
             "kv_cache_dtype takes auto, f32, f16, bf16, int8 or fp8, got 'f64'",
             "an unknown kv_cache_dtype: INVALID_ARGUMENT naming it");
  check(none == NULL, "a refused generator is not written");
  /* A struct from the first release's header (it ended after kv_cache_tokens), with garbage
   * where the later fields would be: they keep their defaults. */
  cache_options.kv_cache_prefault = 1;
  cache_options.struct_size = offsetof(llmc_generator_options, kv_cache_dtype);
  before = residentBytes();
  require(llmc_generator_create(engine, &cache_options, &none),
          "create a generator from a first-release struct");
  check(residentBytes() - before < eager_growth / 4,
        "fields past a first-release struct_size are not read (the cache stays lazy)");
  result = NULL;
  require(llmc_generator_generate(none, prompt, prompt_length, &options, NULL, NULL, &result),
          "generate from a first-release struct");
  check(hasIds(result, expected, expected_length),
        "a first-release struct gives the default float32 cache's ids");
  llmc_generation_result_free(result);
  llmc_generator_free(none);
  cache_options.struct_size = offsetof(llmc_generator_options, kv_cache_tokens);
  checkError(llmc_generator_create(engine, &cache_options, &none), LLMC_INVALID_ARGUMENT,
             "struct_size", "generator options smaller than the first release's: refused");

  llmc_tokenizer_free(own);
  llmc_engine_free(engine);
  /* Freeing NULL is allowed. */
  llmc_engine_free(NULL);
  llmc_session_free(NULL);
  llmc_generator_free(NULL);
  llmc_tokenizer_free(NULL);
  llmc_outputs_free(NULL);
  llmc_generation_result_free(NULL);
  llmc_status_free(NULL);
  llmc_free(NULL);

  printf(failures ? "%d C API check(s) failed\n" : "all C API checks passed\n", failures);
  return failures ? 1 : 0;
}
