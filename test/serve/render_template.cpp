// Renders chat templates with llmc's Jinja subset (serve/src/jinja.h) for
// test/serve/chat_templates.py, which compares the output with jinja2's.
// Usage: llmc_render_template CASES.json: a list of {"template", "context", "now"}; prints a
// JSON list of {"text"} or {"error"} in the same order.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "jinja.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CASES.json\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  // Read as the server reads a request: objects keep their keys' order.
  using llmc::serve::jinja::Value;
  Value cases;
  if (!llmc::serve::jinja::valueFromJson(buffer.str(), &cases).ok() || !cases.isList()) {
    std::fprintf(stderr, "%s: not a JSON list\n", argv[1]);
    return 2;
  }
  nlohmann::json results = nlohmann::json::array();
  for (const Value& c : cases.asList()) {
    using llmc::serve::jinja::Template;
    const Value* source = c.find("template");
    const Value* context = c.find("context");
    const Value* now = c.find("now");
    if (!source || !source->isString() || !context) {
      std::fprintf(stderr, "%s: a case without a template or a context\n", argv[1]);
      return 2;
    }
    std::unique_ptr<Template> tmpl;
    llmc::Status status = Template::parse(source->asString(), &tmpl);
    std::string text;
    if (status.ok())
      status =
          tmpl->render(*context, &text, now && now->kind() == Value::Kind::kInt ? now->asInt() : 0);
    results.push_back(status.ok() ? nlohmann::json{{"text", text}}
                                  : nlohmann::json{{"error", status.message()}});
  }
  std::cout << results.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return 0;
}
