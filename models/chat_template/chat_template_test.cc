#include "models/chat_template/chat_template.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace expertd::chat_template {
namespace {

using json = nlohmann::ordered_json;

std::string RenderOrDie(const std::string& source, const json& variables) {
  absl::StatusOr<Template> t = Template::Load(source);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return "";
  absl::StatusOr<std::string> out = t->Render(variables);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : "";
}

TEST(TemplateTest, RendersChatMlWithTrimAndLstripBlocks) {
  const std::string source =
      "{% for m in messages %}\n"
      "    {{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}\n"
      "{% endfor %}\n"
      "{% if add_generation_prompt %}\n"
      "    {{- '<|im_start|>assistant\\n' }}\n"
      "{% endif %}\n";
  json vars = {{"messages", json::array({{{"role", "user"}, {"content", "hi"}}})},
               {"add_generation_prompt", true}};
  // `}}` is not a block tag: the newline after it stays (jinja2 does the same).
  EXPECT_EQ(RenderOrDie(source, vars),
            "<|im_start|>user\nhi<|im_end|>\n\n<|im_start|>assistant\n\n");
}

TEST(TemplateTest, UnsupportedConstructsFailAtLoadNamingThem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{% include 'other.jinja' %}", "{% include %}"},
      {"{% raw %}x{% endraw %}", "{% raw %}"},
      {"{{ x | wordwrap(3) }}", "filter 'wordwrap'"},
      {"{{ x is callable }}", "test 'callable'"},
      {"{{ lipsum() }}", "function 'lipsum'"},
      {"{{ x.update({}) }}", "method 'update'"},
      {"{% for x in y %}", "missing {% endfor %}"},
      {"{{ 'unterminated }}", "unterminated"},
      {"line1\n{{ 1 + }}", "line 2"},
  };
  for (const auto& [source, construct] : cases) {
    absl::StatusOr<Template> t = Template::Load(source);
    ASSERT_FALSE(t.ok()) << source;
    EXPECT_NE(t.status().message().find(construct), std::string::npos)
        << source << " -> " << t.status().message();
  }
}

TEST(TemplateTest, RaiseExceptionMessageIsVerbatim) {
  absl::StatusOr<Template> t = Template::Load(
      "{% if messages|length == 0 %}{{ raise_exception('No messages!') }}{% endif %}ok");
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::string> out = t->Render({{"messages", json::array()}});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out.status().message(), "No messages!");
}

TEST(TemplateTest, RuntimeErrorsNameTheLine) {
  absl::StatusOr<Template> t = Template::Load("a\nb\n{{ missing.attr }}");
  ASSERT_TRUE(t.ok());
  absl::StatusOr<std::string> out = t->Render(json::object());
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().message(), "chat template line 3: 'missing' is undefined");
}

TEST(TemplateTest, RunawayTemplatesAreBounded) {
  absl::StatusOr<Template> t =
      Template::Load("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->Render(json::object()).ok());
}

TEST(TemplateTest, ConcurrentRendersOfOneTemplateAgree) {
  absl::StatusOr<Template> t = Template::Load(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
      "{{ m }}{% endfor %}={{ ns.n }}");
  ASSERT_TRUE(t.ok());
  std::vector<std::thread> threads;
  std::vector<std::string> outputs(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      json messages = json::array();
      for (int k = 0; k <= i; ++k) messages.push_back(k);
      for (int round = 0; round < 200; ++round) {
        absl::StatusOr<std::string> out = t->Render({{"messages", messages}});
        outputs[i] = out.ok() ? *out : "error";
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int i = 0; i < 8; ++i) {
    std::string expected;
    for (int k = 0; k <= i; ++k) expected += std::to_string(k);
    EXPECT_EQ(outputs[i], expected + "=" + std::to_string(i + 1));
  }
}

TEST(ChatFormatterTest, ReadsTokensAndNamedTemplates) {
  const std::string config = R"({
    "bos_token": {"__type": "AddedToken", "content": "<s>"},
    "eos_token": "</s>",
    "chat_template": [
      {"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}{{ eos_token }}"},
      {"name": "tool_use", "template": "{{ bos_token }}tools={{ tools|length }}"}
    ]})";
  absl::StatusOr<ChatFormatter> f = ChatFormatter::FromTokenizerConfig(config);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE(f->has_template());
  EXPECT_EQ(f->bos_token(), "<s>");
  EXPECT_EQ(f->eos_token(), "</s>");
  ChatRequest request;
  request.messages = json::array({{{"role", "user"}, {"content", "x"}}});
  EXPECT_EQ(*f->Render(request), "<s>x</s>");
  request.tools = json::array({{{"type", "function"}}});
  EXPECT_EQ(*f->Render(request), "<s>tools=1");
}

TEST(ChatFormatterTest, MissingOrBrokenTemplates) {
  absl::StatusOr<ChatFormatter> none = ChatFormatter::FromTokenizerConfig(R"({"eos_token": "x"})");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_template());
  EXPECT_EQ(none->Render(ChatRequest{}).status().code(), absl::StatusCode::kFailedPrecondition);

  absl::StatusOr<ChatFormatter> broken =
      ChatFormatter::FromTokenizerConfig(R"({"chat_template": "{% include 'x' %}"})");
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("{% include %}"), std::string::npos);
  EXPECT_FALSE(ChatFormatter::FromTokenizerConfig("not json").ok());
  EXPECT_EQ(ChatFormatter::FromModelDir("/nonexistent").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ChatFormatterTest, OverrideTemplateReplacesAllAndChecksAtLoad) {
  absl::StatusOr<ChatFormatter> f = ChatFormatter::FromTokenizerConfig(R"({"bos_token": "<s>"})");
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->OverrideTemplate("{% call x() %}{% endcall %}").ok());
  EXPECT_FALSE(f->has_template());
  ASSERT_TRUE(f->OverrideTemplate("{{ bos_token }}{{ messages|length }}").ok());
  ChatRequest request;
  request.messages = json::array({1, 2});
  EXPECT_EQ(*f->Render(request), "<s>2");
}

TEST(ChatFormatterTest, KwargsReachTheTemplate) {
  absl::StatusOr<ChatFormatter> f = ChatFormatter::FromTokenizerConfig(
      R"({"chat_template": "{{ 'think' if enable_thinking is not defined or enable_thinking else 'no' }}"})");
  ASSERT_TRUE(f.ok());
  ChatRequest request;
  EXPECT_EQ(*f->Render(request), "think");
  request.extra = {{"enable_thinking", false}};
  EXPECT_EQ(*f->Render(request), "no");
}

}  // namespace
}  // namespace expertd::chat_template
