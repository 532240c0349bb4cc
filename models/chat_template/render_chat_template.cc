// render_chat_template: renders conversations through a tokenizer_config.json's
// chat template, for scripts and the jinja2 comparison test.
//
//   render_chat_template --tokenizer_config=PATH < cases.json > results.json
//   render_chat_template --raw < templates.json > results.json
//
// cases.json: [{"messages": [...], "tools": [...]|null, "add_generation_prompt":
// bool, "kwargs": {...}}, ...]; results.json: [{"text": "..."} | {"error": "..."}].
// --raw: templates.json: [{"template": "...", "variables": {...}}, ...]; a
// template that does not load gives {"load_error": "..."}.
// Exit 1 (with the reason on stderr) when the config's template does not load.
#include <iostream>
#include <iterator>
#include <string>

#include "absl/strings/match.h"
#include "models/chat_template/chat_template.h"
#include "nlohmann/json.hpp"

namespace {

nlohmann::ordered_json ReadStdinJson() {
  std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  return nlohmann::ordered_json::parse(input, nullptr, false);
}

void Print(const nlohmann::ordered_json& results) {
  std::cout << results.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)
            << "\n";
}

int RenderRaw() {
  nlohmann::ordered_json cases = ReadStdinJson();
  if (cases.is_discarded() || !cases.is_array()) {
    std::cerr << "stdin: expected a JSON array of templates\n";
    return 2;
  }
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const auto& c : cases) {
    auto loaded = expertd::chat_template::Template::Load(c.value("template", ""));
    if (!loaded.ok()) {
      results.push_back({{"load_error", std::string(loaded.status().message())}});
      continue;
    }
    auto rendered = loaded->Render(c.value("variables", nlohmann::ordered_json::object()));
    if (rendered.ok()) {
      results.push_back({{"text", *rendered}});
    } else {
      results.push_back({{"error", std::string(rendered.status().message())}});
    }
  }
  Print(results);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--raw") return RenderRaw();
    if (absl::StartsWith(arg, "--tokenizer_config=")) {
      config_path = arg.substr(std::string("--tokenizer_config=").size());
    } else {
      std::cerr << "unknown argument " << arg << "\n";
      return 2;
    }
  }
  if (config_path.empty()) {
    std::cerr << "usage: render_chat_template --tokenizer_config=PATH < cases.json\n";
    return 2;
  }
  std::string text;
  {
    std::FILE* f = std::fopen(config_path.c_str(), "rb");
    if (f == nullptr) {
      std::cerr << config_path << ": cannot open\n";
      return 1;
    }
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
    std::fclose(f);
  }
  auto formatter = expertd::chat_template::ChatFormatter::FromTokenizerConfig(text);
  if (!formatter.ok()) {
    std::cerr << config_path << ": " << formatter.status().message() << "\n";
    return 1;
  }
  nlohmann::ordered_json cases = ReadStdinJson();
  if (cases.is_discarded() || !cases.is_array()) {
    std::cerr << "stdin: expected a JSON array of cases\n";
    return 2;
  }
  nlohmann::ordered_json results = nlohmann::ordered_json::array();
  for (const auto& c : cases) {
    expertd::chat_template::ChatRequest request;
    request.messages = c.value("messages", nlohmann::ordered_json::array());
    request.tools = c.value("tools", nlohmann::ordered_json());
    request.add_generation_prompt = c.value("add_generation_prompt", false);
    request.extra = c.value("kwargs", nlohmann::ordered_json::object());
    absl::StatusOr<std::string> rendered = formatter->Render(request);
    if (rendered.ok()) {
      results.push_back({{"text", *rendered}});
    } else {
      results.push_back({{"error", std::string(rendered.status().message())}});
    }
  }
  Print(results);
  return 0;
}
