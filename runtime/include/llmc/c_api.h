/* llmc's C API: the runtime (engines, sessions, generation, tokenizers) for C and for languages
 * that bind C (Rust, Go, C#, Java, Python's ctypes). docs/c-api.md shows it in use.
 *
 * Conventions:
 * - Every fallible call returns an llmc_status*: NULL on success, otherwise an error the caller
 *   owns and frees with llmc_status_free (its code and message say what failed and where).
 *   Outputs are written only on success (a cancelled generation writes its partial result).
 * - Objects (llmc_engine, llmc_session, ...) are opaque; each has a _free function that
 *   accepts NULL. Strings are UTF-8 and NUL-terminated unless a length is given; arrays the
 *   API allocates for the caller are freed with llmc_free.
 * - No C++ exception and no abort crosses this API.
 * - Threads: an engine and a tokenizer may be used from any number of threads at once; a
 *   session or generator by one thread at a time (llmc_generator_cancel excepted: any
 *   thread, any time). One session or generator per thread runs in parallel.
 * - Option structs begin with struct_size: take them from the _default() functions, so that a
 *   program built against this header keeps working with a later library that adds fields.
 */
#ifndef LLMC_C_API_H_
#define LLMC_C_API_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define LLMC_C_EXPORT __attribute__((visibility("default")))
#else
#define LLMC_C_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header's API; llmc_api_version() gives the library's. 2: the generator
 * options' kv_cache_dtype and kv_cache_prefault (a library of version 1 ignores them). */
#define LLMC_C_API_VERSION 2

/* ----- Status ----- */

typedef enum llmc_code {
  LLMC_OK = 0,
  LLMC_INVALID_ARGUMENT = 1,    /* bad input from the caller: shapes, names, options */
  LLMC_NOT_FOUND = 2,           /* a file, tensor or kernel that does not exist */
  LLMC_OUT_OF_RANGE = 3,        /* a dimension outside its declared range, an index */
  LLMC_UNIMPLEMENTED = 4,       /* a kernel, dtype or feature llmc does not have */
  LLMC_DATA_LOSS = 5,           /* a corrupted or truncated file */
  LLMC_FAILED_PRECONDITION = 6, /* e.g. an engine format this library cannot read */
  LLMC_RESOURCE_EXHAUSTED = 7,  /* out of memory, KV cache full */
  LLMC_INTERNAL = 8,            /* a broken invariant of llmc itself */
  LLMC_UNAVAILABLE = 9,
  LLMC_CANCELLED = 10 /* the caller stopped the operation */
} llmc_code;

typedef struct llmc_status llmc_status;

/* LLMC_OK and "" for NULL (success). */
LLMC_C_EXPORT llmc_code llmc_status_code(const llmc_status* status);
LLMC_C_EXPORT const char* llmc_status_message(const llmc_status* status);
/* "INVALID_ARGUMENT", ... */
LLMC_C_EXPORT const char* llmc_code_name(llmc_code code);
LLMC_C_EXPORT void llmc_status_free(llmc_status* status);

/* The library's version ("0.1.0") and C API version (LLMC_C_API_VERSION it was built with). */
LLMC_C_EXPORT const char* llmc_version(void);
LLMC_C_EXPORT int llmc_api_version(void);

/* Frees an array or string the API allocated for the caller (NULL: nothing). */
LLMC_C_EXPORT void llmc_free(void* p);

/* ----- Tensors ----- */

typedef enum llmc_dtype {
  LLMC_DTYPE_UNDEFINED = 0,
  LLMC_DTYPE_FLOAT32 = 1,
  LLMC_DTYPE_UINT8 = 2,
  LLMC_DTYPE_INT8 = 3,
  LLMC_DTYPE_UINT16 = 4,
  LLMC_DTYPE_INT16 = 5,
  LLMC_DTYPE_INT32 = 6,
  LLMC_DTYPE_INT64 = 7,
  LLMC_DTYPE_BOOL = 9,
  LLMC_DTYPE_FLOAT16 = 10,
  LLMC_DTYPE_FLOAT64 = 11,
  LLMC_DTYPE_UINT32 = 12,
  LLMC_DTYPE_UINT64 = 13,
  LLMC_DTYPE_BFLOAT16 = 16
} llmc_dtype;

/* Bytes per element; 0 for LLMC_DTYPE_UNDEFINED or an unknown value. */
LLMC_C_EXPORT size_t llmc_dtype_size(llmc_dtype dtype);

/* A dense row-major tensor: inputs the caller owns (read, not copied, during a run), or
 * outputs the library owns (see llmc_outputs_get). */
typedef struct llmc_tensor {
  const char* name;
  llmc_dtype dtype;
  size_t rank;
  const int64_t* shape;
  const void* data;
} llmc_tensor;

/* ----- Engines ----- */

typedef struct llmc_engine llmc_engine;

/* Loads and verifies an engine file (llmc compile's output); the engine is immutable. */
LLMC_C_EXPORT llmc_status* llmc_engine_load(const char* path, llmc_engine** out);
/* The same from bytes in memory (copied: the caller's buffer may go after the call). */
LLMC_C_EXPORT llmc_status* llmc_engine_load_from_memory(const void* data, size_t size,
                                                        llmc_engine** out);
