// Fuzz target: chat templates (serve/src/jinja.cpp) are untrusted input (a tokenizer_config.json
// from anywhere, or --chat-template). The input is a template; it is parsed and, when it
// parses, rendered with a fixed conversation. Any outcome but a crash, a hang or a sanitizer
// report is fine: errors are Statuses.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "jinja.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using llmc::serve::jinja::Template;
  using llmc::serve::jinja::Value;
  std::unique_ptr<Template> tmpl;
  if (!Template::parse(std::string_view(reinterpret_cast<const char*>(data), size), &tmpl).ok())
    return 0;
  static const char kContext[] =
      R"({"messages": [{"role": "system", "content": "Be brief."},)"
      R"( {"role": "user", "content": "Hi \u00e9"}, {"role": "assistant", "content": "Hello."}],)"
      R"( "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})";
  Value context;
  if (!llmc::serve::jinja::valueFromJson(kContext, &context).ok()) return 0;
  std::string out;
  (void)tmpl->render(context, &out, 1700000000);
  return 0;
}
