// Chat datasets through real chat templates (models/chat_template testdata)
// and the executor's renderer: the loss falls exactly on the assistant turns.
#include <memory>
#include <string>
#include <vector>

#include "base/env.h"
#include "base/memory_env.h"
#include "engine/train/dataset.h"
#include "engine/train/train_model.h"
#include "gtest/gtest.h"
#include "models/chat_template/chat_template.h"
#include "models/tokenizer/tokenizer.h"
#include "server/jobs/training_executor.h"

namespace expertd::server::jobs {
namespace {

const char kTokenizer[] = "tests/data/zoo/default_qwen3_moe/tokenizer.json";
const char kChat[] =
    R"({"messages": [{"role": "system", "content": "Be brief."},)"
    R"( {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},)"
    R"( {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Goodbye."}]})";

struct Learned {
  std::string whole, learned;
};

// stop_strings: what the model's generation config adds to the template's EOS.
Learned LoadChat(const std::string& template_dir, std::vector<std::string> stop_strings = {}) {
  auto config = ReadFileToString(Env::Default(), "models/chat_template/testdata/" + template_dir +
                                                     "/tokenizer_config.json");
  EXPECT_TRUE(config.ok()) << config.status();
  auto formatter = chat_template::ChatFormatter::FromTokenizerConfig(*config);
  EXPECT_TRUE(formatter.ok()) << formatter.status();
  auto tokenizer = models::Tokenizer::LoadFromFile(kTokenizer);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  train::DatasetOptions o;
  o.tokenizer = tokenizer->get();
  o.chat = MakeChatRenderer(&*formatter);
  o.stop_strings = std::move(stop_strings);
  o.stop_strings.push_back(formatter->eos_token());
  o.vocab_size = 2048;
  o.max_seq_len = 4096;
  MemoryEnv env;
  EXPECT_TRUE(WriteFileAtomically(&env, "chat.jsonl", std::string(kChat) + "\n").ok());
  auto data = train::LoadDataset(&env, "chat.jsonl", o);
  EXPECT_TRUE(data.ok()) << data.status();
  if (!data.ok()) return {};
  const train::Example& ex = data->examples[0];
  std::vector<int32_t> learned;
  for (size_t i = 0; i < ex.labels.size(); ++i) {
    if (ex.labels[i] != train::kIgnoreIndex) learned.push_back(ex.input_ids[i]);
  }
  return {*(*tokenizer)->Decode(ex.input_ids, false), *(*tokenizer)->Decode(learned, false)};
}

TEST(ChatDatasetTest, Qwen25LearnsTheAssistantContentAndItsEndOfTurn) {
  const Learned got = LoadChat("qwen2_5");
  EXPECT_EQ(got.learned, "Hello!<|im_end|>Goodbye.<|im_end|>");
  EXPECT_EQ(got.whole,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\nGoodbye.<|im_end|>\n");
}

TEST(ChatDatasetTest, Qwen3LearnsTheThinkBlockItWritesForTheLastTurn) {
  const Learned got = LoadChat("qwen3");
  EXPECT_EQ(got.learned, "Hello!<|im_end|><think>\n\n</think>\n\nGoodbye.<|im_end|>") << got.whole;
}

TEST(ChatDatasetTest, Llama3LearnsTheAssistantTurns) {
  // Llama 3 Instruct's generation_config.json lists <|eot_id|> among its eos ids.
  const Learned got = LoadChat("llama3", {"<|eot_id|>"});
  EXPECT_EQ(got.learned, "Hello!<|eot_id|>Goodbye.<|eot_id|>") << got.whole;
}

}  // namespace
}  // namespace expertd::server::jobs