LLMC_C_EXPORT void llmc_engine_free(llmc_engine* engine);

/* A declared input or output. dims[i] is -1 where the dimension is symbolic, and
 * dim_symbols[i] its symbol's name ("" where fixed). Valid while the engine lives. */
typedef struct llmc_tensor_info {
  const char* name;
  llmc_dtype dtype;
  size_t rank;
  const int64_t* dims;
  const char* const* dim_symbols;
} llmc_tensor_info;

LLMC_C_EXPORT size_t llmc_engine_input_count(const llmc_engine* engine);
LLMC_C_EXPORT size_t llmc_engine_output_count(const llmc_engine* engine);
/* LLMC_OUT_OF_RANGE past the count. */
LLMC_C_EXPORT llmc_status* llmc_engine_input(const llmc_engine* engine, size_t index,
                                             llmc_tensor_info* out);
LLMC_C_EXPORT llmc_status* llmc_engine_output(const llmc_engine* engine, size_t index,
                                              llmc_tensor_info* out);
/* What the engine records: "target", "compiler_version", "build_options", "source_hash",
 * "tokenizer_json", "tokenizer_config_json", "generation_config_json" ("" when absent); NULL
 * for any other key. Valid while the engine lives. */
LLMC_C_EXPORT const char* llmc_engine_metadata(const llmc_engine* engine, const char* key);
/* A decoder language model over the paged KV cache: its layers, heads and context (all 0 when
 * the engine is not one: llmc_engine_language_model returns 0). */
typedef struct llmc_language_model {
  int32_t num_layers;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int64_t vocab_size; /* -1: symbolic */
  int64_t max_context;
  int32_t bos_token_id; /* -1: none */
} llmc_language_model;
LLMC_C_EXPORT int llmc_engine_language_model(const llmc_engine* engine, llmc_language_model* out);

/* ----- Sessions ----- */

typedef enum llmc_backend {
  LLMC_BACKEND_AUTO = 0, /* the engine's target */
  LLMC_BACKEND_CPU = 1,
  LLMC_BACKEND_CUDA = 2
} llmc_backend;

typedef struct llmc_session_options {
  size_t struct_size;
  llmc_backend backend;
  /* CPU threads, the caller's included; 0: the physical cores this process may use. */
  int threads;
} llmc_session_options;
LLMC_C_EXPORT llmc_session_options llmc_session_options_default(void);

typedef struct llmc_session llmc_session;
typedef struct llmc_outputs llmc_outputs;

/* options NULL: the defaults. The session keeps the engine alive. */
LLMC_C_EXPORT llmc_status* llmc_session_create(const llmc_engine* engine,
                                               const llmc_session_options* options,
                                               llmc_session** out);
LLMC_C_EXPORT void llmc_session_free(llmc_session* session);
/* Binds each engine input by name (every input exactly once), runs, and returns the outputs
 * in engine order. */
LLMC_C_EXPORT llmc_status* llmc_session_run(llmc_session* session, const llmc_tensor* inputs,
                                            size_t input_count, llmc_outputs** out);
LLMC_C_EXPORT size_t llmc_outputs_count(const llmc_outputs* outputs);
/* The output's name, dtype, shape and data: valid until llmc_outputs_free. */
LLMC_C_EXPORT llmc_status* llmc_outputs_get(const llmc_outputs* outputs, size_t index,
                                            llmc_tensor* out);
LLMC_C_EXPORT void llmc_outputs_free(llmc_outputs* outputs);

/* ----- Tokenizers ----- */

typedef struct llmc_tokenizer llmc_tokenizer;

/* A Hugging Face tokenizer.json file. */
LLMC_C_EXPORT llmc_status* llmc_tokenizer_load(const char* path, llmc_tokenizer** out);
/* The tokenizer an engine carries (llmc compile --tokenizer); LLMC_NOT_FOUND when none. */
LLMC_C_EXPORT llmc_status* llmc_tokenizer_from_engine(const llmc_engine* engine,
                                                      llmc_tokenizer** out);
LLMC_C_EXPORT void llmc_tokenizer_free(llmc_tokenizer* tokenizer);
/* `text` of `length` bytes (valid UTF-8); *ids (llmc_free) gets *count ids. With
 * add_special_tokens, the tokenizer's BOS / [CLS] ... are added as its post-processor says. */
LLMC_C_EXPORT llmc_status* llmc_tokenizer_encode(const llmc_tokenizer* tokenizer, const char* text,
                                                 size_t length, int add_special_tokens,
                                                 int32_t** ids, size_t* count);
/* *text (llmc_free) gets the NUL-terminated text of `count` ids. */
LLMC_C_EXPORT llmc_status* llmc_tokenizer_decode(const llmc_tokenizer* tokenizer,
                                                 const int32_t* ids, size_t count,
                                                 int skip_special_tokens, char** text);
/* -1 when absent. */
LLMC_C_EXPORT int32_t llmc_tokenizer_token_to_id(const llmc_tokenizer* tokenizer,
                                                 const char* token);
