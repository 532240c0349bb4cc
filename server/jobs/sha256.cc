#include "server/jobs/sha256.h"

#include <openssl/evp.h>

#include "absl/strings/escaping.h"

namespace expertd::server::jobs {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // Failing here means the process cannot allocate a few hundred bytes or
  // libcrypto lacks SHA-256: neither is a condition a caller can handle.
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) std::abort();
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::Update(absl::string_view bytes) {
  if (!bytes.empty()) EVP_DigestUpdate(ctx_, bytes.data(), bytes.size());
}

std::string Sha256::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx_, digest, &n);
  return absl::BytesToHexString(absl::string_view(reinterpret_cast<const char*>(digest), n));
}

}  // namespace expertd::server::jobs
