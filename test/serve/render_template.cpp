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
  auto cases = nlohmann::json::parse(buffer.str(), nullptr, false);
  if (cases.is_discarded() || !cases.is_array()) {
    std::fprintf(stderr, "%s: not a JSON list\n", argv[1]);
    return 2;
  }
  nlohmann::json results = nlohmann::json::array();
  for (const auto& c : cases) {
    using llmc::serve::jinja::Template;
    using llmc::serve::jinja::Value;
    std::unique_ptr<Template> tmpl;
    llmc::Status status = Template::parse(c.at("template").get<std::string>(), &tmpl);
    Value context;
    if (status.ok()) status = llmc::serve::jinja::valueFromJson(c.at("context").dump(), &context);
    std::string text;
    if (status.ok()) status = tmpl->render(context, &text, c.value("now", int64_t{0}));
    results.push_back(status.ok() ? nlohmann::json{{"text", text}}
                                  : nlohmann::json{{"error", status.message()}});
  }
  std::cout << results.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return 0;
}