LLMC_C_EXPORT int32_t llmc_tokenizer_vocab_size(const llmc_tokenizer* tokenizer);
/* -1 when the tokenizer names none. */
LLMC_C_EXPORT int32_t llmc_tokenizer_eos_id(const llmc_tokenizer* tokenizer);
LLMC_C_EXPORT int32_t llmc_tokenizer_bos_id(const llmc_tokenizer* tokenizer);

/* ----- Generation ----- */

typedef struct llmc_generator_options {
  size_t struct_size;
  llmc_session_options session;
  int use_kv_cache;        /* 0: full recomputation even on a language-model engine */
  int64_t kv_cache_tokens; /* 0: 4 x the engine's context, at most 1 GiB */
  /* Fields added after the first release: a caller whose struct_size ends before one gets its
   * default. */
  /* NULL or "auto" (the default: the engine's choice, float16 for an engine with quantized
   * weights and float32 otherwise; float32 before 2026-12-07), "f32", "f16", "bf16", "int8",
   * "fp8" */
  const char* kv_cache_dtype;
  int kv_cache_prefault;      /* 1: every page of the cache written at creation (default 0) */
} llmc_generator_options;
LLMC_C_EXPORT llmc_generator_options llmc_generator_options_default(void);

typedef struct llmc_generation_options {
  size_t struct_size;
  int32_t max_new_tokens;   /* default 32 */
  float temperature;        /* 0: greedy (the default) */
  int32_t top_k;            /* 0: off */
  float top_p;              /* 1: off */
  float min_p;              /* 0: off */
  float repetition_penalty; /* 1: off */
  uint64_t seed;
  /* Generation ends after one of these ids; with none given, the engine's EOS ids. */
  const int32_t* stop_token_ids;
  size_t stop_token_count;
} llmc_generation_options;
LLMC_C_EXPORT llmc_generation_options llmc_generation_options_default(void);

typedef enum llmc_finish_reason {
  LLMC_FINISH_LENGTH = 0,
  LLMC_FINISH_STOP_TOKEN = 1,
  LLMC_FINISH_STOP_STRING = 2,
  LLMC_FINISH_CANCELLED = 3
} llmc_finish_reason;

/* Called after each new token with the text it completes (streaming decode with the
 * generator's tokenizer: possibly empty, e.g. inside a multi-byte character; NULL and 0 without
 * a tokenizer). Return 0 to cancel: the generation then ends with LLMC_CANCELLED and its
 * result holds the tokens so far. Runs on the thread that called llmc_generator_generate. */
typedef int (*llmc_token_callback)(int32_t token, const char* text, size_t text_length,
                                   void* user_data);

typedef struct llmc_generator llmc_generator;
typedef struct llmc_generation_result llmc_generation_result;

/* options NULL: the defaults. The generator uses the engine's own tokenizer, if any. */
LLMC_C_EXPORT llmc_status* llmc_generator_create(const llmc_engine* engine,
                                                 const llmc_generator_options* options,
                                                 llmc_generator** out);
LLMC_C_EXPORT void llmc_generator_free(llmc_generator* generator);
/* 1 when it runs over the paged KV cache, 0 by full recomputation. */
LLMC_C_EXPORT int llmc_generator_uses_kv_cache(const llmc_generator* generator);
/* Generates after the prompt's ids. options NULL: the defaults; callback may be NULL. On
 * success, and on cancellation (the status LLMC_CANCELLED), *result gets what was generated;
 * free it with llmc_generation_result_free. */
LLMC_C_EXPORT llmc_status* llmc_generator_generate(llmc_generator* generator, const int32_t* prompt,
                                                   size_t prompt_length,
                                                   const llmc_generation_options* options,
                                                   llmc_token_callback callback, void* user_data,
                                                   llmc_generation_result** result);
/* The same after a text prompt, encoded with the generator's tokenizer (special tokens
 * added); LLMC_FAILED_PRECONDITION when it has none. */
LLMC_C_EXPORT llmc_status* llmc_generator_generate_text(
    llmc_generator* generator, const char* prompt, const llmc_generation_options* options,
    llmc_token_callback callback, void* user_data, llmc_generation_result** result);
/* Ends the generator's current (or next) generation after its next token, as a callback
 * returning 0 would: safe from any thread, any time. */
LLMC_C_EXPORT void llmc_generator_cancel(llmc_generator* generator);

LLMC_C_EXPORT size_t llmc_generation_result_token_count(const llmc_generation_result* result);
/* The new tokens (the prompt excluded); valid until the result is freed. */
LLMC_C_EXPORT const int32_t* llmc_generation_result_tokens(const llmc_generation_result* result);
/* Their text when the generator has a tokenizer, else "". */
LLMC_C_EXPORT const char* llmc_generation_result_text(const llmc_generation_result* result);
LLMC_C_EXPORT llmc_finish_reason
llmc_generation_result_finish_reason(const llmc_generation_result* result);
LLMC_C_EXPORT void llmc_generation_result_free(llmc_generation_result* result);

#ifdef __cplusplus
}
#endif

#endif /* LLMC_C_API_H_ */
