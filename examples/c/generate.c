/* Text generation from C through llmc's C API (llmc/c_api.h): load an engine compiled with its
 * tokenizer, stream the text of each new token as it comes. Prints what `llmc generate ENGINE
 * --prompt TEXT --max-new-tokens N` prints.
 *
 *   llmc_c_generate ENGINE PROMPT [MAX_NEW_TOKENS]
 *
 * Built with the project, or against an installed llmc:
 *   cc generate.c $(pkg-config --cflags --libs llmc) -o llmc_c_generate */
#include <stdio.h>
#include <stdlib.h>

#include "llmc/c_api.h"

static int printPiece(int32_t token, const char* text, size_t length, void* user) {
  (void)token, (void)user;
  fwrite(text, 1, length, stdout);
  fflush(stdout);
  return 1; /* 0 would cancel */
}

static int fail(llmc_status* status, const char* what) {
  fprintf(stderr, "%s: %s: %s\n", what, llmc_code_name(llmc_status_code(status)),
          llmc_status_message(status));
  llmc_status_free(status);
  return 1;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s ENGINE PROMPT [MAX_NEW_TOKENS]\n", argv[0]);
    return 2;
  }
  llmc_engine* engine = NULL;
  llmc_status* status = llmc_engine_load(argv[1], &engine);
  if (status) return fail(status, "load");
  llmc_generator* generator = NULL;
  status = llmc_generator_create(engine, NULL, &generator);
  if (status) return fail(status, "generator");
  llmc_generation_options options = llmc_generation_options_default();
  options.max_new_tokens = argc > 3 ? atoi(argv[3]) : 32;
  fputs(argv[2], stdout);
  llmc_generation_result* result = NULL;
  status = llmc_generator_generate_text(generator, argv[2], &options, printPiece, NULL, &result);
  if (status) return fail(status, "generate");
  fputs("\n", stdout);
  fprintf(stderr, "%zu new tokens\n", llmc_generation_result_token_count(result));
  llmc_generation_result_free(result);
  llmc_generator_free(generator);
  llmc_engine_free(engine);
  return 0;
}
